"""Teacher-forced logprob drift: how far the target's next-token logprobs moved, by context position.

An eval set moves only when answers flip; a changed kernel, an ignored GPTQ
``g_idx`` or another YaRN factor moves every logprob first. So a few fixed
texts, as long as the context allows and sent as token ids, are scored by
both servers with ``prompt_logprobs`` (vLLM's completions extension: the
actual token's logprob and the top-k, at every prompt position; one request
per text, ``max_tokens`` 1), and compared position by position. Three
figures are gated, because each misses damage the others see:

* the mean absolute difference of the actual token's logprob (``max_mean_abs``,
  the floor): damage spread over every position;
* the share of positions whose difference exceeds ``tail_abs`` (at most
  ``max_tail_share``): a few positions corrupted badly, which a mean
  dilutes (5 % of positions moved by 0.5 nats is a mean of 0.025);
* the perplexity ratio, exp(mean(baseline logprob - target logprob)), within
  ``max_perplexity_ratio`` either way: a small shift of one sign at every
  position (a 5 % perplexity loss is a mean of 0.049);

and reported: the largest and the 99th-percentile difference, and
KL(baseline || target) estimated on the baseline's top-k (a token missing
from the target's top-k is given the target's lowest returned logprob, an
upper bound, so the estimate errs low).

The positions are bucketed by how far into the context they are: up to 25,
50, 90 and 100 % of ``max_model_len``, with the model's native
``max_position_embeddings`` as one more edge when the profile declares it
(rotary scaling acts past it), so a RoPE or YaRN change shows as drift that
grows with position while short contexts stay clean.

The baseline scores the texts a second time, inside a batch of other
requests (decoys of other lengths that generate while the texts are scored),
to measure its own noise: the batch shape is what moves numerics on a GPU.
The noise never raises a limit. A bucket whose noise is above
1/``noise_margin`` of a limit is *undecided* (a skip): the gate cannot tell
drift from noise there. A figure fails only when it is above its limit and
``noise_margin`` times the noise's same figure, so a drift far above a noisy
baseline still fails. The limits are argued in docs/quality-drift.md from
drifts measured on real servers (healthy changes against broken ones, with
the margin between them); ``bench/drift_table.py`` measures them again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases

from .logprob_scoring import (  # re-exported: the drift gate's inputs
    DECOY_LENGTHS,
    TOP_K,
    DriftUnavailable,
    Scored,
    score,
    text_ids,
    top_from_json,
    top_to_json,
)

__all__ = ["DECOY_LENGTHS", "TOP_K", "DriftUnavailable", "Scored", "score", "text_ids", "top_from_json", "top_to_json"]

BUCKET_PERCENTS = (25, 50, 90, 100)
# The defaults, argued from the measured table in docs/quality-drift.md.
DEFAULT_FLOOR = 0.05
DEFAULT_TAIL_ABS = 0.2
DEFAULT_MAX_TAIL_SHARE = 0.01
DEFAULT_MAX_PERPLEXITY_RATIO = 1.02
DEFAULT_NOISE_MARGIN = 4.0
TAIL_PERCENTILE = 99
WORST_SHOWN = 3


@dataclass(frozen=True)
class Bucket:
    """Positions [start, end) of the context, and what the end is."""

    start: int
    end: int
    name: str  # "25%" ... "100%", or "native"

    @property
    def id(self) -> str:
        return f"to {self.name}" if self.name != "native" else "native positions"

    def __str__(self) -> str:
        return f"positions {self.start}-{self.end - 1} ({self.id})"


@dataclass(frozen=True)
class Thresholds:
    floor: Mapping[str, float]  # bucket name -> floor on the mean |drift|; "*" for the others
    noise_margin: float = DEFAULT_NOISE_MARGIN
    tail_abs: float = DEFAULT_TAIL_ABS
    max_tail_share: float = DEFAULT_MAX_TAIL_SHARE
    max_perplexity_ratio: float = DEFAULT_MAX_PERPLEXITY_RATIO

    def floor_for(self, bucket: Bucket) -> float:
        return self.floor.get(bucket.name, self.floor.get("*", DEFAULT_FLOOR))

    @classmethod
    def from_profile(cls, declared: Mapping[str, Any] | None) -> Thresholds:
        declared = declared or {}
        floor = declared.get("max_mean_abs", DEFAULT_FLOOR)
        floors = dict(floor) if isinstance(floor, Mapping) else {"*": float(floor)}
        return cls(
            floors,
            noise_margin=float(declared.get("noise_margin", DEFAULT_NOISE_MARGIN)),
            tail_abs=float(declared.get("tail_abs", DEFAULT_TAIL_ABS)),
            max_tail_share=float(declared.get("max_tail_share", DEFAULT_MAX_TAIL_SHARE)),
            max_perplexity_ratio=float(declared.get("max_perplexity_ratio", DEFAULT_MAX_PERPLEXITY_RATIO)),
        )


def buckets(max_model_len: int, native_positions: int | None = None) -> list[Bucket]:
    """The context cut at 25/50/90/100 % of max_model_len, and at the native length when it lies inside."""
    edges = {math.ceil(max_model_len * percent / 100): f"{percent}%" for percent in BUCKET_PERCENTS}
    if native_positions and 1 < native_positions < max_model_len and native_positions not in edges:
        edges[native_positions] = "native"
    found, start = [], 1  # position 0 has no logprob
    for end in sorted(edges):
        if end > start:
            found.append(Bucket(start, end, edges[end]))
            start = end
    return found


def drift_buckets(ctx: CaseContext) -> list[Bucket]:
    """The quality.logprob_drift cases: the buckets of the target's context."""
    max_model_len = ctx.server.max_model_len
    if not isinstance(max_model_len, int):
        raise NoCases(f"/v1/models gives no max_model_len for {ctx.server.model!r}")
    declared = ctx.expect.declared("quality", "logprob_drift").value or {}
    return buckets(max_model_len, declared.get("native_positions"))


