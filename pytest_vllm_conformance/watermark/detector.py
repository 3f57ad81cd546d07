"""Gumbel watermark detectors that reproduce vLLM's, using numpy only.

vLLM's ``GumbelWatermarkDetector`` / ``DualKeyGumbelWatermarkDetector``
(``vllm/v1/watermarking/gumbel.py``, identical 0.30-0.33 apart from one
default noted below) score each generated token by ``-log(1 - u)``, where ``u``
is the keyed PRF uniform of (previous ``w`` tokens, token). For unwatermarked
text each score is Exp(1); Gumbel-max sampling favours tokens with large
``u``, so watermarked text scores high. The p-value is the Gamma survival
function of the summed score.

What must match vLLM exactly, and why it is done this way here:

* contexts are built from the generated tokens only, padded with ``-1``;
* with deduplication, a token whose context already occurred earlier in the
  same sequence is not scored (a repeated context reuses the same keyed random
  vector, so its score is not independent evidence), but it still becomes part
  of later contexts;
* uniforms are float32 (as the PRF returns them) and scores are float64;
* p-values use the same formulas, including the moment-matched Gamma for the
  dual-key detector.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from pytest_vllm_conformance.watermark.gamma import gamma_survival_integer_shape, regularized_gamma_q
from pytest_vllm_conformance.watermark.prf import PhiloxPRF, derive_watermark_key, validate_key

__all__ = [
    "Detection",
    "DualKeyGumbelDetector",
    "GumbelDetector",
    "gamma_survival_integer_shape",
    "make_detector",
    "regularized_gamma_q",
]

Algorithm = Literal["gumbel", "dual_key_gumbel"]

# Rows per PRF batch: large enough to amortise numpy's per-call overhead,
# small enough that the ~20 temporaries of a Philox round stay in cache.
_CHUNK_ROWS = 1 << 14
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Detection:
    """Outcome of one ``detect`` call (same fields as vLLM's ``WatermarkDetection``)."""

    score: float
    p_value: float
    num_scored_tokens: int
    is_watermarked: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------
# Detectors
# --------------------------------------------------------------------------


def _as_token_array(token_ids: npt.ArrayLike) -> np.ndarray:
    """Validate a 1-D sequence of integer token ids and return it as int64.

    Floats and bools are rejected rather than truncated: a float in a token
    list means the caller passed the wrong data.
    """
    if isinstance(token_ids, np.ndarray):
        if token_ids.ndim != 1:
            raise ValueError("token_ids must be a flat (1-D) sequence of ints")
        if token_ids.size == 0:
            return np.empty(0, dtype=np.int64)
        if token_ids.dtype.kind == "u":
            if int(token_ids.max()) > _INT64_MAX:
                raise ValueError("token ids must fit in int64")
            return token_ids.astype(np.int64)
        if token_ids.dtype.kind != "i":
            raise TypeError(f"token_ids must have an integer dtype, got {token_ids.dtype}")
        return token_ids.astype(np.int64, copy=False)
    if isinstance(token_ids, (str, bytes, bytearray)):
        raise TypeError("token_ids must be a sequence of ints")
    items = list(cast(Iterable[Any], token_ids))
    # The fast all() covers plain lists of Python ints; the loop only runs to
    # find what is wrong (or to allow numpy integer scalars).
    if not all(type(item) is int for item in items):
        for index, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, (int, np.integer)):
                raise TypeError(f"token_ids[{index}] is {type(item).__name__}, expected int")
    try:
        return np.array(items, dtype=np.int64)
    except OverflowError as exc:
        raise ValueError("token ids must fit in int64") from exc


def _validate_context_width(context_width: int) -> int:
    if isinstance(context_width, bool) or not isinstance(context_width, (int, np.integer)):
        raise TypeError("context_width must be an int")
    if context_width < 1:
        raise ValueError("context_width must be positive")
    if context_width > 16:
        # Same advice vLLM gives: wider contexts make the watermark fragile.
        warnings.warn(
            "context_width values greater than 16 reduce robustness to edits because "
            "each changed token affects more subsequent watermark contexts",
            stacklevel=4,
        )
    return int(context_width)


def _validate_threshold(p_value_threshold: float) -> float:
    if isinstance(p_value_threshold, bool) or not isinstance(p_value_threshold, (int, float, np.floating, np.integer)):
        raise TypeError("p_value_threshold must be a number")
    if not 0 < p_value_threshold < 1:
        raise ValueError("p_value_threshold must be between 0 and 1")
    return float(p_value_threshold)


def _make_prf(prf: str | PhiloxPRF, key: int) -> PhiloxPRF:
    if isinstance(prf, PhiloxPRF):
        return prf
    if prf == "philox":
        return PhiloxPRF(key)
    raise ValueError(f"Unknown watermark PRF: {prf!r} (only 'philox' exists)")


