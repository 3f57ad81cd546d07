"""How long a sampled answer must be for its watermark to be found at a target p-value.

Unwatermarked, a token scores mean 1 and variance v = (1 - alpha)^2 + alpha^2
(alpha is 0 for single-key Gumbel). A pilot answer gives the watermarked mean
m and spread s per scored token. n scored tokens suffice when
n*m - k*s*sqrt(n) still lies z*sqrt(n*v) above n: z is the target p-value's
normal quantile and k a safety margin in standard deviations. Deduplication
scores only a fraction of the generated tokens, so the plan is divided by
that fraction. Planned per API, because an API whose token ids are
re-tokenized from its text keeps less of the signal.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Plan:
    tokens: int
    basis: str  # why this many, for the report


def answer_length(
    detector: Any,
    pilot_token_ids: Sequence[int],
    pilot_scored_tokens: int,
    *,
    target_p_value: float,
    cap: int,
    min_tokens: int,
    safety_sigmas: float,
) -> Plan:
    """Tokens per answer for a watermarked one to reach ``target_p_value``, from a pilot answer (at most ``cap``)."""
    if pilot_scored_tokens < 2:
        return Plan(cap, f"pilot of {len(pilot_token_ids)} tokens scores too few: the most the context allows")
    scores = detector.token_scores(pilot_token_ids)
    mean, spread = float(scores.mean()), float(scores.std(ddof=1))
    scored_fraction = pilot_scored_tokens / len(pilot_token_ids)
    basis = f"pilot of {len(pilot_token_ids)} tokens: per-token score mean {mean:.2f}, sd {spread:.2f}"
    if mean <= 1.0:
        return Plan(cap, f"{basis}, no watermark signal: the most the context allows")
    alpha = getattr(detector, "alpha", 0.0)
    null_variance = (1 - alpha) ** 2 + alpha**2
    z = statistics.NormalDist().inv_cdf(1 - target_p_value)
    scored = ((z * math.sqrt(null_variance) + safety_sigmas * spread) / (mean - 1.0)) ** 2
    tokens = max(min_tokens, math.ceil(scored / scored_fraction))
    return Plan(min(tokens, cap), f"{basis}, {scored_fraction:.0%} scored; needs {tokens}, cap {cap}")
