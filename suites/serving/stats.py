"""The serving comparisons' statistics: paired log ratios of interleaved round pairs, decided sequentially.

The independent unit is a **round pair**, not a request: the requests of one round share that round's machine
state (a moment of load elsewhere slows them all), so resampling requests as if independent gave intervals too
narrow to trust (one false failure in ten same-against-same runs on a loaded 2-core box, 2026-12-02). Target
and baseline rounds run back to back, A B then B A, so a drift of the machine lands on both halves of a pair;
each pair gives one log ratio, target over baseline, and the pairs' mean is judged with a t interval.

The gate is **sequential**: pairs are added ``pairs_per_look`` at a time, and at each look the interval is
compared with the boundary halfway (in log space) between no loss and the loss the gate is built to find
(``max_slowdown``: 0.2 puts it at ratio 0.894). ``worse`` when the whole interval lies below it, ``not worse``
when above, else another look, until ``looks`` looks or the load budget are spent: then ``undecided``. Each
look spends an equal share of the error (Bonferroni over the planned looks), so stopping at the first decisive
look holds the false-alarm rate over all of them: a server as fast as its baseline is failed, and one slower
by ``max_slowdown`` is passed, each at most ``1 - confidence`` of the time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean, stdev

from pytest_vllm_conformance.protocol.sample_stats import percentile

# The fewest round pairs that decide: the t quantile's expansion holds from four degrees of freedom.
MIN_PAIRS = 5

__all__ = ["Design", "PairedComparison", "compare_pairs", "percentile", "t_quantile"]


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion around the normal's (within 0.3 % for df >= 4)."""
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@dataclass(frozen=True)
class Design:
    """How a comparison decides: the loss it must find, its error per decision, and when it looks."""

    max_slowdown: float  # the loss the gate is built to find, as a share: 0.2 is a target at 0.8 of its baseline
    confidence: float  # 1 - the chance of each wrong decision (failing an equal server, passing a lost one)
    pairs_per_look: int  # round pairs added between two looks (the first look comes after this many)
    looks: int  # planned looks: the error is split evenly over them

    @property
    def floor(self) -> float:
        return 1 - self.max_slowdown

    @property
    def boundary(self) -> float:
        """The ratio that separates ``worse`` from ``not worse``: halfway between 1 and the floor, in log space."""
        return math.sqrt(self.floor)

    @property
    def max_pairs(self) -> int:
        return self.pairs_per_look * self.looks

    def is_look(self, pairs: int) -> bool:
        return pairs > 0 and pairs % self.pairs_per_look == 0 and pairs <= self.max_pairs

    @property
    def one_sided_error(self) -> float:
        return (1 - self.confidence) / self.looks


@dataclass(frozen=True)
class PairedComparison:
    what: str  # "output rate", "time to first token"...
    log_ratios: tuple[float, ...]  # one per round pair, log(target / baseline) of the speed measured
    design: Design

    @property
    def pairs(self) -> int:
        return len(self.log_ratios)

    @property
    def ratio(self) -> float:
        return math.exp(fmean(self.log_ratios))

    @property
    def interval(self) -> tuple[float, float]:
        """The interval at one look's share of the error on each side (the one every look is judged by)."""
        mean = fmean(self.log_ratios)
        if self.pairs < 2:
            return (0.0, math.inf)
        half = (
            t_quantile(1 - self.design.one_sided_error, self.pairs - 1) * stdev(self.log_ratios) / math.sqrt(self.pairs)
        )
        return (math.exp(mean - half), math.exp(mean + half))

    @property
    def verdict(self) -> str:
        """``worse``, ``not worse`` or ``undecided`` (fewer than MIN_PAIRS pairs decide nothing)."""
        if self.pairs < MIN_PAIRS:
            return "undecided"
        low, high = self.interval
        if high < self.design.boundary:
            return "worse"
        if low > self.design.boundary:
            return "not worse"
        return "undecided"

    def describe(self) -> str:
        low, high = self.interval
        spread = stdev(self.log_ratios) if self.pairs > 1 else 0.0
        return (
            f"{self.what}, target/baseline {self.ratio:.3f}, interval [{low:.3f}, {high:.3f}] over {self.pairs} "
            f"round pairs (each pair's log ratio spread {spread:.3f}), boundary {self.design.boundary:.3f} "
            f"between no loss and the {self.design.max_slowdown:.0%} loss the gate must find"
        )


def compare_pairs(what: str, pairs: Sequence[tuple[float | None, float | None]], design: Design) -> PairedComparison:
    """Each pair's (target, baseline) speed (higher is faster); a pair missing either side is left out."""
    ratios = tuple(math.log(a / b) for a, b in pairs if a and b and a > 0 and b > 0)
    return PairedComparison(what, ratios, design)
