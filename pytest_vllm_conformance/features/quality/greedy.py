"""Greedy continuations of fixed prompts, compared token by token.

An eval set of a few dozen items moves only when answers get much worse; a
changed kernel or an ignored GPTQ ``g_idx`` changes the logits everywhere,
which shows at once in greedy output. So fixed prompts, sent as token ids
(no tokenizer or chat template in the way), are continued at temperature 0
with ``ignore_eos`` on both servers, and the generated token ids
(``return_token_ids``) must agree. Requests go one at a time: vLLM's greedy
output can drift with batch composition, and a gate must not fail on that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.vllm_answers import tokenized
from pytest_vllm_conformance.target.client import BoundedClient, RequestTimeout, TransportFailure

# Varied text, tokenized by the target once; the ids are what both servers continue.
PROMPT_TEXTS = (
    "The lighthouse keeper climbed the stairs at dusk and",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "In 1969 the first people walked on the Moon, and",
    "Ingredients: two cups of flour, one egg, a pinch of salt.",
    "The quick brown fox jumps over the lazy dog. The quick brown",
    '{"name": "conformance", "version": 3, "tags": [',
    "Il était une fois, dans un petit village au bord de la mer,",
    "1, 1, 2, 3, 5, 8, 13, 21,",
)


class GreedyUnavailable(Exception):
    """A server could not produce greedy token ids; the message says why."""


@dataclass(frozen=True)
class Continuation:
    prompt_ids: list[int] = field(repr=False)
    output_ids: list[int]


@dataclass(frozen=True)
class Divergence:
    """Where two greedy continuations of one prompt part, if they do."""

    prompt_index: int
    prompt_text: str | None
    position: int | None  # first generated position that differs; None = equal over the compared length
    compared: int
    target_ids: list[int]
    baseline_ids: list[int]

    @property
    def agrees(self) -> bool:
        return self.position is None

    def __str__(self) -> str:
        where = f"prompt {self.prompt_index}" + (f" {self.prompt_text[:40]!r}" if self.prompt_text else "")
        if self.position is None:
            return f"{where}: the first {self.compared} tokens agree"
        window = slice(self.position, self.position + 4)
        return (
            f"{where}: first diverging generated token at position {self.position} of {self.compared}: "
            f"target {self.target_ids[window]} vs baseline {self.baseline_ids[window]}"
        )


def _post(client: BoundedClient, path: str, body: dict[str, Any]) -> Any:
    try:
        response = client.post(path, body)
    except (TransportFailure, RequestTimeout) as exc:
        raise GreedyUnavailable(f"{path}: {exc}") from None
    if response.status != 200:
        raise GreedyUnavailable(f"{response.describe()}: {response.text[:300]!r}")
    return response.json()


def prompt_ids(client: BoundedClient, model: str, texts: tuple[str, ...] = PROMPT_TEXTS) -> list[list[int]]:
    """The texts as token ids, from the server's own tokenizer."""
    prompts = []
    for text in texts:
        try:
            response = client.post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
        except (TransportFailure, RequestTimeout) as exc:
            raise GreedyUnavailable(f"/tokenize: {exc}") from None
        tokens = tokenized(response)
        if not tokens:
            raise GreedyUnavailable(f"/tokenize gave no token ids for {text!r}")
        prompts.append(tokens)
    return prompts


def continue_greedily(
    client: BoundedClient, model: str, prompts: list[list[int]], max_tokens: int
) -> list[Continuation]:
    continuations = []
    for prompt in prompts:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        }
        payload = _post(client, "/v1/completions", body)
        try:
            output = payload["choices"][0]["token_ids"]
        except (KeyError, IndexError, TypeError):
            output = None
        if not isinstance(output, list):
            raise GreedyUnavailable(
                "/v1/completions returned no token_ids (return_token_ids needs vLLM 0.10.2 or later)"
            )
        continuations.append(Continuation(prompt, output))
    return continuations


def first_divergence(target: list[int], baseline: list[int], compared: int) -> int | None:
    for position in range(compared):
        mine = target[position] if position < len(target) else None
        theirs = baseline[position] if position < len(baseline) else None
        if mine != theirs:
            return position
    return None


def compare(
    target: list[Continuation], baseline: list[Continuation], compared: int, texts: tuple[str, ...] | None = None
) -> list[Divergence]:
    """One Divergence per prompt, over the first ``compared`` generated tokens."""
    found = []
    for index, (mine, theirs) in enumerate(zip(target, baseline, strict=True)):
        found.append(
            Divergence(
                prompt_index=index,
                prompt_text=texts[index] if texts and index < len(texts) else None,
                position=first_divergence(mine.output_ids, theirs.output_ids, compared),
                compared=compared,
                target_ids=mine.output_ids,
                baseline_ids=theirs.output_ids,
            )
        )
    return found
