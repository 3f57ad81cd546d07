"""The serving figures' statistics: percentiles, and the ratio of medians with a bootstrap interval.

Throughput is compared as the ratio of the medians of per-request output
rates (tokens over the request's whole time, queueing included), target over
baseline, from rounds interleaved A, B, A, B so that a drift of the machine
lands on both sides. The interval is a percentile bootstrap: both samples
resampled independently, the ratio of their medians taken each time. A
comparison fails only when the whole interval lies below ``1 - max_slowdown``
and every pair of interleaved rounds shows the slowdown on its own, passes
when the whole interval lies above, and is undecided otherwise: too few
requests, or too much noise, to tell. The bootstrap treats a round's requests
as independent, but a moment of load elsewhere on the machine slows a whole
round (seen: one false failure in 10 same-versus-same runs on a loaded 2-core
box, the interval [0.36, 0.58] from one slow round), so a slowdown one round
pair does not show is the machine's, not the server's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_vllm_conformance.protocol.sample_stats import percentile

__all__ = ["Comparison", "compare_medians", "percentile"]

RESAMPLES = 2000
SEED = 20261202  # a fixed seed: the same figures give the same interval, run after run


@dataclass(frozen=True)
class Comparison:
    ratio: float  # median(target) / median(baseline)
    low: float
    high: float
    confidence: float
    floor: float  # 1 - max_slowdown
    target_n: int
    baseline_n: int
    # Each interleaved pair of rounds' own ratio of median rates, target over baseline.
    round_ratios: tuple[float, ...] = ()

    @property
    def rounds_disagree(self) -> bool:
        """Some round pair shows no slowdown past the floor, though the pooled interval does."""
        return any(ratio >= self.floor for ratio in self.round_ratios)

    @property
    def verdict(self) -> str:
        """``worse`` (the interval and every round pair below the floor), ``not worse`` (the interval above it)
        or ``undecided``."""
        if self.high < self.floor:
            return "undecided" if self.rounds_disagree else "worse"
        if self.low >= self.floor:
            return "not worse"
        return "undecided"

    def describe(self) -> str:
        return (
            f"target/baseline ratio of median output rates {self.ratio:.3f}, {self.confidence:.0%} interval "
            f"[{self.low:.3f}, {self.high:.3f}] ({self.target_n} vs {self.baseline_n} requests), "
            f"floor {self.floor:.2f}"
            + (f"; per round pair {', '.join(f'{r:.3f}' for r in self.round_ratios)}" if self.round_ratios else "")
        )


def compare_medians(
    target: Sequence[float],
    baseline: Sequence[float],
    *,
    confidence: float,
    max_slowdown: float,
    round_pairs: Sequence[tuple[Sequence[float], Sequence[float]]] = (),
) -> Comparison | None:
    """The ratio of medians and its bootstrap interval; None when either side has fewer than two values.

    ``round_pairs``: each interleaved pair of rounds' values (target, baseline), for the per-round check.
    """
    if len(target) < 2 or len(baseline) < 2:
        return None
    a, b = np.asarray(target, dtype=float), np.asarray(baseline, dtype=float)
    rng = np.random.default_rng(SEED)
    ratios = np.median(rng.choice(a, (RESAMPLES, a.size)), axis=1) / np.median(
        rng.choice(b, (RESAMPLES, b.size)), axis=1
    )
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    per_round = tuple(float(np.median(t) / np.median(b)) for t, b in round_pairs if len(t) and len(b))
    return Comparison(
        float(np.median(a) / np.median(b)),
        float(low),
        float(high),
        confidence,
        1 - max_slowdown,
        a.size,
        b.size,
        per_round,
    )
