"""Capacity at the objective: the highest Poisson arrival rate at which the declared share of requests meets the
goodput objective, searched on the target and the baseline in interleaved trials, and their ratio.

The search (``search``) is plain Python over a ``trial(side, rate, seed)``
callable, so it is tested without a server:

- **Bracket.** Both sides start at the same rate (the caller's: the
  baseline's warm closed loop at the declared concurrency); a side steps up
  by ``STEP`` from its highest rate met, down from its lowest rate missed,
  until one rate met and a higher one missed.
- **Bisect** in log space between the highest rate met and the lowest missed
  above it, while the comparison is undecided and the side's budget lasts.
- **Majority.** A rate's outcome is the majority of its trials; a tie is
  tried again (another seed).
- **Confirm.** A trial near the knee is close to a coin toss (its share sits
  near the declared one), so each end of a bracket that decides the verdict
  is tried once more, with another seed; an outcome that flips widens the
  bracket (below), never narrows it.
- **Envelope.** A side's capacity interval is [the highest rate met below
  every rate missed, the lowest rate missed above every rate met]: with
  outcomes that disagree (a rate met above one missed), it spans every rate
  whose outcome was contradicted. It says where the knee lies if each trial's
  outcome is right; the confirmation is what makes a wrong one visible. It
  does not hold the machine's drift between trials (docs/serving.md).
- **The client.** A trial whose client fell behind its schedule is left out
  of the envelope and caps the side's rates (``Side.ceiling``).
- **Ratio.** Target over baseline, its interval from the two brackets' ends
  (low: target's low over baseline's high). Judged against the boundary
  ``sqrt(1 - max_slowdown)``, halfway in log space between no loss and the
  loss to find: worse when the interval lies wholly below it, not worse when
  wholly above, undecided otherwise. The search stops as soon as the interval
  clears it (confirmed) or both budgets are spent.

Trials alternate target, baseline, baseline, target... so a drift of the
machine lands on both. Each side's trials are bounded by its budget
(``capacity_seconds``), counted in trial wall time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# A side steps its rate by this factor until it brackets its knee.
STEP = 2.0
# A bracket no wider than this (high over low) is not bisected further: trial noise is wider.
RESOLUTION = 1.03
# How far below the starting rate a side that meets nothing is searched (STEP ** -6: 1/64).
MAX_STEPS_DOWN = 6
MAX_STEPS_UP = 8
SEED = 20261206


class Outcome(Protocol):
    """What a trial tells the search: the rate it scheduled, whether it met the share, how long it took, and
    whether the client kept its schedule (``open_loop.Trial`` is one)."""

    @property
    def rate(self) -> float: ...
    @property
    def met(self) -> bool: ...
    @property
    def seconds(self) -> float: ...
    @property
    def client_bound(self) -> str | None: ...


@dataclass
class Side:
    name: str
    trials: list[Outcome] = field(default_factory=list)
    idle: str = ""  # why this side runs no more trials

    @property
    def spent(self) -> float:
        return sum(t.seconds for t in self.trials)

    def tried(self, rate: float) -> int:
        return sum(math.isclose(t.rate, rate) for t in self.trials)

    @property
    def kept(self) -> list[Outcome]:
        """The trials whose client kept its schedule: the only ones that say anything of the server."""
        return [t for t in self.trials if not t.client_bound]

    @property
    def ceiling(self) -> float:
        """The lowest rate at which the client could not keep its schedule (inf: none); no trial goes that high."""
        return min((t.rate for t in self.trials if t.client_bound), default=math.inf)

    def outcomes(self) -> dict[float, bool | None]:
        """Each rate's outcome by the majority of its kept trials: met, missed, or None for a tie."""
        votes: dict[float, list[bool]] = {}
        for trial in self.kept:
            key = next((rate for rate in votes if math.isclose(rate, trial.rate)), trial.rate)
            votes.setdefault(key, []).append(trial.met)
        return {rate: _majority(met) for rate, met in votes.items()}

    def bracket(self) -> tuple[float, float]:
        """The envelope: (highest rate met below every rate missed, lowest missed above every rate met), a rate's
        outcome the majority of its trials and a tie both; 0 and inf where nothing met, or nothing missed. Trials
        whose client fell behind are not in it."""
        outcomes = self.outcomes()
        met = [rate for rate, outcome in outcomes.items() if outcome is not False]
        missed = [rate for rate, outcome in outcomes.items() if outcome is not True]
        low = max((r for r in met if outcomes[r] and all(r < m for m in missed)), default=0.0)
        high = min((m for m in missed if outcomes[m] is False and all(m > r for r in met)), default=math.inf)
        return low, high

    @property
    def client_bound(self) -> str | None:
        return next((t.client_bound for t in self.trials if t.client_bound), None)

    def line(self) -> str:
        low, high = self.bracket()
        shown = "no rate tried met the objective" if low == 0 else f"{low:.2f}"
        return f"{self.name} capacity [{shown}, {high:.2f}] requests/s" if low else f"{self.name}: {shown}"