# ---- comparing ------------------------------------------------------------------


@dataclass(frozen=True)
class Moved:
    text: int
    position: int
    target: float
    baseline: float

    def __str__(self) -> str:
        return f"text {self.text} position {self.position}: target {self.target:.3f}, baseline {self.baseline:.3f}"


@dataclass(frozen=True)
class Movement:
    """How far one scoring of the texts moved from another over a bucket's positions."""

    positions: int
    mean_abs: float
    max_abs: float
    p99_abs: float
    tail_share: float  # of positions whose |difference| exceeds the tail bound
    log_perplexity_ratio: float  # mean(reference - other): above 0 when the other finds the text less likely

    @property
    def perplexity_ratio(self) -> float:
        return math.exp(self.log_perplexity_ratio)

    @classmethod
    def of(cls, differences: Sequence[float], tail_abs: float) -> Movement:
        """From (reference - other) logprob differences, one per position."""
        magnitudes = sorted(abs(d) for d in differences)
        n = len(magnitudes)
        return cls(
            positions=n,
            mean_abs=sum(magnitudes) / n,
            max_abs=magnitudes[-1],
            p99_abs=magnitudes[min(n - 1, math.ceil(n * TAIL_PERCENTILE / 100) - 1)],
            tail_share=sum(m > tail_abs for m in magnitudes) / n,
            log_perplexity_ratio=sum(differences) / n,
        )


@dataclass(frozen=True)
class Check:
    """One gated figure of a bucket: the target's, its limit, and the same figure of the baseline's noise."""

    name: str
    value: float
    limit: float
    noise: float | None
    noise_margin: float
    shown: str  # the value as the message prints it

    @property
    def exceeded(self) -> bool:
        """Above the limit, and so far above a noisy baseline that the noise cannot explain it."""
        return self.value > self.limit and self.value > self.noise_margin * (self.noise or 0.0)

    @property
    def noisy(self) -> bool:
        """The baseline moves against itself by more than 1/noise_margin of the limit: drift cannot be told apart."""
        return self.noise is not None and self.noise > self.limit / self.noise_margin


Verdict = Literal["within", "drifted", "undecided"]

