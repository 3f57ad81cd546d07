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
fails every loop whose forced call never came. A call output naming no call,
which every release accepts (a known departure), fails when refused other than
as OpenAI refuses it, and passes when refused as OpenAI does (the relay stands
in for a release that fixes the departure).
"""

from typing import NamedTuple

import pytest

from fixtures.fault_proxy import (
    DropToolsOfType,
    ErrorsInOpenAIEnvelope,
    ReplaceToolChoice,
    Respond,
    RewriteJsonResponse,
    RewriteStream,
    SetJsonField,
)
from fixtures.verdicts import assert_failures_say, assert_verdicts
from suites.agent_loops.responses_loop import UNKNOWN_CALL_ID
from tests.conftest import requires_vllm, run_through_proxy
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import GENERATION

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("generation")]

RESPONSES, MESSAGES, CHAT = "/v1/responses", "/v1/messages", "/v1/chat/completions"
STREAM = "agent_loops.responses_stream_is_the_answer"
STREAM_CALL = "agent_loops.responses_stream_call_is_the_answer"
STREAM_CUSTOM_CALL = "agent_loops.responses_stream_custom_call_is_the_answer"
CHAT_LOOP = "agent_loops.chat_tool_loop_round_trips"
RESPONSES_LOOP = "agent_loops.responses_tool_loop_round_trips"
TOOL_CHOICE_FORMS = "agent_loops.responses_tool_choice_forms"
MESSAGES_LOOP = "agent_loops.messages_tool_use_round_trips"
CUSTOM = (
    "agent_loops.responses_custom_tool_round_trips",
    STREAM_CUSTOM_CALL,
    "agent_loops.responses_custom_tool_formats",
)
FORCED = (STREAM_CALL, CHAT_LOOP, RESPONSES_LOOP, TOOL_CHOICE_FORMS, MESSAGES_LOOP)
ORPHAN = "agent_loops.responses_unknown_call_output_refused"
NOT_CUSTOM = "expected one custom_tool_call item, got the items ['message']: answered as if the custom tool"
NO_FORCED_CALL = (
    "a forced tool_choice answered with no call, only [",
    "is no call of ['get_",
    "a forced call that never came",
)


class Fault(NamedTuple):
    rules: list
    selected: str | None  # the agent_loops tests run (-k), None for all
    verdicts: dict  # the run's whole verdict table: what the fault fails, and what it leaves
    words: dict  # failed test -> the words its failure must hold (one phrase, or each of several)


def _refusal(message: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}


OPENAI_REFUSAL = _refusal(f"No tool call found for function call output with call_id {UNKNOWN_CALL_ID}.")


def _responses_streams_failing(contract: str) -> dict:
    """The verdicts of ``-k responses_stream``: the one contract failed, the other two streams passed."""
    return {**dict.fromkeys((STREAM, STREAM_CALL, STREAM_CUSTOM_CALL), "passed"), contract: "failed"}


FAULTS = {
    "each broken loop fails its contract": Fault(
        [
            RewriteStream(path=RESPONSES, edit="rename_streamed_item_ids"),
            RewriteJsonResponse(json_path="choices.*.message.tool_calls.*.id", value="call_0", path=CHAT),
            ErrorsInOpenAIEnvelope(path=MESSAGES),
            RewriteStream(path=MESSAGES, edit="drop_message_delta_stop_reason"),
        ],
        None,
        GENERATION.verdicts(
            "agent_loops",
            failed=(
                STREAM,
                STREAM_CALL,
                STREAM_CUSTOM_CALL,
                CHAT_LOOP,
                "agent_loops.messages_errors_in_anthropic_envelope",
                "agent_loops.messages_stream_is_the_answer",
            ),
        ),
        {
            STREAM: ("the streamed items are not the final answer's", "output[0].id: streamed '"),
            STREAM_CALL: "output[0].id: streamed '",
            STREAM_CUSTOM_CALL: "output[0].id: streamed '",
            CHAT_LOOP: "the second call's id 'call_0' is one the loop already gave",
            "agent_loops.messages_errors_in_anthropic_envelope": (
                "unknown_model: expected 404 in anthropic's error envelope"
            ),
            "agent_loops.messages_stream_is_the_answer": (
                "message_delta $.delta.stop_reason: None, not one of Anthropic's"
            ),
        },
    ),
    "a dropped function_call_arguments.done fails the call only": Fault(
        [RewriteStream(path=RESPONSES, edit="drop_function_call_arguments_done")],
        "responses_stream",
        _responses_streams_failing(STREAM_CALL),
        {STREAM_CALL: "0 response.function_call_arguments.done events, expected 1"},
    ),
    # count_tokens one over what the answer's usage says for the same messages.
    "a token count that disagrees with the answer fails the message shape": Fault(
        [RewriteJsonResponse(json_path=("input_tokens",), value=lambda n: n + 1, path=f"{MESSAGES}/count_tokens")],
        "messages_answer_shape",
        {"agent_loops.messages_answer_shape": "failed"},
        {"agent_loops.messages_answer_shape": "but count_tokens counts"},
    ),
    # Every answer's calls numbered from call_0: the second turn's call takes the id the client echoed.
    "call ids renumbered per answer fail the responses loop": Fault(
        [RewriteJsonResponse(json_path="output.*.call_id", value="call_0", path=RESPONSES)],
        "responses_tool_loop",
        {RESPONSES_LOOP: "failed"},
        {RESPONSES_LOOP: ("call_id 'call_0'", "repeats the first's")},
    ),
    "a gateway forcing tool_choice required fails tool_choice none": Fault(
        [SetJsonField(field="tool_choice", value="required", path=RESPONSES)],
        "responses_tool_choice",
        {TOOL_CHOICE_FORMS: "failed"},
        {TOOL_CHOICE_FORMS: "tool_choice none answered with function_call items"},
    ),
    # A gateway answering every turn itself: the unknown previous_response_id is "continued" with a 200.
    "a previous_response_id answered without a store fails": Fault(
        [
            Respond(
                status=200,
                body_json={
                    "id": "resp_canned",
                    "object": "response",
                    "status": "completed",
                    "output": [],
                    "usage": None,
                },
                path=RESPONSES,
            )
        ],
        "previous",
        {"agent_loops.responses_previous_response_continues": "failed"},
        {
            "agent_loops.responses_previous_response_continues": (
                "without a response store, previous_response_id 'resp_canned' must be refused"
            )
        },
    ),
    # Every answer's tool_use blocks numbered from toolu_0: the second turn's takes the id the client echoed.
    "tool_use ids renumbered per answer fail the messages loop": Fault(
        [RewriteJsonResponse(json_path="content.*.id", value="toolu_0", path=MESSAGES)],
        "messages_tool_use",
        {MESSAGES_LOOP: "failed"},
        {MESSAGES_LOOP: "the second tool_use's id 'toolu_0' is the first's"},
    ),
    "flattened errors and unfinished items fail the responses shapes": Fault(
        [
            # A gateway that words the route's refusals as a bare string.
            RewriteJsonResponse(json_path=("error",), value="Bad request", path=RESPONSES, statuses=(400,)),
            # Items left in_progress by a proxy that rebuilds the answer (the tiny model's text answers are all cut).
            RewriteJsonResponse(json_path="output.*.status", value="in_progress", path=RESPONSES, statuses=(200,)),
        ],
        "request_shapes or item_status",
        {"agent_loops.responses_request_shapes": "failed", "agent_loops.responses_item_status_consistent": "failed"},
        {
            "agent_loops.responses_request_shapes": "expected 400 in OpenAI's error envelope",
            "agent_loops.responses_item_status_consistent": (
                "has status 'in_progress' in a response of status 'incomplete'"
            ),
        },
    ),
    # What vLLM 0.28-0.31 do (fact responses_custom_tools): the custom tools and a tool_choice naming one vanish.
    "custom tools dropped as before 0.32 fail every custom contract": Fault(
        [DropToolsOfType("custom", path=RESPONSES)],
        "custom",
        dict.fromkeys(CUSTOM, "failed"),
        {
            CUSTOM[0]: f"the loop's forced custom tool: {NOT_CUSTOM}",
            CUSTOM[1]: f"the streamed custom tool: {NOT_CUSTOM}",
            CUSTOM[2]: "a grammar-format custom tool was answered as if never sent",
        },
    ),
    "a dropped custom_tool_call_input.done fails the custom stream only": Fault(
        [RewriteStream(path=RESPONSES, edit="drop_custom_tool_call_input_done")],
        "responses_stream",
        _responses_streams_failing(STREAM_CUSTOM_CALL),
        {STREAM_CUSTOM_CALL: "0 response.custom_tool_call_input.done events, expected 1"},
    ),
    # The model then answers in text, cut at its token limit: no call, and no text a call could start with.
    "a gateway turning every tool_choice into none fails every forced call": Fault(
        [
            ReplaceToolChoice(value="none", path=f"{CHAT}|{RESPONSES}"),
            ReplaceToolChoice(value={"type": "none"}, path=MESSAGES),
        ],
        "stream_call_is or tool_loop or tool_choice_forms or tool_use",
        dict.fromkeys(FORCED, "failed"),
        {
            STREAM_CALL: "the streamed forced call: a forced tool_choice answered with no call, only ['message']",
            CHAT_LOOP: "does not start a call",
            **dict.fromkeys(FORCED[2:], NO_FORCED_CALL),
        },
    ),
    "an orphan call output answered 500 fails its refusal": Fault(
        [Respond(status=500, body_json=OPENAI_REFUSAL, path=RESPONSES)],
        "unknown_call_output",
        {ORPHAN: "failed"},
        {ORPHAN: ("expected 400, as OpenAI's API refuses it, got POST /v1/responses", "-> 500")},
    ),
    "an orphan call output refused without its call_id fails": Fault(
        [Respond(status=400, body_json=_refusal("Invalid input."), path=RESPONSES)],
        "unknown_call_output",
        {ORPHAN: "failed"},
        {ORPHAN: f"does not name its call_id {UNKNOWN_CALL_ID!r}"},
    ),
}


@pytest.mark.parametrize(
    "fault", [pytest.param(name, marks=pytest.mark.pins(failed=f.verdicts), id=name) for name, f in FAULTS.items()]
)
def test_a_broken_loop_fails_exactly_its_contracts(pytester, served, fault):
    rules, selected, expected, words = FAULTS[fault]
    selection = ("-k", selected) if selected else ()
    junit = run_through_proxy(
        pytester, served("generation").url, rules, "-m", "agent_loops", *selection, profile=GENERATION_PROFILE
    )
    assert_verdicts(junit, expected)
    assert_failures_say(junit, words)


@pytest.mark.pins(healthy={ORPHAN})
def test_a_release_refusing_an_orphan_call_output_as_openai_does_passes(pytester, served):
    """Every release accepts the output (its known departure); OpenAI's refusal, from the relay, passes."""
    rules = [Respond(status=400, body_json=OPENAI_REFUSAL, path=RESPONSES)]
    junit = run_through_proxy(
        pytester,
        served("generation").url,
        rules,
        "-m",
        "agent_loops",
        "-k",
        "unknown_call_output",
        profile=GENERATION_PROFILE,
    )
    assert_verdicts(junit, {ORPHAN: "passed"})
