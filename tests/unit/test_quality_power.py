"""What a quality comparison can see: the minimum detectable drop, the underpowered verdict,
and the generated items that grow the shipped sets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fixtures.verdicts import contract_runs
from suites.quality import assemble, generated, long_context, paired, task_files


def items(values):
    return {str(index): float(value) for index, value in enumerate(values)}


def compare(target, baseline, **kwargs):
    options = {"higher_is_better": True, "tolerance": 0.05, "confidence": 0.95, **kwargs}
    return paired.compare("exact_match", items(target), items(baseline), **options)


# ---- the minimum detectable drop ---------------------------------------------------


@pytest.mark.parametrize(
    "right, n, drop",
    [
        # Only discordant items move the paired interval, so the drop hardly depends on the score.
        (20, 40, 0.2),
        (40, 40, 0.175),
        (200, 400, 0.0775),
        (100, 200, 0.095),
        (180, 200, 0.09),
        (50, 100, 0.12),
        (4, 8, 0.5),
    ],
)
def test_the_detectable_drop_is_the_first_loss_the_gate_fails(right, n, drop):
    assert paired.newcombe_detectable_drop(right, n, 0.95, 0.05) == drop
    lost = round(drop * n)
    # The gate's own rule: losing that many right items puts the interval wholly below -tolerance, one fewer not.
    assert paired.newcombe_paired_interval(right - lost, 0, lost, n - right, 0.95)[1] < -0.05
    assert paired.newcombe_paired_interval(right - lost + 1, 0, lost - 1, n - right, 0.95)[1] >= -0.05


def test_the_drop_is_judged_below_the_tolerance_not_below_zero():
    # Below 0, 100 items would see 0.05; the gate fails nothing under 0.12 at a 0.05 tolerance.
    assert paired.newcombe_detectable_drop(50, 100, 0.95, 0.0) == 0.05
    assert paired.newcombe_detectable_drop(50, 100, 0.95, 0.05) == 0.12
    drops = {t: compare([1] * 30 + [0] * 10, [1] * 30 + [0] * 10, tolerance=t).detectable_drop for t in (0, 0.05, 0.1)}
    assert drops[0] < drops[0.05] < drops[0.1]


def test_five_right_items_of_forty_cannot_fail_a_005_tolerance_gate_at_all():
    # Losing all five is a drop of 0.125, but the interval of so few discordant items still reaches above -0.05.
    assert paired.newcombe_detectable_drop(5, 40, 0.95, 0.0) == 0.125
    assert paired.newcombe_detectable_drop(5, 40, 0.95, 0.05) is None
    comparison = compare([0] * 35 + [1] * 5, [0] * 35 + [1] * 5)
    assert comparison.verdict == "underpowered"
    assert "even losing all 5 items the baseline got right would not fail it" in str(comparison)


def test_a_baseline_that_got_nothing_right_can_show_no_drop():
    comparison = compare([0] * 40 + [1], [0] * 41)
    assert comparison.detectable_drop is None and not comparison.cannot_discriminate
    assert comparison.properties()["vllm_quality_detectable_drop"] == "none possible"
    assert "minimum detectable drop: none possible (the baseline got no item right, so no drop can show)" in str(
        comparison
    )
    assert comparison.verdict == "underpowered"


def test_the_statement_is_in_the_message_and_the_properties_whatever_the_verdict():
    comparison = compare([1] * 100 + [0] * 100, [1] * 100 + [0] * 100)
    properties = comparison.properties()
    assert properties["vllm_quality_detectable_drop"] == 0.095
    assert properties["vllm_quality_required_detectable_drop"] == 0.1
    assert properties["vllm_quality_cannot_discriminate"] is False
    # 200 items can fail a drop of 0.095, within the default requirement: twice the tolerance.
    assert (
        "tolerance 0.05; minimum detectable drop 0.0950, required at most 0.1 (tolerance 0.05 + 0.05)): not worse"
        in (str(comparison))
    )


def test_a_lower_is_better_metric_counts_its_zeros_as_right():
    assert compare([1] * 200, [1] * 200, higher_is_better=False).detectable_drop is None
    assert (
        compare([0] * 199 + [1], [0] * 199 + [1], higher_is_better=False).detectable_drop == 0.09
    )  # 199 of 200 losable


def test_a_bootstrapped_metric_drops_its_best_items_to_its_worst_value():
    values = np.array([1.0] * 20 + [0.0] * 20)
    drop = paired.bootstrap_detectable_drop(values, 0.95, 0.05)
    assert drop is not None and 0.05 < drop <= 0.2
    # The same items lost, each losing half as much, against half the tolerance: half the drop.
    assert paired.bootstrap_detectable_drop(values / 2, 0.95, 0.025) == pytest.approx(drop / 2)
    assert paired.bootstrap_detectable_drop(np.full(40, 0.7), 0.95, 0.05) is None
    scored = paired.compare(
        "f1", items([0.5] * 40), items([0.5] * 40), higher_is_better=True, tolerance=0.05, confidence=0.95
    )
    assert scored.detectable_drop is None and scored.verdict == "underpowered"


# ---- the requirement --------------------------------------------------------------


def test_by_default_a_comparison_must_fail_a_drop_of_twice_the_tolerance():
    # 100 items can fail 0.12 at best: blind past 0.10, so underpowered with no requirement declared.
    hundred = compare([1] * 50 + [0] * 50, [1] * 50 + [0] * 50)
    assert hundred.verdict == "underpowered"
    assert "minimum detectable drop 0.1200, required at most 0.1 (tolerance 0.05 + 0.05)" in hundred.power()
    # The requirement follows the tolerance: at 0.1, 100 items must fail 0.2, and can (0.17).
    assert compare([1] * 50 + [0] * 50, [1] * 50 + [0] * 50, tolerance=0.1).verdict == "not worse"


def test_a_declared_requirement_is_how_far_past_the_tolerance_the_gate_may_stay_blind():
    strict = compare([1] * 100 + [0] * 100, [1] * 100 + [0] * 100, max_detectable_drop=0.02)
    assert strict.verdict == "underpowered" and strict.required_drop == pytest.approx(0.07)
    loose = compare([1] * 50 + [0] * 50, [1] * 50 + [0] * 50, max_detectable_drop=0.1)
    assert loose.verdict == "not worse" and loose.properties()["vllm_quality_required_detectable_drop"] == 0.15


def test_four_hundred_items_meet_a_requirement_of_003():
    comparison = compare([1] * 200 + [0] * 200, [1] * 200 + [0] * 200, max_detectable_drop=0.03)
    assert comparison.detectable_drop == 0.0775
    assert comparison.verdict == "not worse"


@pytest.mark.parametrize(
    "value, higher_is_better, extreme",
    [(0, True, "the floor"), (1, True, "the ceiling"), (1, False, "the floor"), (0, False, "the ceiling")],
)
def test_both_sides_at_the_floor_or_the_ceiling_cannot_discriminate(value, higher_is_better, extreme):
    # 0 of 100 on both sides is [-0.037, +0.037], inside the tolerance: not a judgement of anything.
    comparison = compare([value] * 100, [value] * 100, higher_is_better=higher_is_better, max_detectable_drop=0.5)
    assert comparison.cannot_discriminate and comparison.verdict == "underpowered"
    assert comparison.power() == (
        f"the task cannot discriminate on this model: both sides score {value} on every item ({extreme})"
    )
    assert comparison.properties()["vllm_quality_cannot_discriminate"] is True


def test_agreeing_on_every_item_is_no_floor_when_the_items_differ():
    comparison = compare([1] * 100 + [0] * 100, [1] * 100 + [0] * 100)
    assert not comparison.cannot_discriminate and comparison.verdict == "not worse"


def test_a_drop_already_shown_stays_worse():
    comparison = compare([0] * 8, [1] * 8, max_detectable_drop=0.05)
    assert comparison.detectable_drop == 0.5
    assert comparison.verdict == "worse"


@pytest.mark.parametrize("drop", [0, 1, -0.1, 1.5])
def test_a_requirement_outside_zero_to_one_is_refused(drop):
    with pytest.raises(ValueError, match="max_detectable_drop must be between 0 and 1"):
        assemble.check_power(drop, 40)


# ---- the generated items ---------------------------------------------------------------


def hand_written(template):
    return [json.loads(line) for line in (task_files.TASKS_DIR / f"{template}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("template", sorted(generated.GENERATORS))
def test_a_set_is_its_hand_written_items_then_generated_ones_of_the_size_asked(template):
    written = hand_written(template)
    assert len(written) == task_files.HAND_WRITTEN_ITEMS
    for size in (1, 40, 41, 200, 1000):
        made = generated.items(template, size, written)
        assert len(made) == size
        assert made[: min(size, 40)] == written[: min(size, 40)]
        assert len({json.dumps(item, sort_keys=True) for item in made}) == size  # no item counted twice


@pytest.mark.parametrize("template", sorted(generated.GENERATORS))
def test_generated_items_are_the_same_in_every_run_and_a_smaller_set_is_a_prefix(template):
    written = hand_written(template)
    large = generated.items(template, 500, written)
    assert generated.items(template, 500, written) == large
    assert generated.items(template, 120, written) == large[:120]


def test_generated_items_have_the_shipped_formats_and_right_answers():
    for item in generated.items("short_answer", 400, hand_written("short_answer"))[40:]:
        assert set(item) == {"question", "answer"} and item["answer"].strip() == item["answer"] != ""
        question = item["question"]
        if question.startswith("What is ") and " + " in question:
            a, b = question.removeprefix("What is ").removesuffix("?").split(" + ")
            assert int(item["answer"]) == int(a) + int(b)
    for item in generated.items("multiple_choice", 400, hand_written("multiple_choice"))[40:]:
        assert set(item) == {"question", "choices", "answer"}
        assert len(item["choices"]) == len(set(item["choices"])) == 4 and 0 <= item["answer"] < 4
        if item["question"] == "Which number is the largest?":
            assert item["choices"][item["answer"]] == str(max(int(choice) for choice in item["choices"]))


@pytest.mark.parametrize("size", [0, generated.MAX_ITEMS + 1])
def test_a_size_out_of_range_is_refused(size):
    with pytest.raises(ValueError, match="1 to 5000 items"):
        generated.items("short_answer", size, hand_written("short_answer"))
    with pytest.raises(ValueError, match="eval_items must be 1 to 5000"):
        assemble.check_power(None, size)


def test_the_shipped_sets_are_written_at_the_size_asked(tmp_path):
    run_dir = task_files.write_shipped(tmp_path, 75)
    for name in task_files.SHIPPED:
        assert len((run_dir / f"{name}.jsonl").read_text().splitlines()) == 75


# ---- the suite's verdicts, in a pytester run of the plugin -----------------------------


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_API_KEY", "VLLM_CONFORMANCE_PROFILE", "VLLM_CONFORMANCE_GATE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


STAND_IN = """
from pytest_vllm_conformance import contract
from suites.quality import paired, session
from suites.quality.not_worse import assert_not_worse

