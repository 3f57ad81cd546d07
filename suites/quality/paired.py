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

Each comparison also states its power, by the gate's own decision rule, as
a *minimum detectable drop*: the smallest true drop ``d`` such that, had the
target lost ``d * n`` of the items the baseline got right and changed nothing
else (the best case for detection: every discordant item points one way),
the same interval method at the same confidence would lie wholly below
``-tolerance``, i.e. the gate would fail it. It is computed from the
baseline's observed per-item values; a real drop mixed with noise needs
more. For values other than 0 and 1, "lost an item" means the item fell from
the baseline's value to the baseline's worst value on any item, best items
first. A baseline with nothing to lose (score 0 on a 0/1 metric) cannot show
any drop, nor can a set too small to clear the interval even when every
right item is lost: the drop is then ``None``, reported as "none possible".

The drop is always above the tolerance (the interval around an observed
drop of exactly the tolerance reaches above ``-tolerance``), so the
requirement says how far past it the gate may stay blind:
``quality.max_detectable_drop`` (default: the tolerance itself), and a
comparison whose minimum detectable drop is above ``tolerance +
max_detectable_drop`` is ``underpowered`` (a skip), unless it is already
shown ``worse``. So is a task on which both sides score the same extreme
value on every item (0 everywhere: the floor; 1 everywhere: the ceiling):
the task cannot discriminate on this model, whatever its interval says.
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

Verdict = Literal["not worse", "inconclusive", "worse", "underpowered"]
NONE_POSSIBLE = "none possible"


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


def newcombe_detectable_drop(baseline_right: int, items: int, confidence: float, tolerance: float) -> float | None:
    """The smallest drop k/items whose best case (k of the baseline's right items lost) the gate fails."""
    neither = items - baseline_right
    for lost in range(1, baseline_right + 1):
        _, high = newcombe_paired_interval(baseline_right - lost, 0, lost, neither, confidence)
        if high < -tolerance:
            return lost / items
    return None


