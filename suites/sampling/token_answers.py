"""A request for the sampling checks' fixed prompt, and its answer read by token (greedy or seeded).

The models under test have random weights, so no answer is known in advance:
each check first asks the server for its own greedy (or seeded) answer to a
fixed prompt, then sends the parameter and compares. ``return_token_ids``
(CompletionRequest and ChatCompletionRequest in
vllm/entrypoints/openai/{completion,chat_completion}/protocol.py at v0.28.0
through v0.32.0) gives the tokens themselves, so a comparison is by token,
not by text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.protocol import generation_routes

PROMPT = "The quick brown fox jumps over the lazy dog. Then"
ANSWER_TOKENS = 12
# A different seed reproducing the first seed's tokens has probability exp(sum of their logprobs); the
# check is decided only when that is below this bound.
SEED_COLLISION_BOUND = 1e-6

ROUTES = ("completions", "chat")
PATHS = {
    route.name: route.path
    for route in (
        generation_routes.COMPLETIONS,
        generation_routes.CHAT,
        generation_routes.RESPONSES,
        generation_routes.MESSAGES,
    )
}

# Parameters some release's request model lacks, each with a harmless value: OpenAI's (best_of on
# completions, service_tier and store on chat) and vLLM's own watermarking (a field from 0.30). Each
# must be refused naming it or listed as ignored in the release's `sampling_parameters` fact.
UNSUPPORTED_PROBES: dict[str, dict[str, Any]] = {
    "completions": {"best_of": 1, "watermarking": False},
    "chat": {"service_tier": "auto", "store": False, "watermarking": False},
}


def request_body(route: str, model: str, *, omit: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    """A request for PROMPT on ``route``, greedy unless ``fields`` says otherwise, with its token ids returned
    (completions and chat); ``omit`` leaves out fields it would carry by default (chat's max_tokens, say).

    Responses bounds its answer by max_output_tokens and takes PROMPT as its input; Anthropic's messages take
    a conversation and return no token ids.
    """
    body: dict[str, Any] = {"model": model, "max_tokens": ANSWER_TOKENS, "temperature": 0}
    messages = [{"role": "user", "content": PROMPT}]
    if route == "responses":
        body = {"model": model, "input": PROMPT, "max_output_tokens": ANSWER_TOKENS, "temperature": 0}
    elif route == "messages":
        body["messages"] = messages
    else:
        body |= {"prompt": PROMPT} if route == "completions" else {"messages": messages}
        body["return_token_ids"] = True
    return {key: value for key, value in {**body, **fields}.items() if key not in omit}


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stop_reason: Any
    completion_tokens: int | None
    logprobs: list[float] | None
    tokens: list[str]  # each token's text (completions, when logprobs were asked)


def sampled_logprobs(route: str) -> dict[str, Any]:
    """The fields that ask for the sampled tokens' own logprobs and texts, as each route spells them."""
    return {"logprobs": True} if route == "chat" else {"logprobs": 0}


def read_completion(payload: dict[str, Any], index: int = 0) -> Completion:
    """One choice of a completions or a chat answer (chat's logprobs are a list of per-token entries)."""
    choice = payload["choices"][index]
    logprobs = choice.get("logprobs") or {}
    usage = payload.get("usage") or {}
    entries = logprobs.get("content")
    values: list[Any] | None
    if isinstance(entries, list):
        values, tokens = [e.get("logprob") for e in entries], [e.get("token") or "" for e in entries]
    else:
        values, tokens = logprobs.get("token_logprobs"), list(logprobs.get("tokens") or [])
    return Completion(
        text=choice.get("text") or (choice.get("message") or {}).get("content") or "",
        token_ids=list(choice.get("token_ids") or []),
        finish_reason=choice.get("finish_reason"),
        stop_reason=choice.get("stop_reason"),
        completion_tokens=usage.get("completion_tokens"),
        logprobs=values,
        tokens=tokens,
    )


def streamed_token_ids(chunks: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(streamed chunks carrying a token, token ids they carry) of a stream asked for its token ids, or None
    when no chunk carries any (a release or gateway that streams no token ids)."""
    carrying = [c for chunk in chunks for c in chunk.get("choices") or [] if c.get("token_ids")]
    if not carrying:
        return None
    return len(carrying), sum(len(choice["token_ids"]) for choice in carrying)


def top_logprobs(route: str, choice: dict[str, Any]) -> list[tuple[str, list[tuple[str, float]]]]:
    """Each generated position: (its token, its alternatives best first), from either route's logprobs.

    Completions give the alternatives as a mapping (token -> logprob), ordered by nothing OpenAI promises:
    they are sorted here; chat gives a list, judged as sent.
    """
    logprobs = choice.get("logprobs") or {}
    if route == "chat":
        return [
            (p["token"], [(e["token"], e["logprob"]) for e in p["top_logprobs"]]) for p in logprobs.get("content") or []
        ]
    pairs = zip(logprobs.get("tokens") or [], logprobs.get("top_logprobs") or [], strict=False)
    return [(token, sorted((top or {}).items(), key=lambda item: -item[1])) for token, top in pairs]


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
