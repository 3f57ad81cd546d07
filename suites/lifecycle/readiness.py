"""The start of a server the plugin started, as its clocks show it: judged, never measured here.

The launcher times the start as it happens (``launcher.StartClocks``: /health
first 200, /v1/models first listing the model, a first greedy token, in
seconds from the spawn); these judges only read what it recorded, so they
need nothing of the server and may run at any time of the run, before the
drain stops it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named
from pytest_vllm_conformance.connection.launcher import CLOCKS, StartClocks

NOT_TIMED = (
    "the run started no server, so no start was timed (a server given by URL: its start-up log's phases are the "
    "startup_log suite's)"
)
# The starts of a run, in order: the second (--vllm-serve-second-start) has the first's caches warm.
FIRST, SECOND = "first", "second"


def starts(ctx: CaseContext) -> list[Named]:
    """The starts the run makes (cases of the clocks' checks): the first, and with --vllm-serve-second-start the
    second, each reported apart."""
    return [Named(FIRST), *([Named(SECOND)] if ctx.settings.serve_second_start else [])]


def clocks_of(start: Named, clocks: tuple[StartClocks, ...]) -> StartClocks | None:
    """The clocks of ``start`` among the run's, or None when it made no such start."""
    index = [FIRST, SECOND].index(start.name)
    return clocks[index] if index < len(clocks) else None


def faults(clocks: StartClocks) -> list[str]:
    """Each sign of readiness the server did not reach as a ready server must, named."""
    return [f"{CLOCKS[name]}: {why}" for name, why in clocks.faults.items()]


def unread(clocks: StartClocks) -> list[str]:
    """Each clock not read for a reason that is not the server's fault (a refusal), named."""
    return [f"{CLOCKS[name]}: {why}" for name, why in clocks.unread.items()]


def objective_missed(clocks: StartClocks, seconds: float, basis: str) -> str | None:
    """Why the start missed the declared objective (endpoint readiness within ``seconds``); None when it kept it."""
    ready = clocks.endpoint_ready
    if ready is not None and ready <= seconds:
        return None
    took = f"took {ready:.2f} s" if ready is not None else "was never reached"
    return (
        f"endpoint readiness (/v1/models listing the model) {took}, past lifecycle.ready_within_seconds "
        f"{seconds:g} s ({basis}); {clocks.line()}"
    )


# ---- against a baseline's start (the clocks a --vllm-baseline capture of a started server holds) ----

NO_TOLERANCE = (
    "one start a side is one sample, which no statistic decides (the serving gate's paired intervals need five "
    "pairs at least): declare lifecycle.max_start_growth to hold the start to the baseline's"
)


@dataclass(frozen=True)
class StartClock:
    """One clock of one start (a case of the baseline comparison): ``first endpoint_ready``."""

    start: str
    clock: str

    @property
    def id(self) -> str:
        return f"{self.start} {self.clock}"

    def __str__(self) -> str:
        return self.id


def start_clocks(ctx: CaseContext) -> list[StartClock]:
    """Every clock of every start the run makes, each compared with the baseline's alone."""
    return [StartClock(start.name, clock) for start in starts(ctx) for clock in CLOCKS]


def baseline_clock(baseline_observed: Mapping[str, Any] | None, case: StartClock) -> tuple[float | None, str]:
    """The baseline's reading of ``case``, or None and why it has none."""
    captured = (baseline_observed or {}).get("start_clocks")
    if not captured:
        return None, (
            "the baseline capture holds no start clocks (captured from a server given by URL, or by a plugin "
            "before 0.32's clocks): capture it with --vllm-serve and --vllm-capture-profile"
        )
    seconds = (captured.get(case.start) or {}).get(case.clock)
    if seconds is None:
        return None, f"the baseline capture's {case.start} start has no {CLOCKS[case.clock]} clock"
    return float(seconds), ""


def slower(target: float, baseline: float, max_growth: float) -> str | None:
    """Why ``target`` is slower than ``baseline`` allows (more than ``1 + max_growth`` times it); None when not."""
    bound = baseline * (1 + max_growth)
    if target <= bound:
        return None
    times = f" ({target / baseline:.1f} times)" if baseline > 0 else ""
    return (
        f"took {target:.2f} s, the baseline's {baseline:.2f} s{times}: past 1 + lifecycle.max_start_growth = "
        f"{1 + max_growth:g} times it ({bound:.2f} s)"
    )


def not_read(clocks: StartClocks, clock: str) -> str:
    return f"{CLOCKS[clock]} was not read: {clocks.faults.get(clock) or clocks.unread.get(clock) or 'no reading'}"


def comparison_line(
    case: StartClock, seconds: float | None, baseline: float | None, growth: float | None, basis: str
) -> str:
    """The comparison's figures: the start's clock, the baseline's, and the tolerance it is held to."""
    reading = f"{seconds:.2f} s" if seconds is not None else "not read"
    parts = [f"{case.start} start, {CLOCKS[case.clock]}: {reading}"]
    if baseline is not None:
        parts.append(f"the baseline's {baseline:.2f} s")
    parts.append(f"max growth {growth:g} ({basis})" if growth is not None else "no max growth declared")
    return "; ".join(parts)