@dataclass(frozen=True)
class Ratio:
    low: float
    high: float
    boundary: float

    @property
    def estimate(self) -> float:
        """The geometric middle of the interval (its ends when one is open)."""
        if self.low > 0 and math.isfinite(self.high):
            return math.sqrt(self.low * self.high)
        return self.low if self.low > 0 else self.high

    @property
    def verdict(self) -> str:
        if self.high < self.boundary:
            return "worse"
        if self.low > self.boundary:
            return "not worse"
        return "undecided"

    def line(self) -> str:
        return (
            f"capacity ratio target/baseline {self.estimate:.3f}, interval [{self.low:.3f}, {self.high:.3f}], "
            f"boundary {self.boundary:.3f}"
        )


def boundary(max_slowdown: float) -> float:
    """Halfway in log space between no loss (1) and the loss to find (1 - max_slowdown)."""
    return math.sqrt(1 - max_slowdown)


def ratio(target: Side, baseline: Side, max_slowdown: float) -> Ratio:
    t_low, t_high = target.bracket()
    b_low, b_high = baseline.bracket()
    low = t_low / b_high if math.isfinite(b_high) and b_high > 0 else 0.0
    high = t_high / b_low if b_low > 0 else math.inf
    return Ratio(low, high, boundary(max_slowdown))


def _next_rate(side: Side, start: float, deciding: Sequence[float]) -> float | None:
    """The rate of this side's next trial, or None (why in ``side.idle``).

    ``deciding``: the bracket ends a decided verdict rests on; each is tried twice before the verdict stands.
    """
    if not side.trials:
        return start
    if deciding:
        unconfirmed = [rate for rate in deciding if side.tried(rate) < 2]
        if unconfirmed:
            return unconfirmed[0]
        side.idle = "the verdict's end of its bracket confirmed"
        return None
    if not side.kept:  # the client fell behind at every rate tried: lower
        if side.ceiling <= start * STEP**-MAX_STEPS_DOWN:
            side.idle = f"the client kept no schedule, down to {side.ceiling:.2f}/s"
            return None
        return side.ceiling / STEP
    outcomes = side.outcomes()
    tied = [rate for rate, outcome in outcomes.items() if outcome is None]
    if tied:  # a rate whose trials split evenly: one more decides it
        return min(tied, key=side.tried)
    low, high = side.bracket()
    if math.isinf(high):
        highest = max((rate for rate, outcome in outcomes.items() if outcome), default=0.0)
        if highest == 0.0:
            side.idle = "no rate it tried met the objective or missed it"
            return None
        if highest >= start * STEP**MAX_STEPS_UP:
            side.idle = f"every rate met, up to {highest:.2f}/s"
            return None
        if highest * STEP >= side.ceiling:  # below the client's ceiling only
            if side.ceiling / highest <= RESOLUTION:
                side.idle = f"every rate met up to {highest:.2f}/s, and the client cannot offer {side.ceiling:.2f}/s"
                return None
            return math.sqrt(highest * side.ceiling)
        return highest * STEP
    if low == 0.0:
        lowest = min(rate for rate, outcome in outcomes.items() if outcome is False)
        if lowest <= start * STEP**-MAX_STEPS_DOWN:
            side.idle = f"no rate met the objective, down to {lowest:.2f}/s"
            return None
        return lowest / STEP
    if high / low > RESOLUTION:
        return math.sqrt(low * high)
    for rate in (low, high):
        if side.tried(rate) < 2:
            return rate
    side.idle = f"its bracket is within {RESOLUTION - 1:.0%}, both ends confirmed"
    return None


