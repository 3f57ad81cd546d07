"""The serving gate's pieces without a server: the stream reader, the prompts, the ratio's interval, the figures."""

import numpy as np
import pytest

from pytest_vllm_conformance.catalogue.serving_profile import ProfileError, validate
from suites.serving import figures, loadgen, same_server
from suites.serving.loadgen import RequestTiming, Round, SseReader, token_prompts
from suites.serving.rounds import Gauges, ServingRun
from suites.serving.stats import Design, compare_pairs, t_quantile


def _event(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


def test_the_reader_times_text_chunks_and_reads_usage_across_split_events():
    timing = RequestTiming(started=0.0)
    reader = SseReader(timing)
    first = _event('{"choices": [{"text": "a"}]}')
    reader(first[:10])
    assert timing.token_times == []  # half an event carries nothing yet
    reader(first[10:] + _event('{"choices": [{"text": "b"}]}'))
    reader(_event('{"choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": 2}}') + b"data: [DONE]\n\n")
    assert len(timing.token_times) == 1  # two events in one chunk: one arrival time
    assert (timing.prompt_tokens, timing.completion_tokens, timing.error) == (32, 2, None)


def test_an_error_event_is_a_failed_request():
    timing = RequestTiming(started=0.0)
    SseReader(timing)(_event('{"error": {"message": "busy", "code": 503}}'))
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


DESIGN = Design(max_slowdown=0.2, confidence=0.95, pairs_per_look=8, looks=5)


def _pairs(log_ratios):
    return [(float(np.exp(r)), 1.0) for r in log_ratios]


def test_the_boundary_lies_halfway_between_no_loss_and_the_loss_to_find():
    assert DESIGN.boundary == pytest.approx(0.8944, abs=1e-4)
    assert [n for n in range(1, 60) if DESIGN.is_look(n)] == [8, 16, 24, 32, 40]
    assert DESIGN.one_sided_error == pytest.approx(0.01)


def test_t_quantiles_match_students_within_a_fraction_of_a_percent():
    t = pytest.importorskip("scipy.stats").t
    for df in (4, 5, 8, 15, 40):
        for p in (0.95, 0.99, 0.995):
            assert t_quantile(p, df) == pytest.approx(t.ppf(p, df), rel=3e-3)


def test_equal_pairs_are_not_worse_and_a_fifth_of_the_speed_is_worse():
    rng = np.random.default_rng(1)
    assert compare_pairs("rate", _pairs(rng.normal(0, 0.1, 16)), DESIGN).verdict == "not worse"
    slow = compare_pairs("rate", _pairs(rng.normal(np.log(0.2), 0.1, 8)), DESIGN)
    assert slow.verdict == "worse" and slow.interval[1] < 0.3
    assert "target/baseline 0.2" in slow.describe() and "over 8 round pairs" in slow.describe()


def test_a_loss_at_the_boundary_or_too_few_pairs_is_undecided():
    rng = np.random.default_rng(2)
    at_boundary = compare_pairs("rate", _pairs(rng.normal(np.log(0.894), 0.1, 40)), DESIGN)
    assert at_boundary.verdict == "undecided"
    assert compare_pairs("rate", _pairs([-1.0, -1.0]), DESIGN).verdict == "undecided"
    # A pair missing a side (no completed request) is left out, not counted as equal.
    assert compare_pairs("rate", [(1.0, None), (None, 1.0), (0.5, 1.0)], DESIGN).pairs == 1


def test_the_sequential_error_holds_over_every_look():
    """Simulated gates: no loss failed, and a loss of max_slowdown passed, each at most 5 % over all looks."""
    rng = np.random.default_rng(3)

    def first_decision(mean):
        ratios = rng.normal(mean, 0.15, DESIGN.max_pairs)
        for pairs in range(1, DESIGN.max_pairs + 1):
            if DESIGN.is_look(pairs):
                verdict = compare_pairs("rate", _pairs(ratios[:pairs]), DESIGN).verdict
                if verdict != "undecided":
                    return verdict
        return "undecided"

    equal = [first_decision(0.0) for _ in range(400)]
    lost = [first_decision(np.log(0.8)) for _ in range(400)]
    assert equal.count("worse") <= 20 and lost.count("not worse") <= 20
    assert lost.count("worse") >= 380  # a spread of 0.15 a pair: 40 pairs find a 20 % loss


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


def test_only_a_data_event_carrying_tokens_is_a_generated_token():
    timing = RequestTiming(started=0.0)
    reader = SseReader(timing)
    reader(b": keep-alive\n\n")  # an SSE comment: bytes, no token
    reader(_event('{"choices": [{"text": ""}]}'))  # a chunk with nothing generated
    reader(_event('{"choices": [], "usage": {"prompt_tokens": 32, "completion_tokens": 16}}'))
    assert timing.token_times == [] and timing.ttft is None
    reader(_event('{"error": {"message": "engine dead", "code": 500}}'))
    assert timing.token_times == [] and "an error event" in (timing.error or "")
    reader(_event('{"choices": [{"text": "", "token_ids": [7]}]}'))  # half a character, but a token
    assert len(timing.token_times) == 1


def _delivered(received: int | None, usage: int = 16) -> RequestTiming:
    return RequestTiming(
        started=0.0,
        ended=1.0,
        status=200,
        token_times=[0.1, 0.2],
        prompt_tokens=32,
        completion_tokens=usage,
        tokens_received=received,
    )


def test_the_token_ids_that_arrived_are_counted_against_the_usage():
    timing = RequestTiming(started=0.0)
    reader = SseReader(timing)
    reader(_event('{"choices": [{"text": "a", "token_ids": [1, 2]}]}') + _event('{"choices": [{"token_ids": [3]}]}'))
    assert timing.tokens_received == 3
    assert figures.load_failures([_delivered(16)], 32, 16) == []
    # A relay dropped half the text events: the usage chunk still says 16.
    assert figures.load_failures([_delivered(8)], 32, 16) == [
        "request 0: the stream delivered 8 token ids, its usage counted 16 output tokens (events lost on the way?)"
    ]
    assert "delivered no token ids" in figures.load_failures([_delivered(None)], 32, 16)[0]


def test_an_objective_that_cannot_be_measured_is_named_never_met():
    one_chunk = RequestTiming(started=0.0, ended=1.0, token_times=[0.4], completion_tokens=16)
    measured = figures.latency([Round((one_chunk,), 0.0, 1.0)])
    judged = figures.judge_objectives(measured, {"ttft_p50_seconds": 0.5, "itl_p99_seconds": 0.05})
    assert judged.missed == [] and judged.judged == 1
    assert judged.unmeasured == [f"itl_p99_seconds: {figures.UNMEASURED['itl_p99_seconds']}"]
    nothing = figures.judge_objectives(measured, {})
    assert (nothing.missed, nothing.unmeasured, nothing.judged) == ([], [], 0)


def test_a_round_counts_only_when_half_its_requests_completed():
    done = RequestTiming(started=0.0, ended=1.0, completion_tokens=16, token_times=[0.1, 0.9])
    failed = RequestTiming(started=0.0, ended=1.0, error="HTTP 503")
    assert figures.round_output_rate(Round((done, failed), 0.0, 1.0)) == 16.0
    assert figures.round_output_rate(Round((done, failed, failed), 0.0, 1.0)) is None  # 1 of 3 says nothing


def test_a_baseline_under_the_target_s_url_or_counting_its_requests_is_the_target():
    assert same_server.same_url("http://Host:80/", "http://host")
    assert same_server.same_url("https://h/v1/", "https://h:443/v1")
    assert not same_server.same_url("http://h:8000", "http://h:8001")
    assert same_server.counted_by_both(3.0, 3, (None, None))
    assert same_server.counted_by_both(4.0, 3, (1.5e9, 1.5e9))
    assert not same_server.counted_by_both(3.0, 3, (1.5e9, 1.6e9))  # a busy baseline of its own, started apart
    assert not same_server.counted_by_both(0.0, 3, (None, None))
    assert not same_server.counted_by_both(None, 3, (None, None))


def test_a_concurrency_above_the_requests_of_a_round_is_refused_when_the_profile_is_read():
    profile = {"profile": 1, "name": "p", "serving": {"concurrency": 8, "requests": 4}}
    with pytest.raises(ProfileError, match=r"serving\.concurrency 8 is above serving\.requests 4: a round"):
        validate(profile, "p.yaml")
    with pytest.raises(ProfileError, match=r"serving\.requests 16 \(the default\)"):
        validate({**profile, "serving": {"concurrency": 64}}, "p.yaml")
    validate({**profile, "serving": {"concurrency": 8}}, "p.yaml")


def test_a_round_probes_how_late_the_clients_own_loop_wakes():
    import asyncio

    from suites.serving.loadgen import ClosedLoop, Workload

    class Instant:
        async def request(self, method, path, **kw):
            await asyncio.sleep(0.02)
            raise loadgen.TransportFailure("no server")

    workload = Workload("/v1/completions", "m", ((1, 2),), 2, 2, 4)
    measured = asyncio.run(ClosedLoop().run(Instant(), workload))
    assert measured.client_lag_p90 is not None and 0 <= measured.client_lag_p90 < 0.02


def test_a_client_that_could_not_keep_time_is_named():
    late = Round((), 0.0, 1.0, client_lag_p90=0.05)
    run = ServingRun(target=[late, late], baseline=[late, Round((), 0.0, 1.0, client_lag_p90=0.001)])
    assert figures.client_lag(run) == pytest.approx(0.05)
    assert figures.client_lag(run) > figures.CLIENT_LAG_BOUND
