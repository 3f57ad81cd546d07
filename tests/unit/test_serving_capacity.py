"""Capacity at the objective without a server: the Poisson schedule, the goodput objective, the open loop's early
stop and its lateness, and the search's bracket, confirmation and verdict (docs/serving.md)."""

from __future__ import annotations

import asyncio
import math
import statistics
from dataclasses import dataclass

import pytest

from suites.serving import capacity
from suites.serving.loadgen import RequestTiming, Workload
from suites.serving.open_loop import Goodput, OpenLoop, Sent, Trial, arrival_times

OBJECTIVE = Goodput(ttft_seconds=0.2, tpot_seconds=0.05, share=0.9)


def _timing(ttft: float, tpot: float, tokens: int = 16) -> RequestTiming:
    first = 1.0 + ttft
    return RequestTiming(
        started=1.0,
        ended=first + tpot * (tokens - 1),
        status=200,
        token_times=[first + tpot * i for i in range(tokens)],
        completion_tokens=tokens,
    )


def test_time_per_output_token_is_decode_time_over_the_tokens_after_the_first():
    timing = _timing(0.1, 0.02)
    assert timing.time_per_output_token == pytest.approx(0.02)
    assert RequestTiming(started=0.0, token_times=[0.1], completion_tokens=1).time_per_output_token is None


def test_a_request_meets_the_objective_only_within_both_bounds_and_whole():
    assert OBJECTIVE.meets(_timing(0.1, 0.04), 16)
    assert not OBJECTIVE.meets(_timing(0.3, 0.04), 16)  # first token too late
    assert not OBJECTIVE.meets(_timing(0.1, 0.06), 16)  # decoding too slow
    assert not OBJECTIVE.meets(_timing(0.1, 0.04, tokens=8), 16)  # cut short
    failed = _timing(0.1, 0.04)
    failed.error = "HTTP 503"
    assert not OBJECTIVE.meets(failed, 16)


def test_a_request_in_flight_has_missed_once_no_later_token_can_save_it():
    waiting = RequestTiming(started=1.0)
    assert not OBJECTIVE.missed_already(waiting, 16, now=1.15)
    assert OBJECTIVE.missed_already(waiting, 16, now=1.25)  # no first token within 0.2 s
    decoding = RequestTiming(started=1.0, token_times=[1.1])
    assert not OBJECTIVE.missed_already(decoding, 16, now=1.1 + 0.05 * 15)
    assert OBJECTIVE.missed_already(decoding, 16, now=1.1 + 0.05 * 15 + 0.01)  # the rest at once: still too slow


def test_the_share_allows_the_misses_it_says():
    assert OBJECTIVE.allowed_misses(20) == 2
    assert OBJECTIVE.allowed_misses(21) == 2
    assert Goodput(0.2, None, 1.0).allowed_misses(20) == 0


def test_poisson_arrivals_of_one_seed_are_one_pattern_scaled_by_the_rate():
    slow, fast = arrival_times(2.0, 400, seed=7), arrival_times(8.0, 400, seed=7)
    assert fast == pytest.approx([t / 4 for t in slow])
    assert arrival_times(2.0, 400, seed=8) != slow
    gaps = [b - a for a, b in zip([0.0, *fast], fast, strict=False)]
    assert statistics.mean(gaps) == pytest.approx(1 / 8, rel=0.15)
    assert statistics.stdev(gaps) == pytest.approx(1 / 8, rel=0.2)  # exponential: the deviation is the mean


@dataclass
class _Client:
    """Answers each streamed completion after ``ttft`` seconds, then a token every ``tpot`` seconds: the open loop's
    mechanics (schedule, early stop, cancellation) without a server."""

    ttft: float
    tpot: float
    tokens: int = 4
    sent: int = 0
    cancelled: int = 0

    async def request(self, method, path, *, json_body, on_chunk):
        self.sent += 1
        try:
            await asyncio.sleep(self.ttft)
            for index in range(self.tokens):
                if index:
                    await asyncio.sleep(self.tpot)
                on_chunk(b'data: {"choices": [{"text": "a", "token_ids": [5]}]}\n\n')
            usage = f'{{"choices": [], "usage": {{"prompt_tokens": 2, "completion_tokens": {self.tokens}}}}}'
            on_chunk(f"data: {usage}\n\ndata: [DONE]\n\n".encode())
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return _Answer()


