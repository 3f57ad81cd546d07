"""What changed since a captured baseline: one test per difference.

Capture a known-good server with ``--vllm-capture-profile=base.yaml``, then
run a canary with ``--vllm-baseline=base.yaml``. A difference that matters for
serving (max_model_len, a route or model removed, the auth posture, the
scale-out state, the tokenizer) fails; any other (the vLLM version, routes or
metric names added, ...) passes and is reported in its test id and as a
``vllm_difference`` property. The whole diff is written as Markdown too
(``--vllm-diff-report``, default ``base.diff.md``).
"""

import pytest

from pytest_vllm_conformance import contract, each


@pytest.fixture(scope="module")
def baseline(vllm_expect):
    return vllm_expect.baseline


@contract("profile_diff.baseline_compared")
def test_target_is_compared_with_the_baseline(baseline, vllm_facts, record_property):
    assert vllm_facts.observed is not None, "the target was not observed, so it cannot be compared with the baseline"
    record_property("vllm_baseline", str(baseline.path))
    record_property("vllm_baseline_version", baseline.data["observed"].get("vllm_version") or "unknown")


@contract("profile_diff.serving_unchanged")
@each("difference", "profile_differences")
def test_difference_from_the_baseline(difference, record_property):
    record_property("vllm_difference", f"{difference.verdict}: {difference.message}")
    assert not difference.matters, f"{difference.message} (baseline {difference.before}, target {difference.after})"
