"""Sampling parameters judged by their effect on the server's own answers, never by their wording.

The models under test have random weights, so no answer is known in advance:
each check first asks the server for its own greedy (or seeded) answer to a
fixed prompt, then sends the parameter and compares. ``return_token_ids``
(CompletionRequest in vllm/entrypoints/openai/completion/protocol.py at
v0.32.0; the releases before it are not checked yet) gives the tokens
themselves, so a comparison is by token, not by text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PROMPT = "The quick brown fox jumps over the lazy dog. Then"
ANSWER_TOKENS = 12
# A different seed reproducing the first seed's tokens has probability exp(sum of their logprobs); the
# check is decided only when that is below this bound.
SEED_COLLISION_BOUND = 1e-6


def completion_body(model: str, **fields: Any) -> dict[str, Any]:
    """A completions request for PROMPT, greedy unless ``fields`` says otherwise, with its token ids returned."""
    body: dict[str, Any] = {"model": model, "prompt": PROMPT, "max_tokens": ANSWER_TOKENS, "temperature": 0}
    return {**body, "return_token_ids": True, **fields}


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: Any
    completion_tokens: int | None
    logprobs: list[float] | None


def read_completion(payload: dict[str, Any], index: int = 0) -> Completion:
    choice = payload["choices"][index]
    logprobs = choice.get("logprobs") or {}
    usage = payload.get("usage") or {}
    return Completion(
        text=choice.get("text") or "",
        token_ids=list(choice.get("token_ids") or []),
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
        completion_tokens=usage.get("completion_tokens"),
        logprobs=logprobs.get("token_logprobs"),
    )


def collision_chance(logprobs: list[float] | None) -> float | None:
    """The chance that an independent sample repeats these tokens (None when the logprobs are missing)."""
    if not logprobs or any(value is None for value in logprobs):
        return None
    return math.exp(sum(logprobs))


def stop_candidate(text: str) -> tuple[str, str] | None:
    """(stop string, the text before its first occurrence) from the middle of a greedy answer, or None."""
    middle = len(text) // 2
    stop = text[middle : middle + 3]
    if len(stop) < 3 or not stop.strip():
        return None
    return stop, text[: text.find(stop)]


def first_new_token(token_ids: list[int], least_position: int) -> tuple[int, int] | None:
    """(token id, position) of the first token at or after ``least_position`` that did not occur before it."""
    for position in range(least_position, len(token_ids)):
        if token_ids[position] not in token_ids[:position]:
            return token_ids[position], position
    return None
