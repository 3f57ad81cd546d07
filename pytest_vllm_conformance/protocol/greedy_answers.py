"""Greedy answers compared: where two answers of one prompt first part, whether at a near-tie, and their drift.

A greedy completion (temperature 0, ``ignore_eos``) is asked with its token ids (``return_token_ids``) and each
generated position's top-k logprobs keyed by token id (``return_tokens_as_token_ids`` writes "token_id:N"). Two
such answers of one prompt are compared token by token; where they first part, the divergence is a near-tie when
each side's token is in the other side's top-k and, on both sides, the two tokens' logprobs are within a gap (vLLM's
own model tests accept a divergence on the top-k rule, tests/models/utils.py ``check_logprobs_close``). Where they
agree, their own tokens' logprobs drift by a mean |difference|. The features that compare greedy answers (the
quality gate, the engine's invariants, LoRA adapters) share these; what a divergence means is each one's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TOP_K = 5


@dataclass(frozen=True)
class Greedy:
    """A greedy answer: its generated token ids and, per generated position, token id -> logprob of its top-k."""

    token_ids: list[int]
    top: list[dict[int, float]]

    def logprob_at(self, position: int) -> float | None:
        return self.top[position].get(self.token_ids[position]) if position < len(self.top) else None


def greedy_body(model: str, prompt: str | list[int], max_tokens: int, **fields: Any) -> dict[str, Any]:
    """A completions request for a greedy answer with its token ids and top-k logprobs; ``fields`` added last."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    return body | {"logprobs": TOP_K, "return_token_ids": True, "return_tokens_as_token_ids": True} | fields


def top_logprobs(entries: list[Any]) -> list[dict[int, float]]:
    """The completions ``top_logprobs`` entries keyed by token id ("token_id:N"); a malformed entry raises."""
    return [{int(str(key).rsplit(":", 1)[-1]): float(value) for key, value in (e or {}).items()} for e in entries]


def first_divergence(first: list[int], second: list[int], compared: int) -> int | None:
    """The first of the ``compared`` positions where the two differ (a shorter one differs where it stops)."""
    for position in range(compared):
        mine = first[position] if position < len(first) else None
        theirs = second[position] if position < len(second) else None
        if mine != theirs:
            return position
    return None


@dataclass(frozen=True)
class NearTie:
    """Both sides' logprobs of both tokens at a divergence: (first's token, second's token) on each side; None: the
    token is not in that side's top-k."""

    on_first: tuple[float | None, float | None]
    on_second: tuple[float | None, float | None]

    def accepted(self, gap: float) -> bool:
        return all(
            mine is not None and theirs is not None and abs(mine - theirs) <= gap
            for mine, theirs in (self.on_first, self.on_second)
        )


def tie_at(position: int, first: Greedy, second: Greedy) -> NearTie:
    """Both sides' logprobs of both tokens at ``position`` (a side without top-k there has neither)."""
    mine, theirs = first.token_ids[position], second.token_ids[position]
    sides = [side.top[position] if position < len(side.top) else {} for side in (first, second)]
    on_first, on_second = ((top.get(mine), top.get(theirs)) for top in sides)
    return NearTie(on_first, on_second)


@dataclass(frozen=True)
class Divergence:
    """Where two greedy answers of one prompt part."""

    position: int
    first: list[int]
    second: list[int]
    tie: NearTie | None  # None: one answer is shorter, and ends there
    gap: float

    @property
    def near_tie(self) -> bool:
        return self.tie is not None and self.tie.accepted(self.gap)

    def window(self, token_ids: list[int]) -> list[int]:
        return token_ids[self.position : self.position + 4]

    @property
    def logprobs(self) -> str:
        if self.tie is None:
            return "one answer is shorter"
        shown = "; ".join(
            f"{name} gives them {', '.join(f'not in top-{TOP_K}' if v is None else f'{v:.4f}' for v in pair)}"
            for name, pair in (("the first", self.tie.on_first), ("the second", self.tie.on_second))
        )
        return f"{shown}, gap {self.gap:g}"

    def __str__(self) -> str:
        kind = "a near-tie" if self.near_tie else "not a near-tie"
        return (
            f"the answers part at generated position {self.position}: {self.window(self.first)} against "
            f"{self.window(self.second)} ({kind}: {self.logprobs})"
        )


def divergence(first: Greedy, second: Greedy, gap: float) -> Divergence | None:
    """Where two greedy answers part, and whether at a near-tie; None: the same tokens."""
    longest = max(len(first.token_ids), len(second.token_ids))
    position = first_divergence(first.token_ids, second.token_ids, longest)
    if position is None:
        return None
    shorter = position >= min(len(first.token_ids), len(second.token_ids))
    tie = None if shorter else tie_at(position, first, second)
    return Divergence(position, first.token_ids, second.token_ids, tie, gap)


def mean_logprob_drift(first: Greedy, second: Greedy) -> float | None:
    """The mean |difference| of the generated tokens' logprobs, over the positions both answers share; None: none
    to compare."""
    shared = [
        abs(a - b)
        for position in range(min(len(first.token_ids), len(second.token_ids)))
        if (a := first.logprob_at(position)) is not None and (b := second.logprob_at(position)) is not None
    ]
    return sum(shared) / len(shared) if shared else None
