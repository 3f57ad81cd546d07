"""The statistical gate: is the target worse than the baseline on the same items?

Both servers answer the same items, so the comparison is paired: an item
both get right (or both wrong) says nothing about a difference, and only the
discordant items move it. That makes a paired interval far narrower than
comparing two scores as if they were independent samples.

* Per-item values of 0 or 1 (``exact_match``, ``acc``): Newcombe's
  square-and-add (hybrid score) interval for a difference of paired
  proportions (Newcombe 1998, Statistics in Medicine 17:2635, with the
  continuity-corrected correlation), built from the Wilson interval of each
  score. It stays inside
  [-1, 1] and behaves at 0 % and 100 %, where the Wald interval collapses to
  a point; a set a random-weight model scores 0 on gives a wide interval,
  not a certain one.
* Other per-item values averaged into the score: a paired bootstrap of the
  mean difference (seeded, so a run is reproducible).

The gate fails only when the whole two-sided interval lies beyond the
tolerance on the bad side: the target is shown worse by more than the
tolerance, and a run on an unchanged server fails at most (1 - confidence)/2
of the time. An interval that straddles the tolerance is ``inconclusive``
(too few items to tell either way); the verdict says so rather than calling
it a pass on the evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20260529

Verdict = Literal["not worse", "inconclusive", "worse"]


def wilson_interval(successes: int, trials: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_paired_interval(
    both: int, only_target: int, only_baseline: int, neither: int, confidence: float
) -> tuple[float, float]:
    """Interval for (target score - baseline score) from a 2x2 table of paired 0/1 outcomes."""
    n = both + only_target + only_baseline + neither
    if n == 0:
        return -1.0, 1.0
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    target_p = (both + only_target) / n
    baseline_p = (both + only_baseline) / n
    target_low, target_high = wilson_interval(both + only_target, n, z)
    baseline_low, baseline_high = wilson_interval(both + only_baseline, n, z)
    margins = (both + only_target) * (only_baseline + neither) * (both + only_baseline) * (only_target + neither)
    # Correlation of the paired outcomes, continuity-corrected as Newcombe recommends (a raw phi
    # makes the interval too narrow when most items agree: 89 % coverage for a nominal 95 % in
    # our simulation); 0 (independence, the wide case) when a margin is empty.
    cross = both * neither - only_target * only_baseline
    if not margins or 0 <= cross <= n / 2:
        phi = 0.0
    else:
        phi = (cross - n / 2 if cross > 0 else cross) / math.sqrt(margins)
    below = math.sqrt(
        max(
            0.0,
            (target_p - target_low) ** 2
            - 2 * phi * (target_p - target_low) * (baseline_high - baseline_p)
            + (baseline_high - baseline_p) ** 2,
        )
    )
    above = math.sqrt(
        max(
            0.0,
            (target_high - target_p) ** 2
            - 2 * phi * (target_high - target_p) * (baseline_p - baseline_low)
            + (baseline_p - baseline_low) ** 2,
        )
    )
    difference = target_p - baseline_p
    return max(-1.0, difference - below), min(1.0, difference + above)


def bootstrap_paired_interval(differences: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval of the mean of per-item differences, resampling items."""
    import numpy as np  # here, not at the top: every run collects the quality suite, few compare

    if differences.size == 0:
        return -math.inf, math.inf
    generator = np.random.default_rng(BOOTSTRAP_SEED)
    picks = generator.integers(0, differences.size, size=(BOOTSTRAP_RESAMPLES, differences.size))
    means = differences[picks].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    """Target against baseline on one metric of one task, over the items both answered."""

    metric: str
    higher_is_better: bool
    items: int
    target_score: float
    baseline_score: float
    interval: tuple[float, float]
    confidence: float
    tolerance: float
    method: str
    target_better_items: int
    baseline_better_items: int

    @property
    def delta(self) -> float:
        return self.target_score - self.baseline_score

    @property
    def verdict(self) -> Verdict:
        low, high = self.interval
        if self.higher_is_better:
            worse, not_worse = high < -self.tolerance, low >= -self.tolerance
        else:
            worse, not_worse = low > self.tolerance, high <= self.tolerance
        return "worse" if worse else "not worse" if not_worse else "inconclusive"

    def __str__(self) -> str:
        low, high = self.interval
        direction = "higher" if self.higher_is_better else "lower"
        return (
            f"{self.metric}: target {self.target_score:.4f}, baseline {self.baseline_score:.4f}, "
            f"delta {self.delta:+.4f}, {self.confidence:.0%} interval [{low:+.4f}, {high:+.4f}] "
            f"({self.method}, {self.items} paired items: {self.target_better_items} better on the target, "
            f"{self.baseline_better_items} better on the baseline; {direction} is better, "
            f"tolerance {self.tolerance:g}): "
            f"{self.verdict}"
        )

    def properties(self) -> dict[str, object]:
        """For record_property: both scores, the delta and its interval."""
        return {
            "vllm_quality_metric": self.metric,
            "vllm_quality_target_score": round(self.target_score, 6),
            "vllm_quality_baseline_score": round(self.baseline_score, 6),
            "vllm_quality_delta": round(self.delta, 6),
            "vllm_quality_interval": f"[{self.interval[0]:.6f}, {self.interval[1]:.6f}]",
            "vllm_quality_confidence": self.confidence,
            "vllm_quality_tolerance": self.tolerance,
            "vllm_quality_items": self.items,
            "vllm_quality_items_better_on_target": self.target_better_items,
            "vllm_quality_items_better_on_baseline": self.baseline_better_items,
            "vllm_quality_method": self.method,
            "vllm_quality_verdict": self.verdict,
        }


def compare(
    metric: str,
    target: Mapping[str, float],
    baseline: Mapping[str, float],
    *,
    higher_is_better: bool,
    tolerance: float,
    confidence: float,
) -> Comparison:
    """Pair the per-item values by item key; items only one side answered are left out."""
    import numpy as np  # here, not at the top: every run collects the quality suite, few compare

    keys = sorted(set(target) & set(baseline))
    target_values = np.array([float(target[key]) for key in keys])
    baseline_values = np.array([float(baseline[key]) for key in keys])
    sign = 1 if higher_is_better else -1
    better_on_target = int(np.sum(sign * (target_values - baseline_values) > 0))
    better_on_baseline = int(np.sum(sign * (target_values - baseline_values) < 0))
    binary = bool(np.isin(target_values, (0.0, 1.0)).all() and np.isin(baseline_values, (0.0, 1.0)).all())
    if binary:
        both = int(np.sum((target_values == 1) & (baseline_values == 1)))
        only_target = int(np.sum((target_values == 1) & (baseline_values == 0)))
        only_baseline = int(np.sum((target_values == 0) & (baseline_values == 1)))
        neither = len(keys) - both - only_target - only_baseline
        interval = newcombe_paired_interval(both, only_target, only_baseline, neither, confidence)
        method = "Newcombe paired score interval"
    else:
        interval = bootstrap_paired_interval(target_values - baseline_values, confidence)
        method = f"paired bootstrap, {BOOTSTRAP_RESAMPLES} resamples"
    return Comparison(
        metric=metric,
        higher_is_better=higher_is_better,
        items=len(keys),
        target_score=float(target_values.mean()) if keys else math.nan,
        baseline_score=float(baseline_values.mean()) if keys else math.nan,
        interval=interval,
        confidence=confidence,
        tolerance=tolerance,
        method=method,
        target_better_items=better_on_target,
        baseline_better_items=better_on_baseline,
    )
