"""What a serving run's requests say: load failures, latency percentiles against objectives, occupancy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .loadgen import RequestTiming, Round
from .rounds import Gauges, ServingRun
from .stats import Design, PairedComparison, compare_pairs, percentile


def load_failures(timings: Sequence[RequestTiming], prompt_tokens: int, output_tokens: int) -> list[str]:
    """Why each request that did not complete as pinned did not, one line each."""
    found = []
    for number, t in enumerate(timings):
        if t.error:
            found.append(f"request {number}: {t.error}")
        elif (t.prompt_tokens, t.completion_tokens) != (prompt_tokens, output_tokens):
            found.append(
                f"request {number}: usage counted {t.prompt_tokens} prompt and {t.completion_tokens} output tokens, "
                f"pinned {prompt_tokens} and {output_tokens}"
            )
        elif not t.token_times:
            found.append(f"request {number}: no chunk carried generated tokens")
        elif t.tokens_received != t.completion_tokens:
            # What arrived, not what the usage chunk says the server sent: a relay may drop events on the way.
            received = "no token ids" if t.tokens_received is None else f"{t.tokens_received} token ids"
            found.append(
                f"request {number}: the stream delivered {received}, its usage counted {t.completion_tokens} "
                "output tokens (events lost on the way?)"
            )
    return found


@dataclass(frozen=True)
class Latency:
    ttft_p50: float
    ttft_p99: float
    itl_p99: float | None  # of each request's time per output token (decode time over the tokens after the first)
    output_tokens_per_second: float  # the slowest round's, all requests together
    requests: int

    def line(self) -> str:
        itl = f"{self.itl_p99 * 1000:.1f} ms" if self.itl_p99 is not None else "none"
        return (
            f"TTFT p50 {self.ttft_p50 * 1000:.1f} ms, p99 {self.ttft_p99 * 1000:.1f} ms, "
            f"time per output token p99 {itl}, "
            f"{self.output_tokens_per_second:.1f} output tokens/s (slowest round), {self.requests} requests"
        )

    def measured(self, objective: str) -> float | None:
        return {
            "ttft_p50_seconds": self.ttft_p50,
            "ttft_p99_seconds": self.ttft_p99,
            "itl_p99_seconds": self.itl_p99,
            "output_tokens_per_second": self.output_tokens_per_second,
        }[objective]


def output_rates(timings: Sequence[RequestTiming]) -> list[float]:
    """The output rates of the requests that completed: what throughput is compared on."""
    return [t.output_rate for t in timings if not t.error and t.output_rate]


def _median(values: Sequence[float | None]) -> float | None:
    present = sorted(v for v in values if v is not None)
    return percentile(present, 50) if present else None


def _mostly_completed(measured: Round) -> bool:
    """At least half the round's requests completed: the median of the few that did says nothing of the many."""
    return 2 * len(output_rates(measured.timings)) >= max(len(measured.timings), 1)


def round_output_rate(measured: Round) -> float | None:
    """A round's speed for throughput: the median output rate of its completed requests (queueing included);
    None for a round in which fewer than half completed."""
    return _median(output_rates(measured.timings)) if _mostly_completed(measured) else None


RoundSpeed = Callable[[Round], float | None]


def _round_median(value: Callable[[RequestTiming], float | None]) -> RoundSpeed:
    """A round's speed from one figure of its completed requests: the inverse of their median (higher is faster)."""

    def speed(measured: Round) -> float | None:
        if not _mostly_completed(measured):
            return None
        middle = _median([value(t) for t in measured.timings if not t.error])
        return 1 / middle if middle else None

    return speed


def _paired(what: str, run: ServingRun, speed: RoundSpeed, design: Design) -> PairedComparison:
    return compare_pairs(what, [(speed(a), speed(b)) for a, b in zip(run.target, run.baseline, strict=False)], design)


# A client whose own event loop wakes this late (90th percentile of a round, the median round) stamps
# arrivals late and sends late: its rates measure the fight for the cores, not the server.
CLIENT_LAG_BOUND = 0.02


def client_lag(run: ServingRun) -> float | None:
    """The median over every compared round of the client's event-loop lag (90th percentile of the round)."""
    return _median([r.client_lag_p90 for r in (*run.target, *run.baseline)])


def client_too_late(run: ServingRun) -> str | None:
    """Why the comparisons with the baseline cannot be trusted to the client's clock, or None when they can."""
    lag = client_lag(run)
    if lag is None or lag <= CLIENT_LAG_BOUND:
        return None
    return (
        f"the client's own event loop woke {lag * 1000:.0f} ms late (90th percentile of the median round; bound "
        f"{CLIENT_LAG_BOUND * 1000:.0f} ms): the client fights the servers for the cores (vLLM's CPU defaults bind "
        "its threads to every core), so the figures are the fight's"
    )