class _Answer:
    status = 200
    truncated = False
    text = ""


WORKLOAD = Workload("/v1/completions", "m", ((1, 2),), output_tokens=4, concurrency=1, requests=30)


def _trial(client: _Client, rate: float, objective: Goodput = OBJECTIVE) -> Trial:
    return asyncio.run(OpenLoop(objective).run(client, WORKLOAD, rate, seed=1))  # type: ignore[arg-type]


def test_an_open_loop_sends_on_schedule_and_a_server_within_the_objective_meets_it():
    client = _Client(ttft=0.1, tpot=0.005)
    # Bounds far from the stand-in's times: a loaded test machine delays the loop by tens of milliseconds.
    trial = _trial(client, rate=30.0, objective=Goodput(ttft_seconds=2.0, tpot_seconds=0.5, share=0.9))
    assert (trial.planned, len(trial.sent), client.sent) == (30, 30, 30)
    assert trial.met and trial.met_requests == 30 and not trial.stopped_early
    assert trial.client_bound is None and trial.kept_schedule == pytest.approx(1, abs=0.1)
    assert trial.lateness_p99 < 0.25
    assert trial.peak_in_flight >= 2  # arrivals do not wait for answers: an open loop
    assert trial.line() == "30.00/s: 30/30 met"


def test_a_trial_that_has_missed_its_share_stops_and_hangs_up_on_what_is_in_flight():
    client = _Client(ttft=0.5, tpot=0.005)  # every first token after the 0.2 s bound
    trial = _trial(client, rate=40.0)  # 30 arrivals over about 0.75 s
    assert not trial.met and trial.stopped_early
    assert len(trial.sent) < 30  # the rest never sent: the outcome was known
    assert client.cancelled == client.sent  # every request in flight cancelled, the server told by the hang-up
    assert all(s.timing.error for s in trial.sent)
    assert trial.seconds < 1.0  # not the 1.25 s the whole trial would take


def _sent(dues: list[float], starts: list[float]) -> tuple[Sent, ...]:
    return tuple(Sent(due, RequestTiming(started=start), True) for due, start in zip(dues, starts, strict=True))


def test_a_trial_whose_sends_fell_behind_their_schedule_measured_the_client():
    dues = [i * 0.1 for i in range(10)]
    on_time = Trial(10.0, 10, _sent(dues, [d + 0.002 for d in dues]), 1.0, False, 3, 0.9)
    behind = Trial(10.0, 10, _sent(dues, [d * 1.25 for d in dues]), 1.2, False, 3, 0.9)
    assert on_time.client_bound is None
    assert behind.kept_schedule == pytest.approx(0.8)
    assert "the client sent at 80% of its schedule's rate" in (behind.client_bound or "")


@dataclass
class _Outcome:
    rate: float
    met: bool
    seconds: float = 2.0
    client_bound: str | None = None


def _knees(target: float, baseline: float, *, flips: dict[tuple[str, int], bool] | None = None):
    """A trial function: a side meets every rate up to its knee; ``flips[(side, n)]`` overrides its n-th outcome."""
    done: dict[str, int] = {"target": 0, "baseline": 0}
    calls: list[tuple[str, float, int]] = []

    def trial(side: str, rate: float, seed: int) -> _Outcome:
        calls.append((side, rate, seed))
        met = rate <= (target if side == "target" else baseline)
        met = (flips or {}).get((side, done[side]), met)
        done[side] += 1
        return _Outcome(rate, met)

    return trial, calls


def test_identical_knees_are_bracketed_on_both_sides_and_not_worse():
    trial, calls = _knees(20.0, 20.0)
    found = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    assert found.ratio.verdict == "not worse"
    for side in (found.target, found.baseline):
        low, high = side.bracket()
        assert low <= 20.0 < high
    assert found.ratio.low > capacity.boundary(0.2) == pytest.approx(math.sqrt(0.8))
    # Interleaved: target, baseline, then baseline, target, ...
    assert [side for side, _, _ in calls[:4]] == ["target", "baseline", "baseline", "target"]