def outcome(right, n, **gate):
    same = {str(index): float(index < right) for index in range(n)}
    options = {"higher_is_better": True, "tolerance": 0.05, "confidence": 0.95, **gate}
    return session.Outcome("task_{}".format(n), [paired.compare("acc,none", same, same, **options)], [])

@contract("quality.multiple_choice_not_worse")
def test_a_hundred_items(vllm_record, vllm_evidence):
    assert_not_worse([outcome(50, 100)], vllm_record, vllm_evidence)

@contract("quality.short_answer_not_worse")
def test_four_hundred_items(vllm_record, vllm_evidence):
    assert_not_worse([outcome(200, 400, max_detectable_drop=0.05)], vllm_record, vllm_evidence)

@contract("quality.long_context_not_worse")
def test_nothing_right(vllm_record, vllm_evidence):
    assert_not_worse([outcome(0, 8)], vllm_record, vllm_evidence)
"""


def test_underpowered_comparisons_skip_naming_task_items_drop_and_requirement(pytester, clean_env):
    pytester.makepyfile(STAND_IN)
    baseline = pytester.path / "baseline.json"  # claims the feature; the stand-ins never open it
    args = ("-p", "no:cacheprovider", "-rs", f"--vllm-eval-baseline-file={baseline}", "--junitxml=junit.xml")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.OK
    assert result.parseoutcomes() == {"passed": 1, "undecided": 2}
    result.stdout.fnmatch_lines(
        [
            "UNDECIDED *underpowered: task_100 acc,none: 100 items, minimum detectable drop 0.1200, "
            "required at most 0.1 "
            "(tolerance 0.05 + 0.05) (quality.max_detectable_drop)",
            "UNDECIDED *underpowered: task_8 acc,none: 8 items, the task cannot discriminate on this model: "
            "both sides score 0 "
            "on every item (the floor)",
        ]
    )
    runs = {run.contract: run.properties for run in contract_runs(pytester.path / "junit.xml")}
    assert runs["quality.short_answer_not_worse"]["vllm_quality_detectable_drop"] == "0.0775"
    assert runs["quality.short_answer_not_worse"]["vllm_quality_verdict"] == "not worse"
    assert runs["quality.long_context_not_worse"]["vllm_quality_detectable_drop"] == "none possible"
    assert runs["quality.multiple_choice_not_worse"]["vllm_quality_verdict"] == "underpowered"
    strict = pytester.runpytest(*args, "--vllm-gate=strict")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    strict.stdout.fnmatch_lines(["--vllm-gate=strict: partial feature(s) fail the run: quality (1 of 3 checked)"])


def test_the_long_context_set_has_the_documents_per_length_asked():
    from tests.unit.test_quality_evals import WordTokenizer

    docs = long_context.documents(WordTokenizer(), "m", long_context.Sizing(25, 2048), 30)
    assert len(docs) == 30 and len({doc["depth"] for doc in docs}) == 30
    assert (
        paired.newcombe_detectable_drop(30, 30, 0.95, 0.05) < paired.newcombe_detectable_drop(8, 8, 0.95, 0.05) == 0.5
    )
    with pytest.raises(ValueError, match="long_context_items must be 1 to 500"):
        assemble.check_power(None, 40, 0)