# Below this many scored positions a bucket judges nothing (plugin policy): the tail limit (1 % of
# positions) then allows no position at all, and a mean over a few dozen tokens is one text's accident.
MIN_SCORED_POSITIONS = 100


@dataclass(frozen=True)
class BucketDrift:
    bucket: Bucket
    drift: Movement  # the target against the baseline
    kl_estimate: float | None
    noise: Movement | None  # the baseline against itself; None when only a recording was there
    floor: float
    thresholds: Thresholds
    moved_most: list[Moved] = field(default_factory=list)

    @property
    def checks(self) -> list[Check]:
        t, d, n = self.thresholds, self.drift, self.noise
        gated: list[tuple[str, Callable[[Movement], float], float, str]] = [
            ("mean |drift|", lambda m: m.mean_abs, self.floor, f"{d.mean_abs:.4f}"),
            (f"share of positions moved more than {t.tail_abs:g}", lambda m: m.tail_share, t.max_tail_share,
             f"{d.tail_share:.2%}"),
            ("|log perplexity ratio|", lambda m: abs(m.log_perplexity_ratio), math.log(t.max_perplexity_ratio),
             f"ratio {d.perplexity_ratio:.4f}"),
        ]  # fmt: skip
        return [
            Check(name, of(d), limit, None if n is None else of(n), t.noise_margin, shown)
            for name, of, limit, shown in gated
        ]

    @property
    def verdict(self) -> Verdict:
        checks = self.checks
        if any(check.exceeded for check in checks):
            return "drifted"
        return "undecided" if any(check.noisy for check in checks) else "within"

    @property
    def drifted(self) -> bool:
        return self.verdict == "drifted"

    min_positions = MIN_SCORED_POSITIONS

    @property
    def scored_positions(self) -> int:
        """The positions this bucket judged; 0 (nothing judged) below ``MIN_SCORED_POSITIONS``."""
        return self.drift.positions if self.drift.positions >= self.min_positions else 0

    def limits(self) -> str:
        t = self.thresholds
        return (
            f"limits: mean |drift| {self.floor:g}, at most {t.max_tail_share:.0%} of positions moved more than "
            f"{t.tail_abs:g}, perplexity ratio within {t.max_perplexity_ratio:g} either way; "
            f"the noise may reach 1/{t.noise_margin:g} of each"
        )

    def noise_text(self) -> str:
        if self.noise is None:
            return "baseline noise not measured"
        n = self.noise
        return (
            f"baseline noise (scored again inside a batch of other requests) mean {n.mean_abs:.4f}, "
            f"{n.tail_share:.2%} past {self.thresholds.tail_abs:g}, perplexity ratio {n.perplexity_ratio:.4f}"
        )

    def why(self) -> str:
        """What failed or could not be judged, figure by figure."""
        exceeded = [f"{c.name} {c.shown} above {c.limit:.4g}" for c in self.checks if c.exceeded]
        if exceeded:
            return "; ".join(exceeded)
        return "; ".join(
            f"the noise's {c.name} {c.noise:.4g} is above 1/{c.noise_margin:g} of its limit {c.limit:.4g}"
            for c in self.checks
            if c.noisy and c.noise is not None
        )

    def __str__(self) -> str:
        kl = "n/a" if self.kl_estimate is None else f"{self.kl_estimate:.4f}"
        d = self.drift
        return (
            f"{self.bucket}: mean |logprob drift| {d.mean_abs:.4f} (max {d.max_abs:.4f}, p99 {d.p99_abs:.4f}) over "
            f"{d.positions} positions, {d.tail_share:.2%} moved more than {self.thresholds.tail_abs:g}, "
            f"perplexity ratio {d.perplexity_ratio:.4f}, KL estimate {kl}; {self.noise_text()}; {self.limits()}"
        )

    def figures(self) -> str:
        """One line for the report."""
        d = self.drift
        noise = "not measured" if self.noise is None else f"{self.noise.mean_abs:.4f}"
        return (
            f"{self.bucket}: mean |drift| {d.mean_abs:.4f} (max {d.max_abs:.4f}, p99 {d.p99_abs:.4f}), "
            f"{d.tail_share:.2%} past {self.thresholds.tail_abs:g}, perplexity ratio {d.perplexity_ratio:.4f}, "
            f"baseline noise {noise}, floor {self.floor:g}: {self.verdict}"
        )

    def properties(self) -> dict[str, object]:
        t, d, n = self.thresholds, self.drift, self.noise
        not_measured = "not measured"
        return {
            "vllm_quality_drift_bucket": str(self.bucket),
            "vllm_quality_drift_positions": d.positions,
            "vllm_quality_drift_mean_abs": round(d.mean_abs, 6),
            "vllm_quality_drift_max_abs": round(d.max_abs, 6),
            "vllm_quality_drift_p99_abs": round(d.p99_abs, 6),
            "vllm_quality_drift_tail_share": round(d.tail_share, 6),
            "vllm_quality_drift_tail_abs": t.tail_abs,
            "vllm_quality_drift_max_tail_share": t.max_tail_share,
            "vllm_quality_drift_perplexity_ratio": round(d.perplexity_ratio, 6),
            "vllm_quality_drift_max_perplexity_ratio": t.max_perplexity_ratio,
            "vllm_quality_drift_kl_estimate": "n/a" if self.kl_estimate is None else round(self.kl_estimate, 6),
            "vllm_quality_drift_noise": not_measured if n is None else round(n.mean_abs, 6),
            "vllm_quality_drift_noise_tail_share": not_measured if n is None else round(n.tail_share, 6),
            "vllm_quality_drift_noise_perplexity_ratio": not_measured if n is None else round(n.perplexity_ratio, 6),
            "vllm_quality_drift_noise_margin": t.noise_margin,
            "vllm_quality_drift_threshold": self.floor,
            "vllm_quality_drift_verdict": self.verdict,
        }


