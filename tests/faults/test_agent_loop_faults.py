"""The agent_loops suite FAILS, naming the contract, when a proxy in front of a real server breaks a loop.

In front of the hermes-parser server (fixtures/server_specs.py "generation"):
the streamed Responses item ids renamed to bare uuids while the final response
keeps the real ones (vllm issue 56285), call ids renumbered per answer from
call_0 (the loop's second call takes the first's id), Anthropic errors
rewritten into OpenAI's envelope, and message_delta without its stop_reason,
in one run, each breaking one contract or two of its own; then
response.function_call_arguments.done dropped, which breaks only the call's.
"""

import pytest

from fixtures.fault_proxy import ErrorsInOpenAIEnvelope, FaultProxy, RewriteJsonResponse, RewriteStream
from fixtures.verdicts import assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GENERATION_PROFILE, agent_loop_verdicts

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("generation")]

RESPONSES, MESSAGES, CHAT = "/v1/responses", "/v1/messages", "/v1/chat/completions"


def run_through(pytester, served, rules, *args):
    with FaultProxy(served("generation").url, rules=rules) as proxy:
        run_suites(pytester, "-m", "agent_loops", *args, url=proxy.url, profile=GENERATION_PROFILE)
        assert all(proxy.hits), f"a fault was never injected: {proxy.hits}"
    return pytester.path / "junit.xml"


@pytest.mark.pins(
    failed={
        "agent_loops.responses_stream_is_the_answer",
        "agent_loops.responses_stream_call_is_the_answer",
        "agent_loops.chat_tool_loop_round_trips",
        "agent_loops.messages_errors_in_anthropic_envelope",
        "agent_loops.messages_stream_is_the_answer",
    }
)
def test_each_broken_loop_fails_its_contract(pytester, served):
    rules = [
        RewriteStream(path=RESPONSES, edit="rename_streamed_item_ids"),
        RewriteJsonResponse(json_path="choices.*.message.tool_calls.*.id", value="call_0", path=CHAT),
        ErrorsInOpenAIEnvelope(path=MESSAGES),
        RewriteStream(path=MESSAGES, edit="drop_message_delta_stop_reason"),
    ]
    junit = run_through(pytester, served, rules)
    assert_verdicts(
        junit,
        agent_loop_verdicts(
            "agent_loops.responses_stream_is_the_answer",
            "agent_loops.responses_stream_call_is_the_answer",
            "agent_loops.chat_tool_loop_round_trips",
            "agent_loops.messages_errors_in_anthropic_envelope",
            "agent_loops.messages_stream_is_the_answer",
        ),
    )
    failed = failed_checks(junit)
    renamed = failed["agent_loops.responses_stream_is_the_answer"]
    assert "the streamed items are not the final answer's" in renamed and "output[0].id: streamed '" in renamed
    assert "output[0].id: streamed '" in failed["agent_loops.responses_stream_call_is_the_answer"]
    assert (
        "the second call's id 'call_0' is one the loop already gave" in failed["agent_loops.chat_tool_loop_round_trips"]
    )
    assert (
        "unknown_model: expected 404 in anthropic's error envelope"
        in failed["agent_loops.messages_errors_in_anthropic_envelope"]
    )
    assert (
        "message_delta $.delta.stop_reason: None, not one of Anthropic's"
        in failed["agent_loops.messages_stream_is_the_answer"]
    )


@pytest.mark.pins(failed={"agent_loops.responses_stream_call_is_the_answer"})
def test_a_dropped_function_call_arguments_done_fails_the_call_only(pytester, served):
    rule = RewriteStream(path=RESPONSES, edit="drop_function_call_arguments_done")
    junit = run_through(pytester, served, [rule], "-k", "responses_stream")
    assert_verdicts(
        junit,
        {
            "agent_loops.responses_stream_is_the_answer": "passed",
            "agent_loops.responses_stream_call_is_the_answer": "failed",
        },
    )
    message = failed_checks(junit)["agent_loops.responses_stream_call_is_the_answer"]
    assert "0 response.function_call_arguments.done events, expected 1" in message


@pytest.mark.pins(failed={"agent_loops.messages_answer_shape"})
def test_a_token_count_that_disagrees_with_the_answer_fails_the_message_shape(pytester, served):
    # count_tokens one over what the answer's usage says for the same messages.
    recount = RewriteJsonResponse(json_path=("input_tokens",), value=lambda n: n + 1, path=f"{MESSAGES}/count_tokens")
    junit = run_through(pytester, served, [recount], "-k", "messages_answer_shape")
    assert_verdicts(junit, {"agent_loops.messages_answer_shape": "failed"})
    message = failed_checks(junit)["agent_loops.messages_answer_shape"]
    assert "but count_tokens counts" in message, message
