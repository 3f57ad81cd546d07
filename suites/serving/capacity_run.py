"""The capacity search on live servers: the baseline the options name, the warm-up kept apart, the trials.

Capacity needs a baseline that can be loaded now (``--vllm-baseline-url``):
a saved run holds closed-loop rounds, not the rates a server kept up with.
The same refusals as the throughput comparison apply (the target itself,
another model). Each side first gets one request alone (the cold one),
then a closed loop at the declared concurrency (``max(warm_up_requests,
2 x concurrency)`` requests); both are reported apart and none is in any
trial. The baseline's closed-loop rate is where both searches start.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import AsyncBoundedClient, BoundedClient
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.live_baseline import LiveBaseline
from pytest_vllm_conformance.connection.settings import Settings

from . import capacity, capacity_picture, picture, serving_run
from .loadgen import ClosedLoop, RequestTiming, Round, Workload
from .open_loop import Goodput, OpenLoop, Trial, requests_for

# A trial lasts this long at its rate, with at least this many arrivals: a share of fewer requests says little.
TRIAL_SECONDS = 2.0
TRIAL_LEAST_REQUESTS = 20
# The warm closed loop sends this many requests per unit of the declared concurrency: two waves, so that its rate,
# where both searches start, is not one batch's.
WARM_WAVES = 2
# The capacity trials take prompts from here on: none that the closed-loop rounds of this run sent (a prompt
# sent before is served from vLLM's prefix cache).
FIRST_PROMPT = 1024


@dataclass(frozen=True)
class Warm:
    """One side's warm-up: one request alone (the cold one: the first of this contract's), then a closed loop at
    the declared concurrency (a closed loop: the rate the server keeps up at that concurrency). None is in a trial.
    """

    cold: RequestTiming
    warm: Round
    concurrency: int

    @property
    def cold_seconds(self) -> float | None:
        return self.cold.ended - self.cold.started if not self.cold.error else None

    @property
    def rate(self) -> float | None:
        """The warm closed loop's completed requests a second; None when none completed."""
        done = sum(not t.error for t in self.warm.timings)
        return done / self.warm.seconds if done and self.warm.seconds > 0 else None

    def line(self, name: str) -> str:
        cold, rate = self.cold_seconds, self.rate
        cold_text = f"{cold:.3f} s" if cold is not None else f"failed ({self.cold.error})"
        rate_text = f"{rate:.2f} requests/s" if rate is not None else "no request completed"
        return (
            f"{name} warm-up apart: first request alone {cold_text}, then {len(self.warm.timings)} at concurrency "
            f"{self.concurrency}: {rate_text}"
        )


@dataclass
class Capacity:
    """What the capacity contract judges, or why it cannot judge."""

    search: capacity.Search | None = None
    warm: dict[str, Warm] = field(default_factory=dict)
    baseline: str = ""
    unusable: str | None = None  # why the baseline named cannot be compared with (the contract fails)
    cannot: str | None = None  # why nothing could be searched (undecided)
    trials: dict[str, list[Trial]] = field(default_factory=dict)
    seconds: float = 0.0  # wall time of the whole search, warm-ups included
    picture: str | None = None  # the goodput-against-rate picture's file name, beside the report
    picture_not_drawn: str | None = None  # why a report has no such picture

    def line(self) -> str:
        warm = "; ".join(w.line(name) for name, w in self.warm.items())
        found = self.search.line() if self.search else (self.cannot or self.unusable or "")
        why = f"; the capacity picture was not drawn: {self.picture_not_drawn}" if self.picture_not_drawn else ""
        return f"{found}; {warm}; {self.seconds:.1f} s in all; against {self.baseline}{why}"

    def draw(self, report: Path | None, objective: Goodput) -> None:
        """With a report, the search's trials as a picture beside it (``capacity_picture``), or why not."""
        if report is None or self.search is None:
            return
        path = picture.picture_path(report, "capacity")
        self.picture_not_drawn = capacity_picture.draw(path, self.trials, self.search, objective, self.baseline)
        self.picture = path.name if self.picture_not_drawn is None else None


def measure(
    values: dict[str, Any],
    goodput: Goodput,
    budget_seconds: float,
    *,
    settings: Settings,
    facts: ServerFacts,
    expect: Expectations,
    client: BoundedClient,
    ingress_client: BoundedClient,
    progress: Callable[[str], None] | None = None,
) -> Capacity:
    """Warm each side, then search both capacities (raises rounds.NoPrompt when no prompt can be built).
    ``progress`` is told after each trial."""
    began = time.perf_counter()
    found = Capacity()
    baseline = serving_run.open_baseline(settings, facts)
    if isinstance(baseline, str):
        found.unusable = baseline
        return found
    if not isinstance(baseline, LiveBaseline):
        found.cannot = (
            "capacity is searched on a baseline that can be loaded now: --vllm-baseline-url "
            "(a saved run holds closed-loop rounds, not the rates a server kept up with)"
        )
        return found
    target_workload = serving_run.plan(client, facts, values, expect)
    refused = serving_run.live_refusal(baseline, settings, facts, client, target_workload, expect)
    if refused:
        baseline.client.close()
        found.unusable = refused
        return found
    found.baseline = f"{settings.baseline_url} (interleaved in this run)"
    with baseline.client as baseline_client:
        workloads = {
            "target": replace(target_workload, offset=FIRST_PROMPT),
            "baseline": replace(serving_run.plan(baseline_client, baseline.facts, values, expect), offset=FIRST_PROMPT),
        }
        clients = {"target": ingress_client, "baseline": baseline_client}
        taken = {"target": 0, "baseline": 0}

        def fresh(name: str, requests: int) -> Workload:
            workload = workloads[name]
            used = taken[name]
            taken[name] += requests
            return replace(workload, requests=requests, offset=workload.offset + used)

        for name in ("target", "baseline"):
            found.warm[name] = _warm_up(
                clients[name], fresh(name, 1), fresh(name, max(values["warm_up_requests"], values["concurrency"]))
            )
        rate = found.warm["baseline"].rate
        if rate is None:
            found.cannot = "no warm-up request completed on the baseline (its closed loop sets the starting rate)"
            found.seconds = time.perf_counter() - began
            return found
        loop = OpenLoop(goodput)
        found.trials = {"target": [], "baseline": []}

        def trial(name: str, rate: float, seed: int) -> Trial:
            workload = fresh(name, requests_for(rate, TRIAL_SECONDS, TRIAL_LEAST_REQUESTS))
            ran = clients[name].run(lambda c: loop.run(c, workload, rate, seed))
            found.trials[name].append(ran)
            if progress is not None:
                progress(f"{sum(len(trials) for trials in found.trials.values())} trial(s), the last at {rate:.2f}/s")
            return ran

        found.search = capacity.search(
            trial, start=rate, budget_seconds=budget_seconds, max_slowdown=values["max_slowdown"]
        )
    found.seconds = time.perf_counter() - began
    found.draw(settings.report, goodput)
    return found


def _warm_up(client: BoundedClient, cold: Workload, warm: Workload) -> Warm:
    """One request alone, then the warm closed loop; neither is in a trial."""

    async def alone(c: AsyncBoundedClient) -> Round:
        return await ClosedLoop().run(c, replace(cold, concurrency=1))

    async def closed(c: AsyncBoundedClient) -> Round:
        return await ClosedLoop().run(c, warm)

    first = client.run(alone)
    return Warm(first.timings[0], client.run(closed), warm.concurrency)
