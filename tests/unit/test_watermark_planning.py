"""Answer-length planning for the watermark suite, on a real detector and on fixed scores."""

from types import SimpleNamespace

import numpy as np

from pytest_vllm_conformance.watermark import GumbelDetector
from suites.watermark.planning import answer_length

PLAN = {"target_p_value": 1e-6, "cap": 1024, "min_tokens": 64, "safety_sigmas": 3.0}


def _scores(values, alpha=0.0):
    return SimpleNamespace(alpha=alpha, token_scores=lambda ids: np.asarray(values, dtype=np.float64))


def test_a_strong_signal_needs_few_tokens_and_never_fewer_than_the_minimum():
    plan = answer_length(_scores([3.0, 3.2, 2.8, 3.1] * 16), list(range(64)), 64, **PLAN)
    assert plan.tokens == 64
    assert "per-token score mean 3.02" in plan.basis


def test_fewer_scored_tokens_need_a_longer_answer():
    weak = [1.4, 1.6, 1.2, 1.8] * 16
    all_scored = answer_length(_scores(weak), list(range(64)), 64, **PLAN)
    half_scored = answer_length(_scores(weak), list(range(64)), 32, **PLAN)
    assert 64 < all_scored.tokens < half_scored.tokens <= 1024
    assert "50% scored" in half_scored.basis


def test_no_signal_or_no_pilot_asks_for_the_most_the_context_allows():
    assert answer_length(_scores([0.9, 1.0, 1.1] * 20), list(range(60)), 60, **PLAN).tokens == 1024
    assert "no watermark signal" in answer_length(_scores([0.9, 1.1] * 30), list(range(60)), 60, **PLAN).basis
    assert answer_length(_scores([]), [1], 1, **PLAN).tokens == 1024


def test_unwatermarked_tokens_under_a_real_detector_give_no_signal():
    detector = GumbelDetector(0x5EED, context_width=4)
    tokens = np.random.default_rng(7).integers(0, 32000, size=400).tolist()
    found = detector.detect(tokens)
    plan = answer_length(detector, tokens, found.num_scored_tokens, **PLAN)
    # Random tokens score about 1 on average: no signal worth planning on, so the cap.
    assert plan.tokens == 1024, plan.basis
