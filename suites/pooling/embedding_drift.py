"""Embedding drift: the target's vectors against a baseline server's, input by input, as the quality gate holds
logprobs.

An upgrade, another dtype or another kernel moves a model's vectors a little; a broken pooling (vllm#45733: the
last-token pooling transformers 5 broke, self-similarity 0.33) or a relay that rewrites vectors moves them a lot,
and nothing in one server's answers shows it: its vectors agree with each other. So the same inputs go to both
servers, and each pair of vectors is held to a cosine floor (``pooling.drift_min_cosine``) measured from a healthy
change (tiny-bert served in float32 and in bfloat16, docs/pooling.md). Only a comparison made decides: a baseline
that embeds nothing, or not the target's model, leaves the contract undecided, never passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.connection.client import BoundedClient

from .pooled_answers import QUERY, TEXTS, Checked, Unreadable, _quoted, alone, cosine

# The inputs both servers embed: the suite's texts and its query (distinct, 3 to 19 words).
DRIFT_TEXTS = (*TEXTS, QUERY)


@dataclass(frozen=True)
class Side:
    """One server of the comparison: its client and the model id it is asked for."""

    client: BoundedClient
    model: str


def embedding_drift(target: Side, baseline: Side, floor: float, *, model_named: bool = False) -> Checked:
    """``model_named``: the user named the baseline's model (--vllm-baseline-model), so another id is meant."""
    if baseline.model != target.model and not model_named:
        return Checked(
            undecided=f"the baseline serves {baseline.model!r}, not the target's {target.model!r}: "
            "the vectors of two models are not compared"
        )
    try:
        alone(baseline.client, baseline.model, DRIFT_TEXTS[0])
    except Unreadable as exc:
        return Checked(undecided=f"the baseline embeds nothing to compare with: {exc}")
    problems, compared = [], 0
    try:
        for text in DRIFT_TEXTS:
            ours, theirs = alone(target.client, target.model, text), alone(baseline.client, baseline.model, text)
            compared += 1
            if len(ours) != len(theirs):
                problems.append(f"{_quoted(text)}: {len(ours)} values, the baseline's {len(theirs)}")
                continue
            similarity = cosine(ours, theirs)
            if similarity < floor:
                problems.append(
                    f"{_quoted(text)}: cosine {similarity:.6f} to the baseline's vector, below {floor} "
                    "(pooling.drift_min_cosine)"
                )
    except Unreadable as exc:
        return Checked([f"after {compared} of {len(DRIFT_TEXTS)} inputs compared: {exc}"])
    if not compared:
        return Checked(undecided="no input was compared")
    return Checked(problems)
