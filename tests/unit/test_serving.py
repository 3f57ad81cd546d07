"""The serving gate's pieces without a server: the stream reader, the prompts, the ratio's interval, the figures."""

import numpy as np

from pytest_vllm_conformance.features.serving import figures
from pytest_vllm_conformance.features.serving.loadgen import RequestTiming, Round, _SseReader, token_prompts
from pytest_vllm_conformance.features.serving.session import Gauges
from pytest_vllm_conformance.features.serving.stats import compare_medians


def _event(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


def test_the_reader_times_text_chunks_and_reads_usage_across_split_events():
    timing = RequestTiming(started=0.0)
    reader = _SseReader(timing)
    first = _event('{"choices": [{"text": "a"}]}')
    reader(first[:10])
    assert timing.token_times == []  # half an event carries nothing yet
    reader(first[10:] + _event('{"choices": [{"text": "b"}]}'))
    reader(_event('{"choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": 2}}') + b"data: [DONE]\n\n")
    assert len(timing.token_times) == 1  # two events in one chunk: one arrival time
    assert (timing.prompt_tokens, timing.completion_tokens, timing.error) == (32, 2, None)


def test_an_error_event_is_a_failed_request():
    timing = RequestTiming(started=0.0)
    _SseReader(timing)(_event('{"error": {"message": "busy", "code": 503}}'))
    assert "an error event" in (timing.error or "")
    assert figures.load_failures([timing], 32, 2) == [f"request 0: {timing.error}"]


def test_prompts_are_exactly_the_length_asked_and_start_differently():
    prompts = token_prompts([5, 6, 7], 8, 9)
    assert [len(p) for p in prompts] == [8] * 9
    assert len({p[:2] for p in prompts}) == 9


def test_a_short_usage_count_is_a_load_failure():
    timing = RequestTiming(started=0.0, ended=1.0, status=200, token_times=[0.1], prompt_tokens=32, completion_tokens=3)
    assert figures.load_failures([timing], 32, 16) == [
        "request 0: usage counted 32 prompt and 3 output tokens, pinned 32 and 16"
    ]


def test_the_same_distribution_is_not_worse_and_a_fifth_of_its_speed_is_worse():
    rng = np.random.default_rng(1)
    same = rng.normal(100, 5, 48)
    assert compare_medians(same, rng.normal(100, 5, 48), confidence=0.95, max_slowdown=0.2).verdict == "not worse"
    slow = compare_medians(same / 5, same, confidence=0.95, max_slowdown=0.2)
    assert slow.verdict == "worse" and slow.high < 0.8


def test_a_slowdown_one_round_pair_does_not_show_is_undecided_never_worse():
    rng = np.random.default_rng(3)
    fast, slow = rng.normal(100, 5, 16), rng.normal(30, 2, 16)
    # The target's first round ran while the machine was busy elsewhere; its second matches the baseline.
    pooled = compare_medians(
        np.concatenate([slow, slow, fast]),
        np.concatenate([fast, fast, fast]),
        confidence=0.95,
        max_slowdown=0.2,
        round_pairs=[(slow, fast), (slow, fast), (fast, fast)],
    )
    assert pooled.high < 0.8 and pooled.rounds_disagree and pooled.verdict == "undecided"
    assert "per round pair 0." in pooled.describe()
    consistent = compare_medians(
        np.concatenate([slow, slow]),
        np.concatenate([fast, fast]),
        confidence=0.95,
        max_slowdown=0.2,
        round_pairs=[(slow, fast), (slow, fast)],
    )
    assert consistent.verdict == "worse"


def test_too_few_or_too_noisy_requests_are_undecided_never_a_verdict():
    assert compare_medians([1.0], [1.0, 2.0], confidence=0.95, max_slowdown=0.2) is None
    rng = np.random.default_rng(2)
    noisy = compare_medians(rng.uniform(1, 100, 6), rng.uniform(1, 100, 6), confidence=0.95, max_slowdown=0.2)
    assert noisy.verdict == "undecided"


def test_occupancy_names_running_and_waiting_at_the_peak_and_queued_is_not_undecided():
    seen = figures.occupancy([Gauges(1, 7, 0.01), Gauges(1, 6, 0.02), Gauges(None, None, None)])
    assert seen.line(8).startswith("running 1 of 8, 7 waiting at that sample")
    assert seen.verdict(8) == "queued"
    assert figures.occupancy([Gauges(6, 0, 0.01)]).verdict(8) == "undecided"
    assert figures.occupancy([Gauges(8, 0, 0.01)]).verdict(8) == "ran"


def test_a_missed_objective_names_its_figure_and_its_bound():
    timing = RequestTiming(started=0.0, ended=1.0, token_times=[0.4, 0.45], completion_tokens=2)
    measured = figures.latency([Round((timing,), 0.0, 1.0)])
    assert figures.missed_objectives(measured, {"ttft_p50_seconds": 0.3, "itl_p99_seconds": 1.0}) == [
        "ttft_p50_seconds 0.400 against 0.3"
    ]
