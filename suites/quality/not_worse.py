"""The verdict of "not worse than the baseline" over one or more tasks' paired comparisons.

Fails when any metric is shown worse. Otherwise it is left open (the feature
is then partial, which --vllm-gate=strict fails) when a metric could not
fail a drop of the size required ("underpowered": too few items, no item the
baseline could lose, or both sides at the floor or the ceiling), or when the
interval straddles the tolerance ("undecided": too few items to tell).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance import undecided
from pytest_vllm_conformance.reporting.evidence import Evidence

from .session import Outcome


@dataclass
class NotWorse:
    properties: list[tuple[str, Any]] = field(default_factory=list)  # every figure, for the report
    worse: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    underpowered: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    items: int = 0  # paired items compared, over every metric

    @property
    def failure(self) -> str | None:
        if not self.worse:
            return None
        return (
            "the target is worse than the baseline by more than the tolerance:\n  "
            + "\n  ".join(self.worse)
            + "".join(f"\n  ({note})" for note in self.notes)
        )

    @property
    def left_open(self) -> str | None:
        """Why the comparison could not say "not worse", None when it could."""
        if self.underpowered:
            return "underpowered: " + "; ".join(self.underpowered)
        if self.undecided:
            return "too few items to show the target is not worse: " + "; ".join(self.undecided)
        return None


def not_worse(outcomes: Sequence[Outcome]) -> NotWorse:
    judged, figures = NotWorse(), []
    for outcome in outcomes:
        for comparison in outcome.comparisons:
            judged.properties += comparison.properties().items()
            judged.items += comparison.items
            figures.append(f"{outcome.label} {comparison.figures()}")
            if comparison.verdict == "inconclusive":
                judged.undecided.append(f"{outcome.label} {comparison}")
            if comparison.verdict == "underpowered":
                requirement = "" if comparison.cannot_discriminate else " (quality.max_detectable_drop)"
                judged.underpowered.append(
                    f"{outcome.label} {comparison.metric}: {comparison.items} items, {comparison.power()}{requirement}"
                )
        judged.worse.extend(f"{outcome.label} {comparison}" for comparison in outcome.worse)
        judged.notes.extend(note for note in outcome.notes if note not in judged.notes)
    judged.properties.append(("figures", "; ".join(figures)))
    return judged


def assert_not_worse(outcomes: Sequence[Outcome], vllm_record: Callable[[str, Any], None], evidence: Evidence) -> None:
    """Fails when a metric is shown worse; undecided when one could not be judged (not_worse, above)."""
    judged = not_worse(outcomes)
    for name, value in judged.properties:
        vllm_record(name, value)
    assert judged.failure is None, judged.failure
    if judged.left_open:
        undecided(judged.left_open)
    evidence.judged(judged.items, "paired items", missing="no item was compared")
