"""The Gamma survival functions behind the detectors' p-values, in plain Python.

Under no watermark a token's score is Exp(1), so a sum of n scores is
Gamma(n, 1); the dual-key score is moment-matched to a Gamma too. scipy is
not a dependency, so the regularized upper incomplete gamma function is
computed here (a series, or a continued fraction where it converges faster).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["gamma_survival_integer_shape", "regularized_gamma_q"]


def gamma_survival_integer_shape(score: float, shape: int) -> float:
    """``P[Gamma(shape, 1) >= score]`` for integer ``shape``.

    Equals ``exp(-s) * sum_{k<shape} s**k / k!``. The terms are summed in log
    space (log-sum-exp) because ``s**k / k!`` overflows for the scores of long
    texts while the final probability is still representable. Same convention
    as vLLM: 1.0 when ``shape <= 0`` or ``score <= 0``, clipped to <= 1.
    """
    shape = int(shape)
    score = float(score)
    if shape <= 0 or score <= 0:
        return 1.0
    log_score = math.log(score)
    # log(s**k / k!) for k = 0..shape-1, as a running sum like vLLM's loop.
    log_terms = np.empty(shape, dtype=np.float64)
    log_terms[0] = 0.0
    if shape > 1:
        np.cumsum(
            log_score - np.log(np.arange(1, shape, dtype=np.float64)),
            out=log_terms[1:],
        )
    max_log_term = max(0.0, float(log_terms.max()))
    log_sum = max_log_term + math.log(float(np.exp(log_terms - max_log_term).sum()))
    return min(1.0, math.exp(min(0.0, -score + log_sum)))


_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
# Stirling series B_2k / (2k (2k - 1)) for k = 1..7, the coefficients of a**-(2k-1).
_STIRLING_COEFFICIENTS = (
    1.0 / 12,
    -1.0 / 360,
    1.0 / 1260,
    -1.0 / 1680,
    1.0 / 1188,
    -691.0 / 360360,
    1.0 / 156,
)


def _stirling_error(a: float) -> float:
    """``log Gamma(a + 1) - [(a + 1/2) log a - a + log(2 pi)/2]``.

    For large ``a`` the direct difference cancels catastrophically, so the
    asymptotic series is used there (at ``a >= 10`` its truncation error is
    below 1e-15).
    """
    if a < 10.0:
        return math.lgamma(a + 1.0) - (a + 0.5) * math.log(a) + a - _HALF_LOG_TWO_PI
    inverse_square = 1.0 / (a * a)
    series = 0.0
    for coefficient in reversed(_STIRLING_COEFFICIENTS):
        series = series * inverse_square + coefficient
    return series / a


def _power_factor(a: float, x: float) -> float:
    """``x**a * exp(-x) / Gamma(a)``, the common factor of both P and Q.

    For large ``a`` the naive ``a*log(x) - x - lgamma(a)`` subtracts numbers of
    size ``a*log(a)`` to get something of size ``log(a)``; rewriting it with
    Stirling's formula around ``x = a`` keeps full precision.
    """
    if a < 10.0:
        log_factor = a * math.log(x) - x - math.lgamma(a)
        return math.exp(log_factor) if log_factor > -745.0 else 0.0
    t = (x - a) / a
    log1pmx = math.log1p(t) - t
    exponent = a * log1pmx - _stirling_error(a)
    if exponent < -745.0:
        return 0.0
    return math.sqrt(a / (2.0 * math.pi)) * math.exp(exponent)


def _max_iterations(a: float) -> int:
    # Both expansions need O(sqrt(a)) terms when x is near a.
    return 1000 + int(50.0 * math.sqrt(a))


def _lower_series(a: float, x: float) -> float:
    """Regularized lower gamma ``P(a, x)`` by its power series (for x < a + 1)."""
    factor = _power_factor(a, x)
    if factor == 0.0:
        return 0.0
    term = 1.0 / a
    total = term
    denominator = a
    for _ in range(_max_iterations(a)):
        denominator += 1.0
        term *= x / denominator
        total += term
        if term < total * 1e-17:
            break
    else:  # pragma: no cover - would mean a bug in the iteration bound
        raise ArithmeticError("gamma series did not converge")
    return total * factor


def _upper_continued_fraction(a: float, x: float) -> float:
    """Regularized upper gamma ``Q(a, x)`` by Legendre's continued fraction
    (modified Lentz), for x >= a + 1 where it converges quickly."""
    factor = _power_factor(a, x)
    if factor == 0.0:
        return 0.0
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _max_iterations(a)):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    else:  # pragma: no cover - would mean a bug in the iteration bound
        raise ArithmeticError("gamma continued fraction did not converge")
    return factor * h


def regularized_gamma_q(a: float, x: float) -> float:
    """Regularized upper incomplete gamma ``Q(a, x) = Gamma(a, x) / Gamma(a)``.

    The float64 counterpart of ``torch.special.gammaincc`` /
    ``scipy.special.gammaincc`` (same edge-case conventions), implemented
    with a power series below ``x = a + 1`` and a continued fraction above.
    Absolute error is ~1e-15, well inside what a p-value needs.
    """
    a = float(a)
    x = float(x)
    if math.isnan(a) or math.isnan(x) or a < 0 or x < 0:
        return math.nan
    if a == 0:
        return 0.0 if x > 0 else math.nan
    if x == 0:
        return 1.0
    if math.isinf(a):
        return math.nan if math.isinf(x) else 1.0
    if math.isinf(x):
        return 0.0
    if x < a + 1.0:
        return min(1.0, max(0.0, 1.0 - _lower_series(a, x)))
    return min(1.0, max(0.0, _upper_continued_fraction(a, x)))