def _kl_at(baseline: dict[int, float], target: dict[int, float]) -> float | None:
    if not baseline or not target:
        return None
    lowest = min(target.values())
    return sum(math.exp(lp) * (lp - target.get(token, lowest)) for token, lp in baseline.items())


def _pairs(target: Sequence[Scored], baseline: Sequence[Scored], bucket: Bucket):
    """(text, position, target's logprob, baseline's) at every position of the bucket both scored."""
    for text, (mine, theirs) in enumerate(zip(target, baseline, strict=True)):
        for position in range(bucket.start, min(bucket.end, len(mine.actual), len(theirs.actual))):
            if mine.actual[position] is not None and theirs.actual[position] is not None:
                yield text, position, mine.actual[position], theirs.actual[position]


def movement(other: Sequence[Scored], reference: Sequence[Scored], bucket: Bucket, tail_abs: float) -> Movement | None:
    """How far ``other`` moved from ``reference`` in the bucket; None when no position was scored by both."""
    differences = [theirs - mine for _, _, mine, theirs in _pairs(other, reference, bucket)]
    return Movement.of(differences, tail_abs) if differences else None


def compare(
    target: Sequence[Scored],
    baseline: Sequence[Scored],
    bucket: Bucket,
    thresholds: Thresholds,
    noise: Movement | None,
) -> BucketDrift | None:
    """The drift in one bucket; None when no position of it was scored on both sides."""
    moved: list[Moved] = []
    kls: list[float] = []
    for text, position, mine, theirs in _pairs(target, baseline, bucket):
        moved.append(Moved(text, position, mine, theirs))
        kl = _kl_at(baseline[text].top[position], target[text].top[position])
        if kl is not None:
            kls.append(kl)
    if not moved:
        return None
    return BucketDrift(
        bucket=bucket,
        drift=Movement.of([m.baseline - m.target for m in moved], thresholds.tail_abs),
        kl_estimate=sum(kls) / len(kls) if kls else None,
        noise=noise,
        floor=thresholds.floor_for(bucket),
        thresholds=thresholds,
        moved_most=sorted(moved, key=lambda m: -abs(m.target - m.baseline))[:WORST_SHOWN],
    )
