"""Greedy answers compared (protocol/greedy_answers.py): where two part, whether at a near-tie, how far they drift;
and the words the features that share it say it in."""

from pytest_vllm_conformance.protocol.greedy_answers import Greedy, divergence, mean_logprob_drift, top_logprobs
from suites.lora.adapters import parted


def answer(tokens, top):
    return Greedy(tokens, top)


def test_equal_answers_do_not_diverge_and_drift_nothing():
    first = answer([1, 2], [{1: -0.5}, {2: -0.25}])
    assert divergence(first, first, 0.1) is None
    assert mean_logprob_drift(first, first) == 0


def test_a_divergence_between_nearly_tied_tokens_is_a_near_tie():
    first = answer([1, 2], [{1: -0.5}, {2: -0.70, 3: -0.75}])
    second = answer([1, 3], [{1: -0.5}, {2: -0.72, 3: -0.68}])
    parted = divergence(first, second, 0.1)
    assert parted is not None and parted.position == 1 and parted.near_tie


def test_a_token_outside_the_other_top_k_is_not_a_near_tie():
    first = answer([1, 2], [{1: -0.5}, {2: -0.70}])
    second = answer([1, 42], [{1: -0.5}, {42: 0.0, 2: -0.72}])
    parted = divergence(first, second, 0.1)
    assert parted is not None and not parted.near_tie and "not in top-5" in str(parted)


def test_a_shorter_answer_diverges_where_it_ends():
    parted = divergence(answer([1, 2], []), answer([1], []), 0.1)
    assert parted is not None and parted.position == 1 and not parted.near_tie


def test_the_drift_is_the_mean_difference_over_the_shared_positions():
    first = answer([1, 2, 3], [{1: -0.5}, {2: -0.25}, {3: -1.0}])
    second = answer([1, 2], [{1: -0.25}, {2: -0.5}])
    assert mean_logprob_drift(first, second) == 0.25
    assert mean_logprob_drift(answer([1], []), answer([1], [])) is None


def test_the_top_logprobs_are_read_by_token_id():
    assert top_logprobs([{"token_id:12": -1.5, "token_id:7": -2.0}, None]) == [{12: -1.5, 7: -2.0}, {}]


def test_the_words_of_each_feature_stay_its_own():
    first = answer([1, 2, 5], [{1: -0.5}, {2: -0.70, 3: -0.75}, {}])
    second = answer([1, 3, 5], [{1: -0.5}, {2: -0.72, 3: -0.68}, {}])
    parted_here = divergence(first, second, 0.1)
    assert parted_here is not None
    assert str(parted_here) == (
        "the answers part at generated position 1: [2, 5] against [3, 5] (a near-tie: the first gives them "
        "-0.7000, -0.7500; the second gives them -0.7200, -0.6800, gap 0.1)"
    )
    assert parted(parted_here) == "the answers part at token 1 (a near-tie): [2, 5] against [3, 5]"