def _majority(met: Sequence[bool]) -> bool | None:
    return None if 2 * sum(met) == len(met) else 2 * sum(met) > len(met)


def _deciding(target: Side, baseline: Side, compared: Ratio) -> dict[str, list[float]]:
    """The bracket ends each side's decided verdict rests on (none while undecided)."""
    t_low, t_high = target.bracket()
    b_low, b_high = baseline.bracket()
    if compared.verdict == "worse":
        return {"target": [t_high], "baseline": [b_low]}
    if compared.verdict == "not worse":
        return {"target": [t_low], "baseline": [b_high]}
    return {"target": [], "baseline": []}


@dataclass
class Search:
    target: Side
    baseline: Side
    ratio: Ratio
    start: float
    stopped: str  # why the search ended

    @property
    def client_bound(self) -> str | None:
        return self.target.client_bound or self.baseline.client_bound

    def line(self) -> str:
        trials = "; ".join(
            f"{side.name} "
            + ", ".join(
                f"{t.rate:.2f}/s {'client behind' if t.client_bound else 'met' if t.met else 'missed'}"
                for t in side.trials
            )
            for side in (self.target, self.baseline)
        )
        behind = f"; trials left out, the client behind its schedule: {self.client_bound}" if self.client_bound else ""
        return (
            f"{self.ratio.line()}; {self.target.line()}, {self.baseline.line()}{behind}; "
            f"started at {self.start:.2f}/s, {self.target.spent:.1f} s + {self.baseline.spent:.1f} s of trials; "
            f"{self.stopped}; trials: {trials}"
        )


def search(
    trial: Callable[[str, float, int], Outcome],
    *,
    start: float,
    budget_seconds: float,
    max_slowdown: float,
) -> Search:
    """Both sides' capacities, trials interleaved target, baseline, baseline, target..., until the ratio's
    verdict is decided and confirmed, both sides have nothing left to try, or both budgets are spent.

    ``trial(side, rate, seed)`` runs one trial on ``side`` ("target" or "baseline"); the seed differs between
    two trials of one side at one rate, and is the same for the two sides' n-th trial at a rate.
    """
    sides = {"target": Side("target"), "baseline": Side("baseline")}
    turn = 0
    while True:
        compared = ratio(sides["target"], sides["baseline"], max_slowdown)
        deciding = _deciding(sides["target"], sides["baseline"], compared)
        ran = False
        order = ("target", "baseline") if turn % 2 == 0 else ("baseline", "target")
        for name in order:
            side = sides[name]
            side.idle = ""
            if side.spent >= budget_seconds:
                side.idle = f"its {budget_seconds:g} s budget is spent"
                continue
            rate = _next_rate(side, start, deciding[name])
            if rate is None:
                continue
            side.trials.append(trial(name, rate, SEED + side.tried(rate)))
            ran = True
        turn += 1
        if not ran:
            compared = ratio(sides["target"], sides["baseline"], max_slowdown)
            stopped = f"stopped: target {sides['target'].idle}, baseline {sides['baseline'].idle}"
            break
    return Search(sides["target"], sides["baseline"], compared, start, stopped)
