"""Output quality: the target answers as well as its baseline, and greedily the same.

GPTQ act-order and YaRN changed in vLLM 0.30 (vllm/config/model.py and
vllm/model_executor/layers/quantization/utils/gptq_utils.py at v0.30.0): a
server that starts and answers can still answer differently, and only its
output shows it. Every check compares the target with a baseline:
a second live server (--vllm-baseline-url, the old version or config, asked
the same requests in this run) or the results an earlier run saved
(--vllm-eval-save, read back with --vllm-eval-baseline-file).

* Logprob drift: long fixed texts, scored token by token by both servers
  (teacher forcing), stay within limits on the mean, the tail and the
  perplexity ratio, in each bucket of the context (to 25/50/90/100 % of
  max_model_len): an ignored g_idx moves every bucket, a wrong YaRN factor
  the far ones most; a baseline too noisy to judge against is undecided.
* Greedy equivalence: fixed token-id prompts continued at temperature 0 give
  the baseline's tokens, except at a near-tie (each side's token in the
  other's top-k, within a small logprob gap); the failure names the first
  diverging position and both sides' logprobs there.
* lm-eval tasks on lm-eval's own API backends: short answers (completions and
  chat), multiple choice by loglikelihood, retrieval at 25-100 % of
  max_model_len (the YaRN-sensitive one), and any task of your own. A task
  fails only when the paired interval of target minus baseline lies wholly
  below -tolerance (paired.py beside this file).

Random-weight test models score about nothing on these tasks: the tests
assert contracts (agreement, statistical gates), never wording.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import pytest

from pytest_vllm_conformance import contract, each, undecided

from . import assemble, logprob_drift, offline, session, task_files
from .not_worse import assert_not_worse
from .task_files import user_eval_tasks

T = TypeVar("T")


@pytest.fixture(scope="module")
def quality(pytestconfig, vllm_settings, vllm_facts, vllm_client, vllm_expect, tmp_path_factory):
    spread = hasattr(pytestconfig, "workerinput") and pytestconfig.getoption("dist", "no") in ("load", "worksteal")
    run_dir = tmp_path_factory.mktemp("quality")
    try:
        with assemble.suite_run(
            vllm_settings, vllm_expect, vllm_facts, vllm_client, run_dir, spread_over_workers=spread
        ) as run:
            yield run
    except assemble.QualityRunRefused as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def lm_eval_ready(quality):
    try:
        offline.require_lm_eval()
    except offline.LmEvalMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def outcome_of(compare: Callable[[], T]) -> T:
    """One comparison; a skip when it cannot be made, a failure when a server could not answer it."""
    try:
        return compare()
    except assemble.NOT_COMPARED as exc:
        pytest.skip(f"could not compare: {exc}")
    except assemble.NOT_ANSWERED as exc:
        pytest.fail(str(exc), pytrace=False)


@contract("quality.logprob_drift_within_noise")
@each("bucket", logprob_drift.drift_buckets)
def test_logprob_drift_within_noise(quality, bucket, vllm_record, vllm_evidence):
    drift = outcome_of(lambda: quality.logprob_drift(bucket))
    for name, value in drift.properties().items():
        vllm_record(name, value)
    vllm_record("figures", drift.figures())
    assert not drift.drifted, (
        f"the target's logprobs moved from the baseline's ({quality.baseline_label}) past the limits: "
        f"{drift.why()}. {drift}; moved most: " + "; ".join(str(moved) for moved in drift.moved_most)
    )
    if drift.verdict == "undecided":
        undecided(f"the baseline is too noisy to judge drift against: {drift.why()}. {drift}")
    vllm_evidence.judged(
        drift.scored_positions,
        "scored positions",
        missing=f"fewer than {drift.min_positions} positions scored: {drift}",
    )


@contract("quality.greedy_tokens_match_baseline")
def test_greedy_tokens_match_baseline(quality, vllm_record, vllm_evidence):
    outcome = outcome_of(quality.greedy)
    diverging = outcome.diverging
    first = min((divergence.position for divergence in diverging), default=None)
    vllm_record("vllm_quality_greedy_prompts", len(outcome.divergences))
    vllm_record("vllm_quality_greedy_diverging_prompts", len(diverging))
    vllm_record("vllm_quality_greedy_first_divergence", "none" if first is None else first)
    vllm_record(
        "vllm_quality_greedy_near_ties",
        "; ".join(f"prompt {tie.prompt_index} at position {tie.position}" for tie in outcome.near_ties) or "none",
    )
    vllm_record("vllm_quality_greedy_compared_tokens", outcome.compared_tokens)
    vllm_record("vllm_quality_greedy_min_compared_tokens", outcome.min_compared_tokens)
    vllm_record("figures", outcome.figures())
    notes = "".join(f"\n  ({note})" for note in outcome.notes)
    notes += "".join(f"\n  (accepted: {tie})" for tie in outcome.near_ties)
    count = len(diverging)
    assert count == 0, (
        f"greedy tokens differ from the baseline ({quality.baseline_label}) on {count} of "
        f"{len(outcome.divergences)} prompts; the earliest first diverging token is at position {first}:\n  "
        + "\n  ".join(str(divergence) for divergence in diverging)
        + notes
    )
    if outcome.undecided:
        undecided(
            f"near-ties ended the prompts' comparisons after {outcome.compared_tokens} equal tokens in all, "
            f"fewer than the {outcome.min_compared_tokens} required (quality.greedy_min_compared_tokens): "
            f"{outcome.figures()}"
        )
    vllm_evidence.judged(len(outcome.divergences), "prompts", missing="no prompt was compared")
    vllm_evidence.judged(outcome.compared_tokens, "equal tokens", missing="no token was compared")


@contract("quality.short_answer_not_worse")
@pytest.mark.parametrize("backend", ["completions", "chat"])
def test_short_answer_not_worse(quality, lm_eval_ready, backend, vllm_record, vllm_evidence):
    assert_not_worse(
        [outcome_of(lambda: quality.shipped(task_files.SHORT_ANSWER, backend))], vllm_record, vllm_evidence
    )


@contract("quality.multiple_choice_not_worse")
def test_multiple_choice_not_worse(quality, lm_eval_ready, vllm_record, vllm_evidence):
    assert_not_worse(
        [outcome_of(lambda: quality.shipped(task_files.MULTIPLE_CHOICE, "completions"))], vllm_record, vllm_evidence
    )


@contract("quality.long_context_not_worse")
@pytest.mark.parametrize("percent", session.LONG_CONTEXT_PERCENTS, ids=[f"{p}%" for p in session.LONG_CONTEXT_PERCENTS])
def test_long_context_not_worse(quality, lm_eval_ready, percent, vllm_record, vllm_evidence):
    assert_not_worse([outcome_of(lambda: quality.long_context(percent))], vllm_record, vllm_evidence)


@contract("quality.user_task_not_worse")
@each("user_task", user_eval_tasks)
def test_user_task_not_worse(quality, lm_eval_ready, user_task, vllm_record, vllm_evidence):
    runs = outcome_of(lambda: quality.user_task(user_task.name))
    if not runs:
        pytest.fail(f"lm-eval ran {user_task.name!r} but gave no per-item results", pytrace=False)
    assert_not_worse([outcome_of(partial(quality.user_task_outcome, run)) for run in runs], vllm_record, vllm_evidence)
