"""Greedy continuations of fixed prompts, compared token by token.

An eval set of a few dozen items moves only when answers get much worse; a
changed kernel or an ignored GPTQ ``g_idx`` changes the logits everywhere,
which shows at once in greedy output. So fixed prompts, sent as token ids
(no tokenizer or chat template in the way), are continued at temperature 0
with ``ignore_eos`` on both servers, and the generated token ids
(``return_token_ids``) must agree. Requests go one at a time: vLLM's greedy
output can drift with batch composition, and a gate must not fail on that.

Exact equality would still fail healthy numerics changes (another dtype, new
kernels): where the top two candidates are nearly tied, either may win. So
each generated position carries its top-k logprobs, and the first divergence
of a prompt is a near-tie when each side's token is in the other side's top-k
and, on both sides, the two tokens' logprobs are within ``near_tie_gap``: the
rule every greedy comparison shares (protocol/greedy_answers.py). After a near-tie the
continuations differ by construction, so that prompt is compared no further.
A random-weight model is near-tied almost everywhere, so near-ties can end
every prompt after a token or two: the comparison then needs a minimum of
tokens found equal in all (``greedy_min_compared_tokens``), and below it is
undecided, not a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, RequestTimeout, TransportFailure
from pytest_vllm_conformance.protocol import greedy_answers
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS
from pytest_vllm_conformance.protocol.greedy_answers import TOP_K, Greedy, NearTie, first_divergence, tie_at
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

DEFAULT_NEAR_TIE_GAP = 0.1  # nats; bfloat16 against float32 moves a logprob by at most about 0.06
# A quarter of 8 prompts x 16 tokens: bfloat16 against float32 compared 77 (near-ties on 4 prompts), broken pairs
# 1-19 before their first divergence (docs/quality-drift.md); near-ties that end every prompt early leave less.
DEFAULT_MIN_COMPARED_TOKENS = 32

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
    top: list[dict[int, float]] | None = field(default=None, repr=False)  # per generated position


def _shown(tie: NearTie) -> str:
    def pair(side: tuple[float | None, float | None]) -> str:
        return ", ".join("not in top-k" if value is None else f"{value:.4f}" for value in side)

    return (
        f"logprobs (target's token, baseline's token): target ({pair(tie.on_first)}), baseline ({pair(tie.on_second)})"
    )


@dataclass(frozen=True)
class Divergence:
    """Where two greedy continuations of one prompt part, if they do."""

    prompt_index: int
    prompt_text: str | None
    position: int | None  # first generated position that differs; None = equal over the compared length
    compared: int
    target_ids: list[int]
    baseline_ids: list[int]
    tie: NearTie | None = None  # both sides' logprobs at the divergence (target first), where both gave top-k
    near_tie_gap: float = DEFAULT_NEAR_TIE_GAP

    @property
    def agrees(self) -> bool:
        return self.position is None

    @property
    def compared_tokens(self) -> int:
        """The tokens found equal: all compared ones, or those before the first divergence."""
        return self.compared if self.position is None else self.position

    @property
    def near_tie(self) -> bool:
        return self.tie is not None and self.tie.accepted(self.near_tie_gap)

    def __str__(self) -> str:
        where = f"prompt {self.prompt_index}" + (f" {self.prompt_text[:40]!r}" if self.prompt_text else "")
        if self.position is None:
            return f"{where}: the first {self.compared} tokens agree"
        window = slice(self.position, self.position + 4)
        text = (
            f"{where}: first diverging generated token at position {self.position} of {self.compared}: "
            f"target {self.target_ids[window]} vs baseline {self.baseline_ids[window]}"
        )
        if self.tie is None:
            return text + " (no top-k logprobs on both sides: not judged as a near-tie)"
        verdict = (
            f"a near-tie (within {self.near_tie_gap:g} on both sides), accepted; compared no further"
            if self.near_tie
            else f"not a near-tie (gap above {self.near_tie_gap:g} or a token outside the other's top-{TOP_K})"
        )
        return f"{text}; {_shown(self.tie)}: {verdict}"


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
            prompts.append(token_ids(client, model, prompt=text, add_special_tokens=False))
        except TokenizeUnavailable as exc:
            raise GreedyUnavailable(str(exc)) from None
    return prompts


def continue_greedily(
    client: BoundedClient, model: str, prompts: list[list[int]], max_tokens: int
) -> list[Continuation]:
    continuations = []
    for prompt in prompts:
        payload = _post(client, COMPLETIONS.path, greedy_answers.greedy_body(model, prompt, max_tokens))
        try:
            choice = payload["choices"][0]
            output = choice["token_ids"]
        except (KeyError, IndexError, TypeError):
            choice, output = {}, None
        if not isinstance(output, list):
            raise GreedyUnavailable(
                "/v1/completions returned no token_ids (return_token_ids needs vLLM 0.10.2 or later)"
            )
        continuations.append(Continuation(prompt, output, _top_logprobs(choice.get("logprobs"), len(output))))
    return continuations


def _top_logprobs(logprobs: Any, length: int) -> list[dict[int, float]] | None:
    """The completions ``top_logprobs`` keyed by token id (``return_tokens_as_token_ids`` writes "token_id:N")."""
    entries = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or len(entries) != length:
        return None
    try:
        return greedy_answers.top_logprobs(entries)
    except (TypeError, ValueError, AttributeError):
        return None


def _tie_at(position: int, target: Continuation, baseline: Continuation) -> NearTie | None:
    if not target.top or not baseline.top or position >= min(len(target.top), len(baseline.top)):
        return None
    return tie_at(position, Greedy(target.output_ids, target.top), Greedy(baseline.output_ids, baseline.top))


def compare(
    target: list[Continuation],
    baseline: list[Continuation],
    compared: int,
    texts: tuple[str, ...] | None = None,
    near_tie_gap: float = DEFAULT_NEAR_TIE_GAP,
) -> list[Divergence]:
    """One Divergence per prompt, over the first ``compared`` generated tokens."""
    found = []
    for index, (mine, theirs) in enumerate(zip(target, baseline, strict=True)):
        position = first_divergence(mine.output_ids, theirs.output_ids, compared)
        found.append(
            Divergence(
                prompt_index=index,
                prompt_text=texts[index] if texts and index < len(texts) else None,
                position=position,
                compared=compared,
                target_ids=mine.output_ids,
                baseline_ids=theirs.output_ids,
                tie=None if position is None else _tie_at(position, mine, theirs),
                near_tie_gap=near_tie_gap,
            )
        )
    return found
