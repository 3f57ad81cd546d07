"""Our numpy watermark detector against the executed vLLM 0.32 test vectors.

The vectors were computed with vLLM 0.32.0's own functions
(``vllm/v1/watermarking/gumbel.py``'s detectors, ``vllm/v1/watermarking/prfs/philox.py``'s
PRF, at the v0.32.0 tag); no vLLM install is needed here. The bit-for-bit
comparison with a live vLLM package is in
``tests/integration/test_watermark_crosscheck.py``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pytest_vllm_conformance.watermark import (
    Detection,
    DualKeyGumbelDetector,
    GumbelDetector,
    PhiloxPRF,
    derive_watermark_key,
    gamma_survival_integer_shape,
    make_detector,
    regularized_gamma_q,
)
from tests.unit.watermark_vectors import SECRET_KEY, SECRET_SPELLINGS, SEQUENCE

# ---------------------------------------------------------------- PRF vectors


@pytest.mark.parametrize(
    ("key", "context", "token", "expected"),
    [
        (12345, (-1, -1, -1, -1), 0, 0.5197834968566895),
        (12345, (1, 2, 3, 4), 5, 0.5847190618515015),
        (12345, (10, 20, 30, 40), 7, 0.17186306416988373),
        (2**64 - 1, (1, 2, 3, 4, 5), 99999, 0.9801035523414612),
    ],
)
def test_uniform_vectors(key: int, context: tuple[int, ...], token: int, expected: float) -> None:
    uniforms = PhiloxPRF(key).uniform(np.array([context]), np.array([token]))
    assert uniforms.dtype == np.float32
    assert uniforms.shape == (1, 1)
    # The expected values are float32 values printed as doubles: exact match.
    assert float(uniforms[0, 0]) == expected


def test_uniform_broadcasts_contexts_against_tokens() -> None:
    prf = PhiloxPRF(12345)
    contexts = np.array([[-1, -1, -1, -1], [1, 2, 3, 4], [10, 20, 30, 40]])
    grid = prf.uniform(contexts, np.arange(8))
    assert grid.shape == (3, 8)
    assert float(grid[0, 0]) == 0.5197834968566895
    assert float(grid[1, 5]) == 0.5847190618515015
    assert float(grid[2, 7]) == 0.17186306416988373
    # One target per row gives the same values as the full grid.
    per_row = prf.uniform(contexts, np.array([[0], [5], [7]]))
    np.testing.assert_array_equal(per_row[:, 0], grid[[0, 1, 2], [0, 5, 7]])
    assert np.all((grid > 0) & (grid < 1))


def test_derived_keys() -> None:
    assert derive_watermark_key(12345, b"key_a") == 9838468303782132026
    assert derive_watermark_key(12345, b"key_b") == 7488415835228708845


@pytest.mark.parametrize("bad_key", [-1, 2**64])
def test_key_range_errors_do_not_echo_the_key(bad_key: int) -> None:
    with pytest.raises(ValueError) as excinfo:
        PhiloxPRF(bad_key)
    assert str(bad_key) not in str(excinfo.value)
    with pytest.raises(ValueError):
        GumbelDetector(bad_key)
    with pytest.raises(ValueError):
        DualKeyGumbelDetector(bad_key)


def test_non_int_key_is_rejected() -> None:
    with pytest.raises(TypeError):
        PhiloxPRF("12345")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PhiloxPRF(True)  # type: ignore[arg-type]


# ----------------------------------------------------------- sequence vectors


def _assert_detection(result: Detection, score: float, p_value: float, num_scored_tokens: int) -> None:
    assert result.num_scored_tokens == num_scored_tokens
    assert result.score == pytest.approx(score, rel=1e-12)
    assert abs(result.p_value - p_value) <= 1e-12
    assert result.is_watermarked is (result.p_value <= 0.01)


def test_gumbel_dedup_vector() -> None:
    result = GumbelDetector(12345, context_width=4).detect(SEQUENCE)
    _assert_detection(result, 11.575724127376365, 0.6243655724190403, 13)


def test_gumbel_no_dedup_vector() -> None:
    detector = GumbelDetector(12345, context_width=2, deduplicate_contexts=False)
    _assert_detection(detector.detect(SEQUENCE), 14.026894688699386, 0.5675861922105809, 15)


@pytest.mark.parametrize(
    ("alpha", "score", "p_value"),
    [
        (0.1, 20.20636424112946, 0.024088867265778007),
        (0.5, 18.15387295480553, 0.03098367766081545),
        (0.25, 19.436680008757985, 0.020845429851035907),
    ],
)
def test_dual_key_vectors(alpha: float, score: float, p_value: float) -> None:
    result = DualKeyGumbelDetector(12345, context_width=4, alpha=alpha).detect(SEQUENCE)
    _assert_detection(result, score, p_value, 13)


def test_numpy_input_gives_the_same_result() -> None:
    detector = GumbelDetector(12345)
    assert detector.detect(np.array(SEQUENCE, dtype=np.int32)) == detector.detect(SEQUENCE)


def test_dedup_skips_repeated_context_but_keeps_it_in_the_prefix() -> None:
    # w=1: contexts are (-1), (5), (5), (6): the third token is not scored, the
    # fourth (context 6 = the unscored token) is.
    detector = GumbelDetector(7, context_width=1)
    assert detector.detect([5, 5, 6, 9]).num_scored_tokens == 3
    contexts, targets = detector.prepare([5, 5, 6, 9])
    np.testing.assert_array_equal(contexts, [[-1], [5], [6]])
    np.testing.assert_array_equal(targets, [5, 5, 9])


def test_dedup_ignores_the_target_token() -> None:
    # Same context (-1, 1) twice with different targets: only the first counts.
    detector = GumbelDetector(7, context_width=2)
    contexts, targets = detector.prepare([1, 2, 1, 3])
    assert [tuple(row) for row in contexts] == [(-1, -1), (-1, 1), (1, 2), (2, 1)]
    contexts, targets = detector.prepare([1, 1, 1, 1, 1])
    assert [tuple(row) for row in contexts] == [(-1, -1), (-1, 1), (1, 1)]
    np.testing.assert_array_equal(targets, [1, 1, 1])


def test_dedup_does_not_depend_on_the_row_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_vllm_conformance.watermark import detector as detector_module

    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 4, 400).tolist()  # tiny vocabulary: many repeats
    expected = [GumbelDetector(5, context_width=w).prepare(tokens) for w in (1, 2, 3)]
    # Every row colliding forces the exact (lexicographic) path.
    monkeypatch.setattr(detector_module, "_row_hashes", lambda rows: np.zeros(rows.shape[0], dtype=np.uint64))
    for width, (contexts, targets) in zip((1, 2, 3), expected, strict=True):
        got_contexts, got_targets = GumbelDetector(5, context_width=width).prepare(tokens)
        np.testing.assert_array_equal(got_contexts, contexts)
        np.testing.assert_array_equal(got_targets, targets)
    # And both agree with the plain walk over the sequence.
    seen: set[tuple[int, ...]] = set()
    walk = []
    padded = [-1, -1] + tokens
    for index, token in enumerate(tokens):
        context = tuple(padded[index : index + 2])
        if context not in seen:
            seen.add(context)
            walk.append(token)
    np.testing.assert_array_equal(expected[1][1], walk)


@pytest.mark.parametrize(
    "detector",
    [GumbelDetector(12345), DualKeyGumbelDetector(12345, alpha=0.37)],
    ids=["gumbel", "dual_key_gumbel"],
)
def test_empty_sequence(detector: GumbelDetector | DualKeyGumbelDetector) -> None:
    assert detector.detect([]) == Detection(score=0.0, p_value=1.0, num_scored_tokens=0, is_watermarked=False)


def test_detection_is_frozen() -> None:
    result = GumbelDetector(1).detect([1, 2, 3])
    with pytest.raises(AttributeError):
        result.score = 0.0  # type: ignore[misc]
    assert set(result.to_dict()) == {"score", "p_value", "num_scored_tokens", "is_watermarked"}


@pytest.mark.parametrize("tokens", [[1.0, 2], [True], [[1, 2]], "123", [1, 2**63]])
def test_bad_token_ids_are_rejected(tokens: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        GumbelDetector(1).detect(tokens)  # type: ignore[arg-type]


# ------------------------------------------------------------- construction


@pytest.mark.parametrize("threshold", [0, 1, -0.1, 1.5, math.nan])
def test_threshold_must_be_inside_zero_one(threshold: float) -> None:
    with pytest.raises(ValueError, match="p_value_threshold"):
        GumbelDetector(1, p_value_threshold=threshold)
    with pytest.raises(ValueError, match="p_value_threshold"):
        DualKeyGumbelDetector(1, p_value_threshold=threshold)


def test_threshold_decides_is_watermarked() -> None:
    result = GumbelDetector(12345).detect(SEQUENCE)  # p ~ 0.624
    assert GumbelDetector(12345, p_value_threshold=0.7).detect(SEQUENCE).is_watermarked
    assert not GumbelDetector(12345, p_value_threshold=0.6).detect(SEQUENCE).is_watermarked
    assert not result.is_watermarked


@pytest.mark.parametrize("alpha", [-0.01, 1.01, math.nan])
def test_alpha_range(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        DualKeyGumbelDetector(1, alpha=alpha)


def test_defaults_match_vllm_032() -> None:
    gumbel = GumbelDetector(1)
    assert (gumbel.context_width, gumbel.p_value_threshold, gumbel.deduplicate_contexts) == (
        4,
        0.01,
        True,
    )
    dual = DualKeyGumbelDetector(1)
    assert (dual.context_width, dual.p_value_threshold, dual.deduplicate_contexts) == (
        4,
        0.01,
        True,
    )
    assert dual.alpha == 0.1
    assert "0.2" in (DualKeyGumbelDetector.__doc__ or "")


def test_context_width_validation() -> None:
    with pytest.raises(ValueError):
        GumbelDetector(1, context_width=0)
    with pytest.warns(UserWarning, match="greater than 16"):
        GumbelDetector(1, context_width=17)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GumbelDetector(1, context_width=16)


def test_make_detector() -> None:
    assert isinstance(make_detector("gumbel", 1), GumbelDetector)
    dual = make_detector("dual_key_gumbel", 1, alpha=0.25, context_width=3)
    assert isinstance(dual, DualKeyGumbelDetector)
    assert (dual.alpha, dual.context_width) == (0.25, 3)
    with pytest.raises(ValueError, match="algorithm"):
        make_detector("kgw", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        make_detector("gumbel", 1, alpha=0.1)


def test_repr_and_str_hide_the_key() -> None:
    objects = [
        GumbelDetector(SECRET_KEY),
        DualKeyGumbelDetector(SECRET_KEY, alpha=0.3),
        PhiloxPRF(SECRET_KEY),
    ]
    derived = [derive_watermark_key(SECRET_KEY, d) for d in (b"key_a", b"key_b")]
    for obj in objects:
        for text in (repr(obj), str(obj), f"{obj}", f"{obj!r}"):
            assert "key=***" in text
            for spelling in SECRET_SPELLINGS + tuple(str(k) for k in derived):
                assert spelling not in text
    assert repr(objects[0]) == (
        "GumbelDetector(key=***, context_width=4, p_value_threshold=0.01, deduplicate_contexts=True)"
    )


# ----------------------------------------------------- gamma survival maths


@pytest.mark.parametrize("x", [1e-8, 0.3, 1.0, 2.5, 10.0, 40.0])
def test_q_closed_forms(x: float) -> None:
    assert regularized_gamma_q(1.0, x) == pytest.approx(math.exp(-x), rel=1e-13, abs=1e-300)
    assert regularized_gamma_q(0.5, x) == pytest.approx(math.erfc(math.sqrt(x)), rel=1e-12)
    assert regularized_gamma_q(2.0, x) == pytest.approx((1 + x) * math.exp(-x), rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 30, 150, 600, 5000])
@pytest.mark.parametrize("ratio", [0.5, 0.9, 1.0, 1.1, 1.5, 3.0])
def test_q_agrees_with_integer_shape_sum(n: int, ratio: float) -> None:
    score = n * ratio
    # The log-space sum (vLLM's formula, kept for bit-compatibility) loses
    # about n ulps in its running sum; Q itself is accurate to ~1e-15.
    tolerance = max(1e-12, 5e-15 * n)
    assert abs(regularized_gamma_q(n, score) - gamma_survival_integer_shape(score, n)) <= tolerance


def test_gamma_edge_cases() -> None:
    assert gamma_survival_integer_shape(5.0, 0) == 1.0
    assert gamma_survival_integer_shape(0.0, 5) == 1.0
    assert gamma_survival_integer_shape(-1.0, 5) == 1.0
    assert gamma_survival_integer_shape(1e-300, 1) == 1.0
    assert gamma_survival_integer_shape(2000.0, 10) == 0.0
    assert regularized_gamma_q(3.0, 0.0) == 1.0
    assert regularized_gamma_q(0.0, 1.0) == 0.0
    assert regularized_gamma_q(3.0, math.inf) == 0.0
    assert math.isnan(regularized_gamma_q(-1.0, 1.0))
    assert regularized_gamma_q(50.0, 5000.0) == 0.0


# --------------------------------------------- our own watermarked sampling


def _generate_watermarked(prf: PhiloxPRF, width: int, length: int, vocab: int, rng: np.random.Generator) -> list[int]:
    """Gumbel-max sampling keyed by the PRF (vLLM's rule, dedup single_turn)."""
    tokens: list[int] = []
    seen: set[tuple[int, ...]] = set()
    for _ in range(length):
        context = tuple(([-1] * width + tokens)[-width:])
        logits = rng.normal(0.0, 2.0, vocab).astype(np.float32)
        if context in seen:  # vLLM samples a repeated context unwatermarked
            tokens.append(int(rng.integers(vocab)))
            continue
        seen.add(context)
        uniforms = prf.uniform(np.array([context]), np.arange(vocab))[0]
        uniforms = np.maximum(uniforms, np.finfo(np.float32).tiny)
        tokens.append(int(np.argmax(logits - np.log(-np.log(uniforms)))))
    return tokens


def test_watermarked_text_is_detected_and_random_text_is_not() -> None:
    rng = np.random.default_rng(2024)
    key = 987654321
    tokens = _generate_watermarked(PhiloxPRF(key), 4, 120, 512, rng)
    detected = GumbelDetector(key).detect(tokens)
    assert detected.num_scored_tokens == 120
    assert detected.is_watermarked and detected.p_value < 1e-10
    assert not GumbelDetector(key + 1).detect(tokens).is_watermarked
    # Dual-key with alpha=0 scores with key A only.
    key_a_tokens = _generate_watermarked(PhiloxPRF(derive_watermark_key(key, b"key_a")), 4, 120, 512, rng)
    assert DualKeyGumbelDetector(key, alpha=0.0).detect(key_a_tokens).p_value < 1e-10
    random_tokens = rng.integers(0, 512, 120).tolist()
    assert GumbelDetector(key).detect(random_tokens).p_value > 1e-4
