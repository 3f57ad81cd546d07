"""A real load generator as a witness: AIPerf's JSON export read, and the same four figures computed from our own
per-request timings, so that the two can be set side by side.

The four figures, defined alike on both sides:

- output throughput: the output tokens of every request over the wall time of the run (AIPerf's
  ``output_token_throughput``, its profiling phase's tokens over its duration);
- TTFT p50: the median over requests of the first generated token's arrival after the request was sent;
- time per output token p50: the median over requests of the decode time over the tokens after the first,
  ``(last token's arrival - first token's arrival) / (completion_tokens - 1)`` (AIPerf's ``inter_token_latency``,
  its request latency less its TTFT over its output length less one); never the gaps between reads, which vLLM
  and the network fold several tokens into;
- goodput: the share of requests that met the objective, TTFT and time per output token each within its bound
  (AIPerf's ``good_request_fraction`` under ``--goodput "time_to_first_token:MS inter_token_latency:MS"``).

Plain Python: nothing here imports pytest or AIPerf. The file format read is AIPerf's
``profile_export_aiperf.json`` (schema 1.x, AIPerf 0.13): each metric a top-level key holding its ``unit`` and
``avg``/``p50``/..., the run's configuration under ``input_config``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .loadgen import RequestTiming

# A summary export is a few hundred KB; a file far larger is not one.
MAX_FILE_BYTES = 16 * 1024 * 1024
# The units AIPerf's JSON gives its time metrics in, in seconds.
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}


class WitnessFileError(ValueError):
    """The file is not a summary AIPerf wrote, or lacks a figure the comparison needs."""


@dataclass(frozen=True)
class Slo:
    """The objective a request meets: first token within ``ttft_seconds``, each later one within ``tpot_seconds``."""

    ttft_seconds: float
    tpot_seconds: float

    def met_by(self, timing: RequestTiming) -> bool:
        ttft, per_token = timing.ttft, time_per_output_token(timing)
        return (
            timing.error is None
            and ttft is not None
            and per_token is not None
            and ttft <= self.ttft_seconds
            and per_token <= self.tpot_seconds
        )

    def aiperf_goodput(self) -> str:
        """The same objective as AIPerf's ``--goodput`` argument (its display unit: ms)."""
        return f"time_to_first_token:{self.ttft_seconds * 1000:.6g} inter_token_latency:{self.tpot_seconds * 1000:.6g}"

    def __str__(self) -> str:
        return f"TTFT <= {_ms(self.ttft_seconds)} ms and time per output token <= {_ms(self.tpot_seconds)} ms"


@dataclass(frozen=True)
class Figures:
    """One run's four figures, from either side."""

    source: str  # who measured: "ours", "AIPerf 0.13.0"
    requests: int
    output_tokens_per_second: float
    ttft_p50: float  # seconds
    tpot_p50: float | None  # seconds; None: no request decoded two tokens
    good_share: float | None  # None: no objective given
    slo: Slo | None = None
    detail: str = ""  # what the run was: its workload as its own file says
    # The fewest and most prompt and output tokens the server counted for a request (None: not reported).
    prompt_tokens: tuple[int, int] | None = None
    output_tokens: tuple[int, int] | None = None

    def line(self) -> str:
        tpot = f"{_ms(self.tpot_p50)} ms" if self.tpot_p50 is not None else "not measured"
        text = (
            f"{self.source}: output {self.output_tokens_per_second:.1f} tokens/s, TTFT p50 {_ms(self.ttft_p50)} ms, "
            f"time per output token p50 {tpot}"
        )
        if self.good_share is not None and self.slo is not None:
            text += f", goodput {self.good_share:.0%} of requests within {self.slo}"
        return f"{text} ({self.requests} requests{'; ' + self.detail if self.detail else ''})"


def time_per_output_token(timing: RequestTiming) -> float | None:
    """Decode time over the tokens after the first, as the serving gate reads it (``RequestTiming``)."""
    return timing.time_per_output_token


