"""Teacher-forced scoring: a server's next-token logprobs at every position of a few fixed texts.

The texts are filler documents as long as the context allows, sent as token
ids to ``/v1/completions`` with ``prompt_logprobs`` (vLLM's completions
extension: the actual token's logprob and the top-k at every prompt
position; one request per text, ``max_tokens`` 1). The baseline scores them a
second time inside a batch of decoys (generation requests of other lengths),
which is how ``logprob_drift.py`` measures its noise.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, RequestTimeout, Response, TransportFailure
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

from .long_context import BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER, filler_words

TEXTS = 3
TOP_K = 5  # vLLM's --max-logprobs defaults to 20
# The decoys that share the baseline's second scoring, one per text: generation requests of these prompt
# lengths (at most the text's), so the batch mixes prefills of other lengths with decodes.
DECOY_LENGTHS = (37, 150, 311)
DECOY_TOKENS = 8
# Bytes per scored position in a prompt_logprobs answer with token-id keys, with room to spare.
BYTES_PER_POSITION = 120 * (TOP_K + 1)
TEXT_SEEDS = (5101, 5102, 5103)


class DriftUnavailable(Exception):
    """A server could not score the texts; the message says why."""


@dataclass(frozen=True)
class Scored:
    """One text as one server scored it: at position i, the logprob of token i given tokens before it."""

    actual: list[float | None]  # None at position 0 (nothing before it)
    top: list[dict[int, float]]

    def to_dict(self) -> dict[str, Any]:
        return {"actual": self.actual, "top": top_to_json(self.top)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scored:
        return cls(
            actual=[None if value is None else float(value) for value in data["actual"]],
            top=top_from_json(data["top"]),
        )


def top_to_json(top: list[dict[int, float]]) -> list[dict[str, float]]:
    """Top-k logprobs per position as JSON keeps them: token ids as string keys."""
    return [{str(token): value for token, value in entry.items()} for entry in top]


def top_from_json(top: list[Mapping[str, Any]]) -> list[dict[int, float]]:
    return [{int(token): float(value) for token, value in entry.items()} for entry in top]


def text_ids(client: BoundedClient, model: str, max_model_len: int, texts: int = TEXTS) -> list[list[int]]:
    """``texts`` filler documents of max_model_len - 1 tokens each (room for the one generated token)."""
    length = max_model_len - 1
    documents = []
    for seed in TEXT_SEEDS[:texts]:
        words = " ".join(filler_words(2 * length + 64, seed))
        try:
            tokens = token_ids(
                client,
                model,
                prompt=words,
                add_special_tokens=False,
                max_body=2 * BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER * length + 65536,
                minimum=length,
            )
        except TokenizeUnavailable as exc:
            raise DriftUnavailable(str(exc)) from None
        documents.append(tokens[:length])
    return documents


def _request(model: str, prompt: list[int]) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": TOP_K,
        "return_tokens_as_token_ids": True,
    }


def _read(response: Response, prompt: list[int]) -> Scored:
    if response.status != 200:
        raise DriftUnavailable(f"prompt_logprobs: {response.describe()}: {response.text[:300]!r}")
    try:
        entries = response.json()["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError, ValueError):
        entries = None
    if not isinstance(entries, list) or len(entries) != len(prompt):
        raise DriftUnavailable(
            "/v1/completions gave no prompt_logprobs for every prompt position "
            "(vLLM's completions extension; this server does not offer it)"
        )
    actual: list[float | None] = [None]
    top: list[dict[int, float]] = [{}]
    for position in range(1, len(prompt)):
        entry = entries[position] or {}
        logprobs = {int(token): float(value["logprob"]) for token, value in entry.items()}
        actual.append(logprobs.get(prompt[position]))
        top.append(logprobs)
    return Scored(actual, top)


def _decoy(model: str, prompt: list[int], length: int) -> dict[str, Any]:
    """A generation request on other tokens (the text reversed), so it shares no prefix with the texts.

    Its prompt leaves room for its tokens within the text's length, which fits the context. Its answer is
    not read: a decoy is there to change the batch.
    """
    return {
        "model": model,
        "prompt": prompt[::-1][: max(1, min(length, len(prompt) - DECOY_TOKENS))],
        "max_tokens": DECOY_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }


def score(
    client: BoundedClient, model: str, prompts: Sequence[list[int]], *, among_others: bool = False
) -> list[Scored]:
    """Each prompt scored by the server: one at a time, or all at once inside a batch of decoys (another batch)."""
    cap = max(len(prompt) for prompt in prompts) * BYTES_PER_POSITION + 65536
    calls = [("POST", COMPLETIONS.path, {"json_body": _request(model, prompt), "max_body": cap}) for prompt in prompts]
    if among_others:
        decoys = [
            ("POST", COMPLETIONS.path, {"json_body": _decoy(model, prompt, length), "max_body": 65536})
            for prompt, length in zip(prompts, itertools.cycle(DECOY_LENGTHS))
        ]
        answers: list[Response | BaseException] = client.concurrently(calls + decoys)[: len(calls)]
    else:
        answers = []
        for _, path, kw in calls:
            try:
                answers.append(client.post(path, **kw))
            except (TransportFailure, RequestTimeout) as exc:
                answers.append(exc)
    scored = []
    for answer, prompt in zip(answers, prompts, strict=True):
        if isinstance(answer, BaseException):
            raise DriftUnavailable(f"prompt_logprobs: {answer}")
        scored.append(_read(answer, prompt))
    return scored