def bootstrap_detectable_drop(baseline_values: np.ndarray, confidence: float, tolerance: float) -> float | None:
    """The smallest drop in the mean, best items first falling to the worst value, that the gate fails.

    ``baseline_values`` are oriented so that higher is better. With the seeded
    resamples fixed, each added loss only lowers every resampled mean, so the
    upper bound falls with each item lost and a bisection finds the first.
    """
    import numpy as np  # here, not at the top: every run collects the quality suite, few compare

    if baseline_values.size == 0:
        return None
    gaps = np.sort(baseline_values - baseline_values.min())[::-1]
    losable = int(np.sum(gaps > 0))

    def shown(lost: int) -> bool:
        differences = np.zeros(baseline_values.size)
        differences[:lost] = -gaps[:lost]
        return bootstrap_paired_interval(differences, confidence)[1] < -tolerance

    if losable == 0 or not shown(losable):
        return None
    low, high = 0, losable  # not shown at low, shown at high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if shown(middle) else (middle, high)
    return float(gaps[:high].sum() / baseline_values.size)


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
    detectable_drop: float | None = None
    baseline_losable_items: int = 0  # the items a drop could come from: the baseline's right (or not worst) ones
    max_detectable_drop: float | None = None  # past the tolerance; None: the tolerance itself
    every_item_scored: float | None = None  # the one value both sides gave every item, if they did
    binary: bool = True

    @property
    def delta(self) -> float:
        return self.target_score - self.baseline_score

    @property
    def required_drop(self) -> float:
        """The drop the gate must be able to fail: the tolerance, plus how far past it it may stay blind."""
        past = self.tolerance if self.max_detectable_drop is None else self.max_detectable_drop
        return self.tolerance + past

    @property
    def verdict(self) -> Verdict:
        low, high = self.interval
        if self.higher_is_better:
            worse, not_worse = high < -self.tolerance, low >= -self.tolerance
        else:
            worse, not_worse = low > self.tolerance, high <= self.tolerance
        if worse:
            return "worse"
        if self.underpowered:
            return "underpowered"
        return "not worse" if not_worse else "inconclusive"

    @property
    def cannot_discriminate(self) -> bool:
        """Both sides at the floor or the ceiling (or any one value) on every item: the task tells nothing here."""
        return self.every_item_scored is not None

    @property
    def underpowered(self) -> bool:
        """The gate could not fail a drop of the required size (none possible counts as blind to any drop)."""
        if self.cannot_discriminate or self.detectable_drop is None:
            return True
        return self.detectable_drop > self.required_drop + 1e-9  # k/n against a sum of two decimals

    def _extreme(self) -> str:
        if not self.binary or self.every_item_scored is None:
            return "the same value"
        best = 1.0 if self.higher_is_better else 0.0
        return "the ceiling" if self.every_item_scored == best else "the floor"

    def figures(self) -> str:
        """One line for the report: n, both scores, the interval and what the items can show."""
        low, high = self.interval
        return (
            f"{self.metric}: {self.items} items, target {self.target_score:.3f}, baseline {self.baseline_score:.3f}, "
            f"interval [{low:+.3f}, {high:+.3f}], {self.power()}"
        )

    def power(self) -> str:
        """What the item count can show, for messages: the minimum detectable drop against the requirement."""
        past = self.required_drop - self.tolerance
        required = f", required at most {self.required_drop:.4g} (tolerance {self.tolerance:g} + {past:g})"
        if self.cannot_discriminate:
            return (
                f"the task cannot discriminate on this model: both sides score {self.every_item_scored:g} "
                f"on every item ({self._extreme()})"
            )
        if self.detectable_drop is None:
            why = (
                "the baseline got no item right, so no drop can show"
                if self.baseline_losable_items == 0
                else f"even losing all {self.baseline_losable_items} items the baseline got right would not fail it"
            )
            return f"minimum detectable drop: {NONE_POSSIBLE} ({why}){required}"
        return f"minimum detectable drop {self.detectable_drop:.4f}{required}"

    def __str__(self) -> str:
        low, high = self.interval
        direction = "higher" if self.higher_is_better else "lower"
        return (
            f"{self.metric}: target {self.target_score:.4f}, baseline {self.baseline_score:.4f}, "
            f"delta {self.delta:+.4f}, {self.confidence:.0%} interval [{low:+.4f}, {high:+.4f}] "
            f"({self.method}, {self.items} paired items: {self.target_better_items} better on the target, "
            f"{self.baseline_better_items} better on the baseline; {direction} is better, "
            f"tolerance {self.tolerance:g}; {self.power()}): "
            f"{self.verdict}"
        )

    def properties(self) -> dict[str, object]:
        """For record_property: both scores, the delta, its interval and the minimum detectable drop."""
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
            "vllm_quality_detectable_drop": (
                NONE_POSSIBLE if self.detectable_drop is None else round(self.detectable_drop, 6)
            ),
            "vllm_quality_required_detectable_drop": round(self.required_drop, 6),
            "vllm_quality_cannot_discriminate": self.cannot_discriminate,
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
    max_detectable_drop: float | None = None,
) -> Comparison:
    """Pair the per-item values by item key; items only one side answered are left out.

    ``max_detectable_drop`` is how far past the tolerance the gate may stay blind (None: the tolerance).
    """
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
        # Relabelled so that 1 is good: the interval of a lower-is-better 0/1 metric is the mirror image.
        losable = both + only_baseline if higher_is_better else neither + only_target
        detectable = newcombe_detectable_drop(losable, len(keys), confidence, tolerance)
    else:
        interval = bootstrap_paired_interval(target_values - baseline_values, confidence)
        method = f"paired bootstrap, {BOOTSTRAP_RESAMPLES} resamples"
        losable = int(np.sum(sign * baseline_values > np.min(sign * baseline_values))) if keys else 0
        detectable = bootstrap_detectable_drop(sign * baseline_values, confidence, tolerance)
    values = np.concatenate([target_values, baseline_values])
    every_item_scored = float(values[0]) if keys and bool((values == values[0]).all()) else None
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
        detectable_drop=detectable,
        baseline_losable_items=losable,
        max_detectable_drop=max_detectable_drop,
        every_item_scored=every_item_scored,
        binary=binary,
    )
