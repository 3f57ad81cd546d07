"""What changed since a captured baseline: one test per difference.

Capture a known-good server with ``--vllm-capture-profile=base.yaml``, then
run a canary with ``--vllm-baseline=base.yaml``. The comparison must hold the
same model on both sides (``baseline_compared`` fails a baseline of another
model, and records what was compared). A difference that matters for
serving (max_model_len, a route or model removed, the auth posture, the
scale-out state, the tokenizer) fails; any other (the vLLM version, routes or
metric names added, ...) passes and is reported in its test id and as a
``vllm_difference`` property; one that could not be compared (renderings
of two corpus versions) is undecided. The whole diff is written as Markdown too
(``--vllm-diff-report``, default ``base.diff.md``).
"""

import pytest

from pytest_vllm_conformance import contract, each, undecided
from pytest_vllm_conformance.observed.coverage import coverage
from pytest_vllm_conformance.observed.diff import profile_differences


@pytest.fixture(scope="module")
def baseline(vllm_expect):
    return vllm_expect.baseline


@contract("profile_diff.baseline_compared")
def test_baseline_compared(baseline, vllm_facts, vllm_expect, vllm_record, vllm_evidence):
    assert vllm_facts.observed is not None, "the target was not observed, so it cannot be compared with the baseline"
    vllm_record("baseline", str(baseline.path))
    vllm_record("baseline_version", baseline.data["observed"].get("vllm_version") or "unknown")
    ignore = vllm_expect.declared("profile_diff", "ignore").value
    covered = coverage(baseline.data["observed"], vllm_facts.observed, ignore)
    vllm_record("compared", covered.summary())
    problem = covered.problem()
    assert problem is None, f"{baseline.path}: {problem}"
    # The target was observed at the session's start: no request of this test's own is what it judged.
    compared = sum(state == "compared" for state in covered.aspects.values())
    vllm_evidence.judged(compared, "aspects compared", missing="no aspect of the profile could be compared")


@contract("profile_diff.serving_unchanged")
@each("difference", profile_differences)
def test_serving_unchanged(difference, vllm_record, vllm_evidence):
    vllm_record("difference", f"{difference.verdict}: {difference.message}")
    if difference.undecided:
        undecided(difference.message)
    assert not difference.matters, f"{difference.message} (baseline {difference.before}, target {difference.after})"
    vllm_evidence.judged(1, "differences" if difference.aspect != "all" else "comparisons with no difference")