_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_HASH_SHIFT = np.uint64(29)


def _row_hashes(contexts: np.ndarray) -> np.ndarray:
    """A 64-bit mix of each context row; equal rows give equal hashes."""
    words = contexts.view(np.uint64)
    hashes = np.zeros(contexts.shape[0], dtype=np.uint64)
    for column in range(contexts.shape[1]):
        hashes ^= words[:, column]
        hashes *= _HASH_MULTIPLIER  # wraps mod 2**64, which is what we want
        hashes ^= hashes >> _HASH_SHIFT
    return hashes


def _first_occurrence_mask_exact(contexts: np.ndarray) -> np.ndarray:
    """Slow exact path: stable lexicographic sort of the rows themselves."""
    n = contexts.shape[0]
    order = np.lexsort(contexts.T[::-1])  # stable; last key is the primary one
    ordered = contexts[order]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=starts[1:])
    mask = np.zeros(n, dtype=bool)
    mask[order[starts]] = True
    return mask


def _first_occurrence_mask(contexts: np.ndarray) -> np.ndarray:
    """True for each row of ``contexts`` that did not occur in an earlier row.

    Sorting one 64-bit hash per row is several times faster than sorting the
    rows lexicographically. Equal hashes are then checked for equal rows; on
    a (vanishingly unlikely) collision the exact lexicographic path is used, so
    the result never depends on the hash.
    """
    n = contexts.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    hashes = _row_hashes(contexts)
    order = np.argsort(hashes)
    sorted_hashes = hashes[order]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(sorted_hashes[1:], sorted_hashes[:-1], out=starts[1:])
    repeats = ~starts[1:]
    if repeats.any():
        later = order[1:][repeats]
        earlier = order[:-1][repeats]
        if np.any(contexts[later] != contexts[earlier]):
            return _first_occurrence_mask_exact(contexts)
    # The sort is not stable, so take the smallest position in each group.
    group_starts = np.flatnonzero(starts)
    first_positions = np.minimum.reduceat(order, group_starts)
    mask = np.zeros(n, dtype=bool)
    mask[first_positions] = True
    return mask