def test_a_target_with_a_fraction_of_the_baseline_s_capacity_is_worse_with_its_deciding_ends_tried_twice():
    trial, calls = _knees(4.0, 20.0)
    found = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    assert found.ratio.verdict == "worse" and found.ratio.high < capacity.boundary(0.2)
    t_high, b_low = found.target.bracket()[1], found.baseline.bracket()[0]
    assert found.target.tried(t_high) == 2 and found.baseline.tried(b_low) == 2
    # The repeat of a rate has a seed of its own; the two sides' first trial at a rate share one.
    seeds = {(side, rate): [s for sd, r, s in calls if (sd, r) == (side, rate)] for side, rate, _ in calls}
    assert seeds[("target", t_high)] == [capacity.SEED, capacity.SEED + 1]
    assert len(calls) <= 10  # decided: the search stops long before its budget


def test_an_outcome_that_flips_on_its_repeat_widens_the_bracket_and_the_verdict_is_not_taken():
    side = capacity.Side("target", [_Outcome(10, True), _Outcome(20, False), _Outcome(14, True), _Outcome(17, False)])
    assert side.bracket() == (14, 17)
    side.trials.append(_Outcome(14, False))  # the repeat at the bracket's low end missed
    assert side.bracket() == (10, 17)
    side.trials.append(_Outcome(17, True))  # met above a rate that missed: both contradicted rates inside
    assert side.bracket() == (10, 20)


def test_a_wrong_worse_is_refuted_by_its_confirmation_and_never_stands():
    # The target's second trial (at its bracket's high end, 14/s: really below its knee of 20) misses by chance.
    trial, _ = _knees(20.0, 20.0, flips={("target", 1): False})
    found = capacity.search(trial, start=7.0, budget_seconds=60, max_slowdown=0.2)
    assert found.ratio.verdict != "worse"


def test_the_budget_bounds_each_side_s_trials():
    trial, _ = _knees(20.0, 20.0)
    found = capacity.search(trial, start=7.0, budget_seconds=6, max_slowdown=0.2)
    assert found.target.spent <= 6 + 2 and found.baseline.spent <= 6 + 2
    assert found.ratio.verdict == "undecided" and "budget is spent" in found.stopped


def test_a_baseline_that_meets_nothing_is_no_better_and_two_that_meet_nothing_give_no_verdict():
    trial, _ = _knees(20.0, 0.0)
    found = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    assert found.baseline.bracket()[0] == 0 and math.isinf(found.ratio.high)
    assert found.ratio.verdict == "not worse"  # the target met 20/s where the baseline met nothing down to 7/64
    trial, _ = _knees(0.0, 0.0)
    found = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    assert (found.ratio.low, found.ratio.high, found.ratio.verdict) == (0, math.inf, "undecided")
    assert "no rate met the objective" in found.stopped


def test_trials_whose_client_fell_behind_are_left_out_and_a_search_they_leave_open_names_the_client():
    behind = "at 28.00/s scheduled the client sent at 80% of its schedule's rate"

    def trial(side: str, rate: float, seed: int) -> _Outcome:  # both knees at 40/s, the client's ceiling 25/s
        return _Outcome(rate, rate <= 40, client_bound=behind if rate > 25 else None)

    found = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    for side in (found.target, found.baseline):
        assert side.ceiling <= 28 and math.isinf(side.bracket()[1])  # no trial the client could not keep decides
        assert all(t.rate < side.ceiling or t.client_bound for t in side.trials)
    assert found.ratio.verdict == "undecided" and found.client_bound == behind
    assert "trials left out, the client behind its schedule" in found.line()


def test_a_rate_whose_trials_split_evenly_is_tried_again_and_the_majority_places_it():
    side = capacity.Side("baseline", [_Outcome(26, False), _Outcome(26, True)])
    assert side.outcomes() == {26: None} and side.bracket() == (0.0, math.inf)
    assert capacity._next_rate(side, 26, []) == 26  # the tie is broken by one more trial
    side.trials.append(_Outcome(26, True))
    assert side.bracket() == (26, math.inf)
    assert capacity._next_rate(side, 26, []) == 52  # then up from the highest rate met
