"""What comparing the two sides yields: a task's outcome per gated metric, the greedy outcome, the drift scores,
and the exceptions by which a comparison says it cannot be made."""

from __future__ import annotations

from dataclasses import dataclass

from . import greedy, logprob_drift, paired


class NotComparable(Exception):
    """This comparison cannot be made; the message is the skip reason."""


class NoBaseline(NotComparable):
    """No baseline was given: nothing to compare with (the target's results may still be saved)."""


class DriftFailed(Exception):
    """A server could not score the fixed texts; the contract fails with the message."""


@dataclass(frozen=True)
class Outcome:
    """A task's comparisons, one per gated metric."""

    label: str
    comparisons: list[paired.Comparison]
    notes: list[str]

    @property
    def worse(self) -> list[paired.Comparison]:
        return [comparison for comparison in self.comparisons if comparison.verdict == "worse"]


@dataclass(frozen=True)
class GreedyOutcome:
    divergences: list[greedy.Divergence]
    notes: list[str]
    min_compared_tokens: int = greedy.DEFAULT_MIN_COMPARED_TOKENS

    @property
    def compared_tokens(self) -> int:
        """Tokens found equal before each prompt's comparison ended (at its end, or at its first divergence)."""
        return sum(divergence.compared_tokens for divergence in self.divergences)

    @property
    def undecided(self) -> bool:
        """No divergence beyond a near-tie, but near-ties ended the prompts before enough tokens were compared."""
        return not self.diverging and self.compared_tokens < self.min_compared_tokens

    @property
    def diverging(self) -> list[greedy.Divergence]:
        """Divergences that are not near-ties: what fails the contract."""
        return [divergence for divergence in self.divergences if not divergence.agrees and not divergence.near_tie]

    @property
    def near_ties(self) -> list[greedy.Divergence]:
        return [divergence for divergence in self.divergences if divergence.near_tie]

    def figures(self) -> str:
        """One line for the report: how many prompts agreed, which near-ties were accepted."""
        equal = sum(divergence.agrees for divergence in self.divergences)
        compared = self.divergences[0].compared if self.divergences else 0
        ties = ", ".join(f"prompt {tie.prompt_index} at {tie.position}" for tie in self.near_ties)
        return (
            f"{len(self.divergences)} prompts: {equal} equal over {compared} tokens, "
            f"{len(self.near_ties)} near-tie(s) accepted{f' ({ties})' if ties else ''}, "
            f"{len(self.diverging)} diverging; {self.compared_tokens} tokens compared "
            f"(at least {self.min_compared_tokens} required)"
        )


@dataclass
class DriftScores:
    """The fixed texts and each side's scores: the target once, the baseline twice (the second among decoys)."""

    texts: list[list[int]]
    target: list[logprob_drift.Scored]
    baseline: list[logprob_drift.Scored]
    baseline_again: list[list[float | None]] | None  # the actual tokens' logprobs only: enough for the noise
    baseline_max_model_len: int | None

    def noise(self, bucket: logprob_drift.Bucket, tail_abs: float) -> logprob_drift.Movement | None:
        if self.baseline_again is None:
            return None
        again = [logprob_drift.Scored(actual, []) for actual in self.baseline_again]
        return logprob_drift.movement(again, self.baseline, bucket, tail_abs)
