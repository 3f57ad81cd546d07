"""The agent_loops suite FAILS, naming the contract, when a proxy in front of a real server breaks a loop.

In front of the hermes-parser server (fixtures/server_specs.py "generation"):
the streamed Responses item ids renamed to bare uuids while the final response
keeps the real ones (vllm issue 56285), call ids renumbered per answer from
call_0 (the loop's second call takes the first's id), Anthropic errors
rewritten into OpenAI's envelope, and message_delta without its stop_reason,
in one run, each breaking one contract or two of its own; then
response.function_call_arguments.done dropped, which breaks only the call's;
custom tools dropped from the request as vLLM before 0.32 drops them, which
breaks the three custom-tool contracts, and
response.custom_tool_call_input.done dropped, which breaks only the custom
call's stream; and a gateway that turns every tool_choice into "none", which
fails every loop whose forced call never came.
"""

import pytest

from fixtures.fault_proxy import (
    DropToolsOfType,
    ErrorsInOpenAIEnvelope,
    FaultProxy,
    ReplaceToolChoice,
    Respond,
    RewriteJsonResponse,
    RewriteStream,
    SetJsonField,
)
from fixtures.verdicts import assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import GENERATION

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
        "agent_loops.responses_stream_custom_call_is_the_answer",
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
        GENERATION.verdicts(
            "agent_loops",
            failed=(
                "agent_loops.responses_stream_is_the_answer",
                "agent_loops.responses_stream_call_is_the_answer",
                "agent_loops.responses_stream_custom_call_is_the_answer",
                "agent_loops.chat_tool_loop_round_trips",
                "agent_loops.messages_errors_in_anthropic_envelope",
                "agent_loops.messages_stream_is_the_answer",
            ),
        ),
    )
    failed = failed_checks(junit)
    renamed = failed["agent_loops.responses_stream_is_the_answer"]
    assert "the streamed items are not the final answer's" in renamed and "output[0].id: streamed '" in renamed
    assert "output[0].id: streamed '" in failed["agent_loops.responses_stream_call_is_the_answer"]
    assert "output[0].id: streamed '" in failed["agent_loops.responses_stream_custom_call_is_the_answer"]
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
            "agent_loops.responses_stream_custom_call_is_the_answer": "passed",
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


@pytest.mark.pins(failed={"agent_loops.responses_tool_loop_round_trips"})
def test_call_ids_renumbered_per_answer_fail_the_responses_loop(pytester, served):
    # Every answer's calls numbered from call_0: the second turn's call takes the id the client echoed.
    rule = RewriteJsonResponse(json_path="output.*.call_id", value="call_0", path=RESPONSES)
    junit = run_through(pytester, served, [rule], "-k", "responses_tool_loop")
    assert_verdicts(junit, {"agent_loops.responses_tool_loop_round_trips": "failed"})
    message = failed_checks(junit)["agent_loops.responses_tool_loop_round_trips"]
    assert "call_id 'call_0'" in message and "repeats the first's" in message, message


@pytest.mark.pins(failed={"agent_loops.responses_tool_choice_forms"})
def test_a_gateway_forcing_tool_choice_required_fails_tool_choice_none(pytester, served):
    forced = SetJsonField(field="tool_choice", value="required", path=RESPONSES)
    junit = run_through(pytester, served, [forced], "-k", "responses_tool_choice")
    assert_verdicts(junit, {"agent_loops.responses_tool_choice_forms": "failed"})
    assert (
        "tool_choice none answered with function_call items"
        in failed_checks(junit)["agent_loops.responses_tool_choice_forms"]
    )


@pytest.mark.pins(failed={"agent_loops.responses_previous_response_continues"})
def test_a_previous_response_id_answered_without_a_store_fails(pytester, served):
    # A gateway answering every turn itself: the unknown previous_response_id is "continued" with a 200.
    canned = {"id": "resp_canned", "object": "response", "status": "completed", "output": [], "usage": None}
    junit = run_through(pytester, served, [Respond(status=200, body_json=canned, path=RESPONSES)], "-k", "previous")
    assert_verdicts(junit, {"agent_loops.responses_previous_response_continues": "failed"})
    message = failed_checks(junit)["agent_loops.responses_previous_response_continues"]
    assert "without a response store, previous_response_id 'resp_canned' must be refused" in message, message


@pytest.mark.pins(failed={"agent_loops.messages_tool_use_round_trips"})
def test_tool_use_ids_renumbered_per_answer_fail_the_messages_loop(pytester, served):
    # Every answer's tool_use blocks numbered from toolu_0: the second turn's takes the id the client echoed.
    rule = RewriteJsonResponse(json_path="content.*.id", value="toolu_0", path=MESSAGES)
    junit = run_through(pytester, served, [rule], "-k", "messages_tool_use")
    assert_verdicts(junit, {"agent_loops.messages_tool_use_round_trips": "failed"})
    message = failed_checks(junit)["agent_loops.messages_tool_use_round_trips"]
    assert "the second tool_use's id 'toolu_0' is the first's" in message, message