def throughput(run: ServingRun, design: Design) -> PairedComparison:
    """Target against baseline, round pair by round pair: what the sequential run stops on."""
    return _paired("output rate (median of a round)", run, round_output_rate, design)


def latencies(run: ServingRun, design: Design) -> tuple[PairedComparison, PairedComparison]:
    """Time per output token, then time to first token, against the baseline, judged as throughput is."""
    per_token = _round_median(lambda t: t.time_per_output_token)
    first_token = _round_median(lambda t: t.ttft)
    return (
        _paired("time per output token (median of a round)", run, per_token, design),
        _paired("time to first token (median of a round)", run, first_token, design),
    )


def latency(rounds: Sequence[Round]) -> Latency | None:
    """The percentiles of the rounds' completed requests; None when no request gave a first token."""
    timings = [t for r in rounds for t in r.timings if not t.error]
    ttfts = [t.ttft for t in timings if t.ttft is not None]
    if not ttfts:
        return None
    per_token = [v for v in (t.time_per_output_token for t in timings) if v is not None]
    return Latency(
        percentile(ttfts, 50),
        percentile(ttfts, 99),
        percentile(per_token, 99) if per_token else None,
        min(r.output_tokens_per_second for r in rounds),
        len(ttfts),
    )


# Why an objective's figure could not be measured (the others always can, once a first token came).
UNMEASURED = {
    "itl_p99_seconds": "no request's tokens came in more than one chunk, so no decode time to measure "
    "inter-token latency on (an ingress that buffers the stream?)",
}


@dataclass(frozen=True)
class Objectives:
    """The declared objectives judged against the figures."""

    missed: list[str]  # "ttft_p50_seconds 0.312 against 0.25"
    unmeasured: list[str]  # "itl_p99_seconds: no chunk gaps to ..."
    judged: int  # the objectives with a figure to judge


def judge_objectives(measured: Latency, slo: dict[str, float]) -> Objectives:
    """Each declared objective: missed (a latency over its bound, a throughput under it), met, or unmeasured."""
    missed, unmeasured = [], []
    for objective, bound in sorted(slo.items()):
        value = measured.measured(objective)
        if value is None:
            unmeasured.append(f"{objective}: {UNMEASURED.get(objective, 'no figure')}")
            continue
        worse = value < bound if objective == "output_tokens_per_second" else value > bound
        if worse:
            missed.append(f"{objective} {value:.3f} against {bound:g}")
    return Objectives(missed, unmeasured, len(slo) - len(unmeasured))


def missed_objectives(measured: Latency, slo: dict[str, float]) -> list[str]:
    """Each declared objective the figures miss (an unmeasured one is not missed: see ``judge_objectives``)."""
    return judge_objectives(measured, slo).missed


@dataclass(frozen=True)
class Occupancy:
    samples: int
    peak_running: float | None
    waiting_at_peak: float | None
    peak_waiting: float | None
    peak_kv_cache_usage: float | None
    # The most requests the server held at once, running or waiting: whether the concurrency reached it at all.
    peak_held: float | None = None

    def verdict(self, concurrency: int) -> str:
        """``ran`` (the concurrency running at once), ``queued`` (held, but some waiting) or ``undecided``.

        A closed loop's requests spend part of their life outside the engine (in the API server, between
        two requests of a worker): a sample that never saw the whole concurrency at the server says nothing.
        """
        if self.peak_running is not None and self.peak_running >= concurrency:
            return "ran"
        if self.peak_held is not None and self.peak_held >= concurrency:
            return "queued"
        return "undecided"

    def line(self, concurrency: int) -> str:
        if self.peak_running is None:
            return f"no running-requests gauge in {self.samples} /metrics samples"
        kv = f", KV-cache usage up to {self.peak_kv_cache_usage:.2%}" if self.peak_kv_cache_usage is not None else ""
        return (
            f"running {self.peak_running:g} of {concurrency}, {self.waiting_at_peak or 0:g} waiting at that sample "
            f"(up to {self.peak_waiting or 0:g} waiting){kv}, {self.samples} /metrics samples"
        )


def occupancy(gauges: Sequence[Gauges]) -> Occupancy:
    read = [g for g in gauges if g.running is not None]
    peak = max(read, key=lambda g: (g.running, g.waiting or 0), default=None)
    waiting = [g.waiting for g in gauges if g.waiting is not None]
    usage = [g.kv_cache_usage for g in gauges if g.kv_cache_usage is not None]
    held = [g.running + (g.waiting or 0) for g in read if g.running is not None]
    return Occupancy(
        len(gauges),
        peak.running if peak else None,
        peak.waiting if peak else None,
        max(waiting, default=None),
        max(usage, default=None),
        max(held, default=None),
    )
