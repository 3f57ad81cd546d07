"""An open loop: requests arrive at Poisson times of a fixed seed, whatever the server has in hand.

A closed loop offers a concurrency and measures the rate the server keeps
up; an open loop offers a rate and measures whether the server keeps up with
it: each request is launched at its scheduled time as a task on the
plugin's bounded client, so a slow server meets a growing queue, as a
deployment's callers make one. Each request is the closed loop's streamed
completion (``loadgen._one``, ``SseReader``), timed the same way, and judged
against a goodput objective: time to first token and time per output token
within their bounds.

The client can fall behind too (two cores shared with the server): each
send's lateness against its schedule is kept, and a trial whose achieved
rate departs from the scheduled one measured the client, not the server
(``Trial.client_bound``).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_vllm_conformance.connection.client import AsyncBoundedClient
from pytest_vllm_conformance.protocol.sample_stats import percentile

from .loadgen import RequestTiming, Workload, _one

# How often the loop looks at the requests in flight for ones that have already missed the objective.
CHECK_EVERY = 0.05
# A trial whose sends kept less than this share of the scheduled rate (or bunched past its inverse, catching up
# after a stall) measured the client, not the server.
MIN_ACHIEVED_SHARE = 0.9
# httpx's pool holds 100 connections by default: past that a request waits in the client, unseen by its schedule.
MAX_IN_FLIGHT = 96


@dataclass(frozen=True)
class Goodput:
    """The objective a request meets: its first token within ``ttft_seconds``, each later one within
    ``tpot_seconds`` on average (None: not bounded), its answer whole; ``share`` of the requests must meet it."""

    ttft_seconds: float | None
    tpot_seconds: float | None
    share: float

    @classmethod
    def of(cls, declared: dict[str, float]) -> Goodput:
        return cls(declared.get("ttft_seconds"), declared.get("tpot_seconds"), float(declared.get("share", 0.9)))

    def meets(self, timing: RequestTiming, output_tokens: int) -> bool:
        """A finished request: answered whole (no error, the pinned output length) within both bounds."""
        if timing.error or timing.ttft is None or timing.completion_tokens != output_tokens:
            return False
        if self.ttft_seconds is not None and timing.ttft > self.ttft_seconds:
            return False
        tpot = timing.time_per_output_token
        return self.tpot_seconds is None or (tpot is not None and tpot <= self.tpot_seconds)

    def missed_already(self, timing: RequestTiming, output_tokens: int, now: float) -> bool:
        """A request still in flight that can no longer meet the objective, whatever comes next."""
        if timing.error:
            return True
        if not timing.token_times:
            return self.ttft_seconds is not None and now - timing.started > self.ttft_seconds
        # The rest arriving at once would still give at least this time per output token.
        decoding = (now - timing.token_times[0]) / max(output_tokens - 1, 1)
        return self.tpot_seconds is not None and decoding > self.tpot_seconds

    def allowed_misses(self, requests: int) -> int:
        """The most requests of ``requests`` that may miss while the share still holds."""
        return requests - math.ceil(self.share * requests - 1e-9)

    def describe(self) -> str:
        bounds = [
            f"TTFT <= {self.ttft_seconds:g} s" if self.ttft_seconds is not None else "",
            f"time per output token <= {self.tpot_seconds * 1000:g} ms" if self.tpot_seconds is not None else "",
        ]
        return f"{self.share:.0%} of requests with {' and '.join(b for b in bounds if b) or 'a whole answer'}"


def arrival_times(rate: float, count: int, seed: int) -> list[float]:
    """``count`` Poisson arrival times at ``rate`` a second, from 0: the same seed gives the same pattern, scaled."""
    draw = random.Random(seed)
    times, now = [], 0.0
    for _ in range(count):
        now += draw.expovariate(rate)
        times.append(now)
    return times


@dataclass(frozen=True)
class Sent:
    """One request of a trial: when it was due, and its timing (``timing.started``: when it was sent)."""

    due: float
    timing: RequestTiming
    met: bool

    @property
    def lateness(self) -> float:
        return self.timing.started - self.due


@dataclass(frozen=True)
class Trial:
    """One open-loop trial at one scheduled rate."""

    rate: float  # scheduled, requests a second
    planned: int  # arrivals scheduled
    sent: tuple[Sent, ...]
    seconds: float  # wall time, from the first due time to the last answer (or the stop)
    stopped_early: bool  # it missed the share before every request was sent or answered
    peak_in_flight: int
    share: float  # the declared share, for the outcome

    @property
    def met_requests(self) -> int:
        return sum(s.met for s in self.sent)

    @property
    def met(self) -> bool:
        """At least the declared share of the planned requests met the objective (one never sent did not)."""
        return self.met_requests >= math.ceil(self.share * self.planned - 1e-9)

    @property
    def kept_schedule(self) -> float | None:
        """The scheduled span of the sends over their actual span (1: every send on time; 0.8: the client sent at
        0.8 of the rate its schedule asked); None with too few sends to tell."""
        if len(self.sent) < 5:
            return None
        sent = self.sent[-1].timing.started - self.sent[0].timing.started
        due = self.sent[-1].due - self.sent[0].due
        return due / sent if sent > 0 else None

    @property
    def lateness_p99(self) -> float:
        return percentile([s.lateness for s in self.sent], 99) if self.sent else 0.0

    @property
    def client_bound(self) -> str | None:
        """Why this trial measured the client rather than the server; None when its sends kept their schedule."""
        kept = self.kept_schedule
        if kept is not None and not MIN_ACHIEVED_SHARE <= kept <= 1 / MIN_ACHIEVED_SHARE:
            return (
                f"at {self.rate:.2f}/s scheduled the client sent at {kept:.0%} of its schedule's rate "
                f"(sends {self.lateness_p99 * 1000:.0f} ms late, p99)"
            )
        if self.peak_in_flight >= MAX_IN_FLIGHT:
            return (
                f"at {self.rate:.2f}/s {self.peak_in_flight} requests were in flight, the client's connection limit "
                "(more would wait in the client, unseen by their schedule)"
            )
        return None

    def line(self) -> str:
        stop = f", stopped after {len(self.sent)} sent" if self.stopped_early else ""
        return f"{self.rate:.2f}/s: {self.met_requests}/{self.planned} met{stop}"


@dataclass(frozen=True)
class OpenLoop:
    """Poisson arrivals of a fixed seed, each request a task launched at its time on the bounded client.

    ``run`` stops early once more requests have missed than the share allows: the outcome is known, and an
    overloaded trial would otherwise hold the server (and the next trial) for its whole queue."""

    goodput: Goodput

    async def run(self, client: AsyncBoundedClient, workload: Workload, rate: float, seed: int) -> Trial:
        planned = workload.requests
        allowed = self.goodput.allowed_misses(planned)
        output_tokens = workload.output_tokens
        timings: list[tuple[float, RequestTiming]] = []
        tasks: list[asyncio.Task[RequestTiming]] = []
        peak = 0

        def missed(now: float) -> int:
            count = 0
            for index, (_, timing) in enumerate(timings):
                if tasks[index].done():
                    count += not self.goodput.meets(timing, output_tokens)
                else:
                    count += self.goodput.missed_already(timing, output_tokens, now)
            return count

        start = time.perf_counter() + CHECK_EVERY
        stopped = False
        last_check = start
        for index, offset in enumerate(arrival_times(rate, planned, seed)):
            due = start + offset
            while (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(min(wait, CHECK_EVERY))
            now = time.perf_counter()
            if now - last_check >= CHECK_EVERY:
                last_check = now
                if missed(now) > allowed:
                    stopped = True
                    break
            in_flight = sum(not t.done() for t in tasks)
            if in_flight >= MAX_IN_FLIGHT:  # the client cannot offer more: this trial says nothing of the server
                peak, stopped = in_flight, True
                break
            timing = RequestTiming(started=time.perf_counter())
            timings.append((due, timing))
            tasks.append(asyncio.create_task(_one(client, workload, index, timing)))
            peak = max(peak, in_flight + 1)
        while not stopped and not all(t.done() for t in tasks):
            await asyncio.wait([t for t in tasks if not t.done()], timeout=CHECK_EVERY)
            if missed(time.perf_counter()) > allowed:
                stopped = True
        ended = time.perf_counter()
        for task in tasks:
            task.cancel()  # the caller hangs up: vLLM aborts the request
        await asyncio.gather(*tasks, return_exceptions=True)
        for task, (_, timing) in zip(tasks, timings, strict=True):
            if task.cancelled():
                timing.error = timing.error or "not awaited: the trial had already missed the share"
                timing.ended = timing.ended or ended
        sent = tuple(Sent(due, t, not t.error and self.goodput.meets(t, output_tokens)) for due, t in timings)
        return Trial(rate, planned, sent, ended - start, stopped, peak, self.goodput.share)


def requests_for(rate: float, seconds: float, least: int) -> int:
    """A trial's arrivals: ``seconds`` worth at ``rate``, at least ``least`` (a share of fewer says little)."""
    return max(least, math.ceil(rate * seconds))


def lateness(trials: Sequence[Trial]) -> float:
    """The p99 lateness of every send of these trials, in seconds."""
    late = [s.lateness for t in trials for s in t.sent]
    return percentile(late, 99) if late else 0.0
