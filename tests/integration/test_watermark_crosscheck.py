"""Cross-check our numpy watermark detector against vLLM's own (0.30+).

Needs an installed vLLM with ``vllm.v1.watermarking`` (and torch); skipped
otherwise. No server is started: vLLM's PRF, detectors and watermarker run
in-process on the CPU (its pure-torch path).

* PRF uniforms must be bit-identical (float32) to vLLM's.
* Detector score / num_scored_tokens must match exactly (score to 1e-12
  relative: numpy and torch may sum in a different order) and p-values to
  1e-9 absolute. The dual-key non-special-alpha p-value is where the two
  implementations differ most: vLLM uses ``torch.special.gammaincc``, whose
  uniform asymptotic branch (20 < a < 200, x near a) is off by up to ~4e-10
  (it evaluates 2*pi in single precision); ours is accurate to ~1e-15.
* Sequences generated with vLLM's own watermarker (keyed Gumbel-max on random
  logits) must be flagged, with matching tiny p-values, and our numpy sampler
  must pick the very same tokens.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pytest_vllm_conformance.watermark import (
    DualKeyGumbelDetector,
    GumbelDetector,
    PhiloxPRF,
    derive_watermark_key,
    make_detector,
    regularized_gamma_q,
)

# No server: vLLM's watermark code runs in this process.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.servers()]


# Imported when the module's first test runs, not at collection: importing vLLM takes about 10 s, which
# every run of the server tests would otherwise wait for before its first server starts.
torch: Any = None
vllm_gumbel: Any = None
vllm_prfs: Any = None


@pytest.fixture(autouse=True, scope="module")
def _vllm_on_a_single_torch_thread() -> Iterator[None]:
    global torch, vllm_gumbel, vllm_prfs
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vllm_gumbel = pytest.importorskip("vllm.v1.watermarking.gumbel")
        vllm_prfs = pytest.importorskip("vllm.v1.watermarking.prfs")
    # vLLM's CPU path runs many tiny tensor ops; torch's thread pool makes
    # them several times slower, worst on a busy CI machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


VOCAB = 4096
ALPHAS = (0.0, 0.5, 1.0, 0.1, 0.2, 0.37)
SPECIAL_KEYS = (0, 1, 12345, 2**32 - 1, 2**32, 2**63, 2**64 - 1)
P_VALUE_TOLERANCE = 1e-9
SCORE_REL_TOLERANCE = 1e-12


def _keys(rng: np.random.Generator, extra: int) -> list[int]:
    randoms = [int.from_bytes(rng.bytes(8), "big") for _ in range(extra)]
    return [*SPECIAL_KEYS, *randoms]


def _vllm_uniform(key: int, contexts: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    prf = vllm_prfs.PhiloxPRF(key)
    return prf.uniform(torch.from_numpy(contexts), torch.from_numpy(tokens)).numpy()


def _random_contexts(rng: np.random.Generator, rows: int, width: int) -> np.ndarray:
    """Token contexts as vLLM builds them: -1 padding first, then token ids."""
    contexts = rng.integers(0, 2**31 - 1, size=(rows, width), dtype=np.int64)
    small = rng.random((rows, width)) < 0.5
    contexts[small] = rng.integers(0, VOCAB, size=int(small.sum()))
    # Left-pad a random number of positions with -1 (start of generation).
    padding = rng.integers(0, width + 1, size=rows)
    contexts[np.arange(width)[None, :] < padding[:, None]] = -1
    return contexts


def _assert_bit_identical(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype == np.float32
    assert ours.shape == theirs.shape
    mismatches = np.flatnonzero(ours.view(np.uint32) != theirs.view(np.uint32))
    assert mismatches.size == 0, f"{mismatches.size} uniforms differ, first at {mismatches[:5]}"


# ------------------------------------------------------------------- PRF


@pytest.mark.parametrize("width", range(1, 9))
def test_prf_grid_is_bit_identical(width: int) -> None:
    rng = np.random.default_rng(1000 + width)
    tokens = np.concatenate(
        [
            np.arange(16),
            rng.integers(0, VOCAB, 200),
            rng.integers(0, 2**31 - 1, 40),
            # Beyond 32 bits only the low word counts, in both implementations.
            np.array([2**32, 2**32 + 7, 2**40 + 3, 2**62 + 1]),
        ]
    ).astype(np.int64)
    for key in _keys(rng, extra=4):
        contexts = _random_contexts(rng, 24, width)
        _assert_bit_identical(PhiloxPRF(key).uniform(contexts, tokens), _vllm_uniform(key, contexts, tokens))


def test_prf_per_row_targets_are_bit_identical() -> None:
    rng = np.random.default_rng(7)
    for key in _keys(rng, extra=8):
        for width in range(1, 9):
            contexts = _random_contexts(rng, 500, width)
            targets = rng.integers(0, VOCAB, (500, 1)).astype(np.int64)
            _assert_bit_identical(PhiloxPRF(key).uniform(contexts, targets), _vllm_uniform(key, contexts, targets))


def test_derived_keys_match() -> None:
    rng = np.random.default_rng(8)
    for key in _keys(rng, extra=20):
        for domain in (b"key_a", b"key_b", b""):
            assert derive_watermark_key(key, domain) == vllm_gumbel.derive_watermark_key(key, domain)


# ------------------------------------------------------------- detectors


def _vllm_detector(algorithm: str, key: int, **kwargs: object) -> object:
    if algorithm == "gumbel":
        return vllm_gumbel.GumbelWatermarkDetector(key, **kwargs)
    return vllm_gumbel.DualKeyGumbelWatermarkDetector(key, **kwargs)


def _assert_same_detection(ours: object, theirs: object, context: str) -> None:
    assert ours.num_scored_tokens == theirs.num_scored_tokens, context
    assert math.isclose(ours.score, theirs.score, rel_tol=SCORE_REL_TOLERANCE, abs_tol=1e-12), (
        f"{context}: score {ours.score!r} vs {theirs.score!r}"
    )
    assert abs(ours.p_value - theirs.p_value) <= P_VALUE_TOLERANCE, (
        f"{context}: p {ours.p_value!r} vs {theirs.p_value!r}"
    )
    if abs(theirs.p_value - 0.01) > P_VALUE_TOLERANCE:
        assert ours.is_watermarked == theirs.is_watermarked, context


def _random_sequences(rng: np.random.Generator, count: int) -> Iterator[list[int]]:
    """Random token sequences, many with repeated spans so dedup matters."""
    for index in range(count):
        length = int(rng.integers(0, 301)) if index > 2 else index  # 0, 1, 2 first
        style = index % 3
        if style == 0:
            tokens = rng.integers(0, VOCAB, length)
        elif style == 1:
            # A tiny effective vocabulary repeats contexts of every width.
            tokens = rng.choice(rng.integers(0, VOCAB, 3), size=length)
        else:
            tokens = rng.integers(0, VOCAB, length)
            for _ in range(length // 20):
                span = int(rng.integers(2, 12))
                if length <= span:
                    break
                source, target = rng.integers(0, length - span, 2)
                tokens[target : target + span] = tokens[source : source + span]
        yield tokens.tolist()


def test_detectors_match_on_random_sequences() -> None:
    rng = np.random.default_rng(2025)
    keys = _keys(rng, extra=5)
    cases = 0
    for index, tokens in enumerate(_random_sequences(rng, 240)):
        key = keys[index % len(keys)]
        width = int(rng.integers(1, 9))
        dedup = bool(index % 4 != 3)
        threshold = float(rng.choice([0.01, 0.05, 0.5]))
        common = {"context_width": width, "p_value_threshold": threshold, "deduplicate_contexts": dedup}
        # Half of the alphas per sequence (alternating) keeps this test fast;
        # each alpha still meets 120 sequences of every style and length.
        alphas = ALPHAS[index % 2 :: 2]
        runs: list[tuple[str, dict[str, object]]] = [("gumbel", common)]
        runs += [("dual_key_gumbel", {**common, "alpha": alpha}) for alpha in alphas]
        for algorithm, kwargs in runs:
            ours = make_detector(algorithm, key, **kwargs).detect(tokens)  # type: ignore[arg-type]
            theirs = _vllm_detector(algorithm, key, **kwargs).detect(tokens)
            _assert_same_detection(ours, theirs, f"seq {index} {algorithm} {kwargs}")
            cases += 1
    assert cases == 240 * (1 + len(ALPHAS) // 2)


def test_gammaincc_matches_torch() -> None:
    """Our Q(a, x) vs torch.special.gammaincc over the shapes detection uses."""
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(4000):
        shape = float(np.exp(rng.uniform(0.0, math.log(20_000))))
        spread = 0.5 if rng.random() < 0.3 else 4.0 / math.sqrt(shape)
        x = shape * float(np.exp(rng.normal(0.0, spread)))
        theirs = torch.special.gammaincc(
            torch.tensor(shape, dtype=torch.float64), torch.tensor(x, dtype=torch.float64)
        ).item()
        worst = max(worst, abs(regularized_gamma_q(shape, x) - theirs))
    assert worst <= P_VALUE_TOLERANCE


# ------------------------------------------------- watermarked generation


def _logits_for(rng: np.random.Generator, peaked: bool) -> np.ndarray:
    if peaked:
        # Low-entropy steps make the text repetitive, so dedup kicks in.
        logits = np.full(VOCAB, -8.0, dtype=np.float32)
        logits[rng.integers(0, 6, 6)] = rng.normal(2.0, 1.0, 6).astype(np.float32)
        return logits
    return rng.normal(0.0, 2.5, VOCAB).astype(np.float32)


def _numpy_gumbel_argmax(prf: PhiloxPRF, context: tuple[int, ...], logits: np.ndarray) -> int:
    uniforms = prf.uniform(np.array([context], dtype=np.int64), np.arange(VOCAB))[0]
    uniforms = np.maximum(uniforms, np.finfo(np.float32).tiny)
    noise = -np.log(-np.log(uniforms))
    return int(np.argmax(logits + noise))


def _generate(
    key: int, algorithm: str, alpha: float, width: int, length: int, peaked: bool, seed: int
) -> tuple[list[int], int]:
    """Sample like a vLLM server with dedup 'single_turn'.

    Each watermarked step is sampled by vLLM's own watermarker (pure-torch
    path) and, independently, by our numpy re-implementation; returns the
    tokens and how many steps were checked to agree.
    """
    rng = np.random.default_rng(seed)
    if algorithm == "gumbel":
        watermarkers = {"A": vllm_gumbel.GumbelWatermarker(key, width)}
        ours = {"A": PhiloxPRF(key)}
    else:
        dual = vllm_gumbel.DualKeyGumbelWatermarker(key, width, alpha=alpha)
        watermarkers = {"A": dual.draft_watermarker, "B": dual.target_watermarker}
        ours = {
            "A": PhiloxPRF(derive_watermark_key(key, b"key_a")),
            "B": PhiloxPRF(derive_watermark_key(key, b"key_b")),
        }
    tokens: list[int] = []
    seen: set[tuple[int, ...]] = set()
    agreed = 0
    for _ in range(length):
        context = tuple(([-1] * width + tokens)[-width:])
        logits = _logits_for(rng, peaked)
        if context in seen:
            # A repeated context is sampled unwatermarked by vLLM.
            probabilities = np.exp(logits - logits.max())
            tokens.append(int(rng.choice(VOCAB, p=probabilities / probabilities.sum())))
            continue
        seen.add(context)
        # Routing to key B with probability alpha (vLLM draws it from the
        # request's ordinary RNG, so any RNG reproduces the distribution).
        which = "B" if algorithm != "gumbel" and rng.random() < alpha else "A"
        sample = watermarkers[which].sample(
            torch.from_numpy(logits[None, :]), torch.tensor([context], dtype=torch.int64)
        )
        token = int(sample.token_ids[0])
        assert _numpy_gumbel_argmax(ours[which], context, logits) == token
        agreed += 1
        tokens.append(token)
    return tokens, agreed


@pytest.mark.parametrize(
    ("algorithm", "alpha"),
    [("gumbel", 0.0)] + [("dual_key_gumbel", alpha) for alpha in ALPHAS],
)
def test_watermarked_generations_match_and_are_detected(algorithm: str, alpha: float) -> None:
    rng = np.random.default_rng(int(alpha * 1000) + len(algorithm))
    for index, (width, peaked) in enumerate([(4, False), (1, True), (2, True), (3, False)]):
        key = int.from_bytes(rng.bytes(8), "big") if index else 2**64 - 1
        length = 96 if peaked else 128
        tokens, agreed = _generate(key, algorithm, alpha, width, length, peaked, seed=index)
        assert agreed > 0
        kwargs: dict[str, object] = {"context_width": width}
        if algorithm == "dual_key_gumbel":
            kwargs["alpha"] = alpha
        ours = make_detector(algorithm, key, **kwargs).detect(tokens)  # type: ignore[arg-type]
        theirs = _vllm_detector(algorithm, key, **kwargs).detect(tokens)
        _assert_same_detection(ours, theirs, f"{algorithm} alpha={alpha} w={width}")
        if peaked:
            # Repetitive text: dedup must have dropped tokens, identically.
            assert ours.num_scored_tokens < len(tokens)
        else:
            assert ours.num_scored_tokens == len(tokens)
            assert ours.is_watermarked and ours.p_value < 1e-8
            # The wrong key sees nothing (only meaningful with dedup: without
            # it, repeated contexts repeat their scores).
            wrong_key = make_detector(algorithm, key ^ 1, **kwargs)  # type: ignore[arg-type]
            assert wrong_key.detect(tokens).p_value > 1e-6
        # Without dedup both still agree (repeated contexts scored too).
        kwargs["deduplicate_contexts"] = False
        _assert_same_detection(
            make_detector(algorithm, key, **kwargs).detect(tokens),  # type: ignore[arg-type]
            _vllm_detector(algorithm, key, **kwargs).detect(tokens),
            f"{algorithm} alpha={alpha} w={width} no-dedup",
        )


def test_dual_key_detector_defaults_match_installed_vllm() -> None:
    """Documents the installed vLLM's class default (0.2 in 0.30/0.31, 0.1 in 0.32+)."""
    theirs = vllm_gumbel.DualKeyGumbelWatermarkDetector(1)
    ours = DualKeyGumbelDetector(1)
    assert (ours.context_width, ours.p_value_threshold, ours.deduplicate_contexts) == (
        theirs.context_width,
        theirs.p_value_threshold,
        theirs.deduplicate_contexts,
    )
    if theirs.alpha != ours.alpha:
        pytest.skip(f"installed vLLM's detector class defaults to alpha={theirs.alpha}")
    ours_gumbel, theirs_gumbel = GumbelDetector(1), vllm_gumbel.GumbelWatermarkDetector(1)
    assert ours_gumbel.context_width == theirs_gumbel.context_width