@pytest.mark.pins(failed={"agent_loops.responses_request_shapes", "agent_loops.responses_item_status_consistent"})
def test_flattened_errors_and_unfinished_items_fail_the_responses_shapes(pytester, served):
    rules = [
        # A gateway that words the route's refusals as a bare string.
        RewriteJsonResponse(json_path=("error",), value="Bad request", path=RESPONSES, statuses=(400,)),
        # Items left in_progress by a proxy that rebuilds the answer (the tiny model's text answers are all cut).
        RewriteJsonResponse(json_path="output.*.status", value="in_progress", path=RESPONSES, statuses=(200,)),
    ]
    junit = run_through(pytester, served, rules, "-k", "request_shapes or item_status")
    assert_verdicts(
        junit,
        {"agent_loops.responses_request_shapes": "failed", "agent_loops.responses_item_status_consistent": "failed"},
    )
    failed = failed_checks(junit)
    assert "expected 400 in OpenAI's error envelope" in failed["agent_loops.responses_request_shapes"]
    assert (
        "has status 'in_progress' in a response of status 'incomplete'"
        in failed["agent_loops.responses_item_status_consistent"]
    )


CUSTOM = (
    "agent_loops.responses_custom_tool_round_trips",
    "agent_loops.responses_stream_custom_call_is_the_answer",
    "agent_loops.responses_custom_tool_formats",
)


@pytest.mark.pins(failed=set(CUSTOM))
def test_custom_tools_dropped_as_before_0_32_fail_every_custom_contract(pytester, served):
    # What vLLM 0.28-0.31 do (fact responses_custom_tools): the custom tools and a tool_choice naming one vanish.
    rule = DropToolsOfType("custom", path=RESPONSES)
    junit = run_through(pytester, served, [rule], "-k", "custom")
    assert_verdicts(junit, dict.fromkeys(CUSTOM, "failed"))
    failed = failed_checks(junit)
    expected = "expected one custom_tool_call item, got the items ['message']: answered as if the custom tool"
    assert f"the loop's forced custom tool: {expected}" in failed[CUSTOM[0]], failed[CUSTOM[0]]
    assert f"the streamed custom tool: {expected}" in failed[CUSTOM[1]], failed[CUSTOM[1]]
    assert "a grammar-format custom tool was answered as if never sent" in failed[CUSTOM[2]], failed[CUSTOM[2]]


@pytest.mark.pins(failed={"agent_loops.responses_stream_custom_call_is_the_answer"})
def test_a_dropped_custom_tool_call_input_done_fails_the_custom_stream_only(pytester, served):
    rule = RewriteStream(path=RESPONSES, edit="drop_custom_tool_call_input_done")
    junit = run_through(pytester, served, [rule], "-k", "responses_stream")
    assert_verdicts(
        junit,
        {
            "agent_loops.responses_stream_is_the_answer": "passed",
            "agent_loops.responses_stream_call_is_the_answer": "passed",
            "agent_loops.responses_stream_custom_call_is_the_answer": "failed",
        },
    )
    message = failed_checks(junit)["agent_loops.responses_stream_custom_call_is_the_answer"]
    assert "0 response.custom_tool_call_input.done events, expected 1" in message, message


FORCED = (
    "agent_loops.responses_stream_call_is_the_answer",
    "agent_loops.chat_tool_loop_round_trips",
    "agent_loops.responses_tool_loop_round_trips",
    "agent_loops.responses_tool_choice_forms",
    "agent_loops.messages_tool_use_round_trips",
)


@pytest.mark.pins(failed=set(FORCED))
def test_a_gateway_turning_every_tool_choice_into_none_fails_every_forced_call(pytester, served):
    # The model then answers in text, cut at its token limit: no call, and no text a call could start with.
    rules = [
        ReplaceToolChoice(value="none", path=f"{CHAT}|{RESPONSES}"),
        ReplaceToolChoice(value={"type": "none"}, path=MESSAGES),
    ]
    junit = run_through(pytester, served, rules, "-k", "stream_call_is or tool_loop or tool_choice_forms or tool_use")
    assert_verdicts(junit, dict.fromkeys(FORCED, "failed"))
    failed = failed_checks(junit)
    for contract in FORCED[2:]:
        assert "a forced tool_choice answered with no call, only [" in failed[contract], failed[contract]
        assert "is no call of ['get_" in failed[contract] and "a forced call that never came" in failed[contract]
    assert "the streamed forced call: a forced tool_choice answered with no call, only ['message']" in failed[FORCED[0]]
    assert "does not start a call" in failed[FORCED[1]], failed[FORCED[1]]