def ours(timings: Sequence[RequestTiming], seconds: float, slo: Slo | None = None) -> Figures:
    """Our figures for ``timings``, requests that ran within ``seconds`` of wall time."""
    answered = [t for t in timings if t.error is None]
    ttfts = [t.ttft for t in answered if t.ttft is not None]
    per_token = [p for t in answered if (p := time_per_output_token(t)) is not None]
    if not ttfts or seconds <= 0:
        raise ValueError("no request of the run produced a token")
    tokens = sum(t.completion_tokens or 0 for t in answered)
    good = sum(slo.met_by(t) for t in timings) / len(timings) if slo is not None else None
    prompts = [t.prompt_tokens for t in answered if t.prompt_tokens is not None]
    outputs = [t.completion_tokens for t in answered if t.completion_tokens is not None]
    return Figures(
        "ours",
        len(timings),
        tokens / seconds,
        statistics.median(ttfts),
        statistics.median(per_token) if per_token else None,
        good,
        slo,
        prompt_tokens=(min(prompts), max(prompts)) if prompts else None,
        output_tokens=(min(outputs), max(outputs)) if outputs else None,
    )


def read_aiperf(path: str | Path) -> Figures:
    """The four figures of AIPerf's ``profile_export_aiperf.json``; raises WitnessFileError."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise WitnessFileError(f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WitnessFileError(f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB: not an AIPerf summary")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise WitnessFileError(f"is not JSON: {exc}") from None
    if not isinstance(data, dict) or "aiperf_version" not in data:
        raise WitnessFileError("is not AIPerf's JSON summary (profile_export_aiperf.json: no aiperf_version)")
    config = _dict(data.get("input_config"))
    slos = _dict(config.get("slos"))
    slo = None
    if _number(slos.get("time_to_first_token")) is not None and _number(slos.get("inter_token_latency")) is not None:
        slo = Slo(slos["time_to_first_token"] / 1000, slos["inter_token_latency"] / 1000)
    good = _stat(data, "good_request_fraction", "avg", required=False)
    return Figures(
        f"AIPerf {data['aiperf_version']}",
        int(_stat(data, "request_count", "avg")),
        _stat(data, "output_token_throughput", "avg"),
        _seconds(data, "time_to_first_token"),
        _seconds(data, "inter_token_latency", required=False),
        good if slo is not None else None,
        slo,
        _workload(config),
        prompt_tokens=_range(data, "usage_prompt_tokens") or _range(data, "input_sequence_length"),
        output_tokens=_range(data, "usage_completion_tokens") or _range(data, "output_sequence_length"),
    )


def witness_line(path: str | Path) -> str:
    """One line for the serving report: the figures of the AIPerf run in ``path``, or why it cannot be read."""
    try:
        return f"witness {read_aiperf(path).line()}, from {Path(path).name}"
    except WitnessFileError as exc:
        return f"witness: --vllm-serving-witness {Path(path).name} {exc}"


def between(before: Figures, after: Figures) -> Figures:
    """Our figures for the moment between two runs of ours: each rate and time the geometric mean of the two, the
    goodput share their mean. A witness run sandwiched between them is compared with this, so that a machine
    growing busier or quieter over the three runs weighs on both sides alike."""

    def mean(a: float | None, b: float | None) -> float | None:
        return math.sqrt(a * b) if a is not None and b is not None else None

    share = None
    if before.good_share is not None and after.good_share is not None:
        share = (before.good_share + after.good_share) / 2
    throughput, ttft = (
        mean(before.output_tokens_per_second, after.output_tokens_per_second),
        mean(before.ttft_p50, after.ttft_p50),
    )
    assert throughput is not None and ttft is not None
    return Figures(
        before.source,
        before.requests + after.requests,
        throughput,
        ttft,
        mean(before.tpot_p50, after.tpot_p50),
        share,
        before.slo,
        prompt_tokens=_union(before.prompt_tokens, after.prompt_tokens),
        output_tokens=_union(before.output_tokens, after.output_tokens),
    )


def _union(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    return (min(a[0], b[0]), max(a[1], b[1])) if a is not None and b is not None else a or b


@dataclass(frozen=True)
class Agreement:
    """How a witness's figures stand to ours over interleaved pairs of runs: per figure, the median over the pairs
    of theirs over ours (for goodput, theirs less ours: a share)."""

    pairs: int
    throughput: float
    ttft: float
    tpot: float | None  # None: a side measured no time per output token
    goodput: float | None  # None: a side judged no objective

    def outside(self, tolerance: float, share_tolerance: float) -> list[str]:
        """Each figure further from agreement than ``tolerance`` (relative; goodput: ``share_tolerance``, absolute)."""
        found = []
        for name, ratio in [
            ("output throughput", self.throughput),
            ("TTFT p50", self.ttft),
            ("time per output token p50", self.tpot),
        ]:
            if ratio is None:
                found.append(f"{name}: not measured by both")
            elif abs(ratio - 1) > tolerance:
                found.append(
                    f"{name}: witness/ours {ratio:.3f} (median of {self.pairs} pairs), outside 1 +- {tolerance}"
                )
        if self.goodput is None:
            found.append("goodput: not judged by both")
        elif abs(self.goodput) > share_tolerance:
            found.append(
                f"goodput: witness less ours {self.goodput:+.1%} of requests (median of {self.pairs} pairs), "
                f"more than {share_tolerance:.0%}"
            )
        return found

    def __str__(self) -> str:
        tpot = f"{self.tpot:.3f}" if self.tpot is not None else "-"
        goodput = f"{self.goodput:+.1%}" if self.goodput is not None else "-"
        return (
            f"witness/ours over {self.pairs} pairs (medians): output throughput {self.throughput:.3f}, "
            f"TTFT p50 {self.ttft:.3f}, time per output token p50 {tpot}; goodput share witness less ours {goodput}"
        )


def agreement(pairs: Sequence[tuple[Figures, Figures]]) -> Agreement:
    """``pairs`` of (ours, witness) measured back to back: the median over pairs of each figure's ratio, so that
    a moment when the machine was busier for one side than the other weighs as one pair, not as the whole."""
    if not pairs:
        raise ValueError("no pair of runs to compare")

    def median_ratio(figure: str) -> float | None:
        ratios = [
            b / a
            for mine, theirs in pairs
            if (a := getattr(mine, figure)) and (b := getattr(theirs, figure)) is not None
        ]
        return statistics.median(ratios) if len(ratios) == len(pairs) else None

    shares = [
        theirs.good_share - mine.good_share
        for mine, theirs in pairs
        if mine.good_share is not None and theirs.good_share is not None
    ]
    throughput, ttft = median_ratio("output_tokens_per_second"), median_ratio("ttft_p50")
    assert throughput is not None and ttft is not None, "both sides always measure throughput and TTFT"
    return Agreement(
        len(pairs),
        throughput,
        ttft,
        median_ratio("tpot_p50"),
        statistics.median(shares) if len(shares) == len(pairs) else None,
    )


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _stat(data: dict[str, Any], tag: str, stat: str, *, required: bool = True) -> Any:
    metric = data.get(tag)
    value = _number(metric.get(stat)) if isinstance(metric, dict) else None
    if value is None and required:
        raise WitnessFileError(f"has no {tag} {stat} (AIPerf writes it for a streamed run that completed requests)")
    return value


def _seconds(data: dict[str, Any], tag: str, *, required: bool = True) -> Any:
    value = _stat(data, tag, "p50", required=required)
    if value is None:
        return None
    unit = data[tag].get("unit")
    if unit not in _SECONDS:
        raise WitnessFileError(f"gives {tag} in {unit!r}, not a unit of time")
    return value * _SECONDS[unit]


def _range(data: dict[str, Any], tag: str) -> tuple[int, int] | None:
    low, high = _stat(data, tag, "min", required=False), _stat(data, tag, "max", required=False)
    return (int(low), int(high)) if low is not None and high is not None else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _workload(config: dict[str, Any]) -> str:
    """What the run sent, as far as its configuration says: endpoint, concurrency, prompt and output lengths."""
    parts = []
    endpoint = _dict(config.get("endpoint"))
    if isinstance(endpoint.get("type"), str):
        parts.append(f"{endpoint['type']}{', streamed' if endpoint.get('streaming') is True else ''}")
    for phase in map(_dict, _list(config.get("phases"))):
        if phase.get("kind") == "profiling" and _number(phase.get("concurrency")):
            parts.append(f"concurrency {phase['concurrency']:g}")
    datasets = _list(config.get("datasets"))
    prompts = _dict(_dict(datasets[0]).get("prompts")) if datasets else {}
    isl, osl = _number(_dict(prompts.get("isl")).get("mean")), _number(_dict(prompts.get("osl")).get("mean"))
    if isl is not None and osl is not None:
        parts.append(f"{isl:g} prompt and {osl:g} output tokens")
    return ", ".join(parts)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g}"