class _GumbelFamilyDetector:
    """Shared walk over the sequence: contexts, deduplication, p-value dispatch."""

    def __init__(
        self,
        context_width: int,
        p_value_threshold: float,
        deduplicate_contexts: bool,
    ) -> None:
        self.context_width = _validate_context_width(context_width)
        self.p_value_threshold = _validate_threshold(p_value_threshold)
        self.deduplicate_contexts = bool(deduplicate_contexts)

    def __repr__(self) -> str:
        """Every setting but the key, which neither repr nor str ever shows (key=***)."""
        return (
            f"{type(self).__name__}(key=***, context_width={self.context_width}, "
            f"p_value_threshold={self.p_value_threshold}, "
            f"deduplicate_contexts={self.deduplicate_contexts}{self._more_settings()})"
        )

    __str__ = __repr__

    def _more_settings(self) -> str:
        """The settings a detector adds to the family's, as ``, name=value`` for its repr."""
        return ""

    def prepare(self, token_ids: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Contexts ``(n, w)`` and targets ``(n,)`` of the tokens that are scored."""
        tokens = _as_token_array(token_ids)
        width = self.context_width
        padded = np.concatenate([np.full(width, -1, dtype=np.int64), tokens])
        # Row j = the w items before token j, i.e. vLLM's prefix[-w:].
        contexts = np.lib.stride_tricks.sliding_window_view(padded, width)[: tokens.size]
        if self.deduplicate_contexts:
            keep = _first_occurrence_mask(np.ascontiguousarray(contexts))
            return contexts[keep], tokens[keep]
        return np.ascontiguousarray(contexts), tokens

    def token_scores(self, token_ids: npt.ArrayLike) -> np.ndarray:
        """Per-token float64 scores of the scored tokens, in sequence order."""
        contexts, targets = self.prepare(token_ids)
        return self._score(contexts, targets)

    def detect(self, token_ids: npt.ArrayLike) -> Detection:
        """Test a sequence of *generated* token ids (no prompt tokens).

        Raises ``TypeError``/``ValueError`` for input that is not a flat
        sequence of int64-range integers.
        """
        contexts, targets = self.prepare(token_ids)
        num_scored_tokens = int(targets.size)
        if num_scored_tokens == 0:
            return Detection(0.0, 1.0, 0, False)
        score = float(self._score(contexts, targets).sum())
        p_value = float(self._p_value(score, num_scored_tokens))
        return Detection(
            score=score,
            p_value=p_value,
            num_scored_tokens=num_scored_tokens,
            is_watermarked=p_value <= self.p_value_threshold,
        )

    def _score(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _p_value(self, score: float, num_scored_tokens: int) -> float:
        raise NotImplementedError


def _exponential_scores(prf: PhiloxPRF, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``-log(1 - u)`` per row, from the float32 uniform widened to float64."""
    scores = np.empty(targets.size, dtype=np.float64)
    for start in range(0, targets.size, _CHUNK_ROWS):
        stop = start + _CHUNK_ROWS
        uniforms = prf.uniform(contexts[start:stop], targets[start:stop, None])[:, 0]
        np.negative(np.log1p(-uniforms.astype(np.float64)), out=scores[start:stop])
    return scores


class GumbelDetector(_GumbelFamilyDetector):
    """Detector for vLLM's single-key ``gumbel`` watermark.

    Parameters and defaults are those of vLLM 0.32's
    ``GumbelWatermarkDetector``: ``key`` (the server's ``watermark_config.key``,
    used directly), ``context_width=4``, ``p_value_threshold=0.01`` (must be
    in (0, 1)), ``prf="philox"``, ``deduplicate_contexts=True``.
    """

    def __init__(
        self,
        key: int,
        context_width: int = 4,
        p_value_threshold: float = 0.01,
        prf: str | PhiloxPRF = "philox",
        deduplicate_contexts: bool = True,
    ) -> None:
        if not isinstance(prf, PhiloxPRF):
            key = validate_key(key)
        super().__init__(context_width, p_value_threshold, deduplicate_contexts)
        self._prf = _make_prf(prf, key)

    def _score(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        return _exponential_scores(self._prf, contexts, targets)

    def _p_value(self, score: float, num_scored_tokens: int) -> float:
        return gamma_survival_integer_shape(score, num_scored_tokens)


class DualKeyGumbelDetector(_GumbelFamilyDetector):
    """Detector for vLLM's ``dual_key_gumbel`` watermark (weighted early fusion).

    Each token is scored under key A = ``derive_watermark_key(key, b"key_a")``
    and key B = ``derive_watermark_key(key, b"key_b")``, and the two scores are
    mixed as ``(1 - alpha) * s_A + alpha * s_B``. ``alpha`` must be the value
    the server was configured with (its probability of sampling with key B).

    Parameters and defaults are those of vLLM 0.32/0.33's
    ``DualKeyGumbelWatermarkDetector``: ``context_width=4``,
    ``p_value_threshold=0.01``, ``prf="philox"``, ``deduplicate_contexts=True``,
    ``alpha=0.1``.

    .. warning::
       In vLLM 0.30 and 0.31 the detector *class* defaulted to ``alpha=0.2``
       while the *server* (``--watermark-config``) default was, and still is,
       ``0.1``. Code that relied on the old class default scored 0.1-alpha
       servers with the wrong weights; always pass ``alpha`` explicitly.
    """

    def __init__(
        self,
        key: int,
        context_width: int = 4,
        p_value_threshold: float = 0.01,
        prf: str = "philox",
        deduplicate_contexts: bool = True,
        alpha: float = 0.1,
    ) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)):
            raise TypeError("alpha must be a number")
        if not 0 <= alpha <= 1:
            raise ValueError("alpha must be between 0 and 1")
        key = validate_key(key)
        super().__init__(context_width, p_value_threshold, deduplicate_contexts)
        self.alpha = float(alpha)
        self._prf_a = _make_prf(prf, derive_watermark_key(key, b"key_a"))
        self._prf_b = _make_prf(prf, derive_watermark_key(key, b"key_b"))

    def _more_settings(self) -> str:
        return f", alpha={self.alpha}"

    def _score(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        scores_a = _exponential_scores(self._prf_a, contexts, targets)
        scores_b = _exponential_scores(self._prf_b, contexts, targets)
        return (1 - self.alpha) * scores_a + self.alpha * scores_b

    def _p_value(self, score: float, num_scored_tokens: int) -> float:
        # The fused per-token score has mean 1 and variance v; a Gamma with
        # the same two moments has shape n/v and scale v.
        variance = (1 - self.alpha) ** 2 + self.alpha**2
        if self.alpha in (0, 0.5, 1):
            # Here the fused score is exactly a (scaled) sum of exponentials,
            # so the integer-shape formula is exact, as in vLLM.
            return gamma_survival_integer_shape(score / variance, round(num_scored_tokens / variance))
        return regularized_gamma_q(num_scored_tokens / variance, score / variance)


def make_detector(algorithm: Algorithm, key: int, **kwargs: Any) -> GumbelDetector | DualKeyGumbelDetector:
    """Build the detector for a server's ``watermark_config.algorithm``.

    ``kwargs`` go to the detector's constructor (``alpha`` only for
    ``"dual_key_gumbel"``).
    """
    if algorithm == "gumbel":
        return GumbelDetector(key, **kwargs)
    if algorithm == "dual_key_gumbel":
        return DualKeyGumbelDetector(key, **kwargs)
    raise ValueError(f"Unknown watermarking algorithm: {algorithm!r} (expected 'gumbel' or 'dual_key_gumbel')")
