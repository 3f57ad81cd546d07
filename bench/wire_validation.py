"""What the wire suite's validation costs per MB of body.

The wire suite judges every answer against our JSON Schemas (jsonschema, pure
Python) and parses every stream event by event. Its own answers are a few KB,
but a deployment that asks for many logprobs can answer far more, so this
prints the cost of one MB, no server needed:

1. a non-streamed completion dense with ``top_logprobs`` (the heaviest answer
   kind per byte: many small objects), judged as ``completion``;
2. a streamed chat answer with logprobs, parsed as SSE and each chunk judged
   as ``chat_chunk``, as the framing contracts read it.

Bodies are built here in vLLM's shapes (random tokens, fixed seed), so the
figure is repeatable; it is the median of ``--rounds`` timings.

    python -m bench.wire_validation [--megabytes 1] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from pytest_vllm_conformance.protocol import schemas
from pytest_vllm_conformance.protocol import sse as stream

TOP_LOGPROBS = 5


def _token(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(1, 6)))


def completion_with_logprobs(target_bytes: int, rng: random.Random) -> bytes:
    """One /v1/completions answer whose logprobs grow until the body is ``target_bytes``."""
    tokens: list[str] = []
    top: list[dict[str, float]] = []
    body = b""
    while len(body) < target_bytes:
        for _ in range(200):
            tokens.append(_token(rng))
            top.append({_token(rng): -rng.random() * 10 for _ in range(TOP_LOGPROBS)})
        answer = {
            "id": "cmpl-bench",
            "object": "text_completion",
            "created": 1764547200,
            "model": "tiny-llama",
            "choices": [
                {
                    "index": 0,
                    "text": "".join(tokens),
                    "logprobs": {
                        "text_offset": list(range(len(tokens))),
                        "token_logprobs": [-rng.random() for _ in tokens],
                        "tokens": tokens,
                        "top_logprobs": top,
                    },
                    "finish_reason": "length",
                    "stop_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 4, "total_tokens": 4 + len(tokens), "completion_tokens": len(tokens)},
        }
        body = json.dumps(answer).encode()
    return body


def chat_stream_with_logprobs(target_bytes: int, rng: random.Random) -> bytes:
    """A streamed /v1/chat/completions answer, one token per event, up to ``target_bytes``."""
    events: list[bytes] = []
    size = 0
    while size < target_bytes:
        token = _token(rng)
        top = [{"token": _token(rng), "logprob": -rng.random() * 10, "bytes": None} for _ in range(TOP_LOGPROBS)]
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1764547200,
            "model": "tiny-llama",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": token} if events else {"role": "assistant", "content": token},
                    "logprobs": {
                        "content": [{"token": token, "logprob": -rng.random(), "bytes": None, "top_logprobs": top}],
                        "refusal": None,
                    },
                    "finish_reason": None,
                }
            ],
        }
        event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        events.append(event)
        size += len(event)
    return b"".join(events) + b"data: [DONE]\n\n"


def judge_completion(body: bytes) -> None:
    schemas.judge("completion", json.loads(body))


def judge_chat_stream(body: bytes) -> None:
    for event in stream.parse(body).chunks():
        schemas.judge("chat_chunk", event.payload)


def seconds_per_mb(work: Callable[[bytes], None], body: bytes, rounds: int) -> tuple[float, list[float]]:
    work(body)  # compiles the validator, as the first answer of a run does
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        work(body)
        timings.append(time.perf_counter() - started)
    megabytes = len(body) / 1e6
    return statistics.median(timings) / megabytes, timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=1.0, help="size of each body")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(20261201)
    target = int(args.megabytes * 1e6)
    cases = {
        "completion with top_logprobs=5 (one JSON body)": (judge_completion, completion_with_logprobs(target, rng)),
        "chat stream with top_logprobs=5 (SSE, every chunk)": (
            judge_chat_stream,
            chat_stream_with_logprobs(target, rng),
        ),
    }
    for name, (work, body) in cases.items():
        per_mb, timings = seconds_per_mb(work, body, args.rounds)
        shown = ", ".join(f"{t:.2f}" for t in timings)
        print(f"{name}: {len(body) / 1e6:.2f} MB, {per_mb:.2f} s per MB (median of {args.rounds}: {shown} s)")


if __name__ == "__main__":
    main()
