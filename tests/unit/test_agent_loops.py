"""The agent_loops judges on streams shaped as vLLM 0.32 sends them, and on the fault proxy's edits of them."""

import json
from pathlib import Path

import pytest

from fixtures.fault_proxy.answer_rules import ErrorsInOpenAIEnvelope
from fixtures.fault_proxy.rules import JsonResponseDraft
from fixtures.fault_proxy.stream_rules import EDITS, join_events, split_events
from pytest_vllm_conformance.protocol import sse
from suites.agent_loops import messages, responses
from suites.agent_loops import responses_shapes as shapes
from suites.agent_loops.forced_calls import call_text_problem, judge_uncalled

PREFIXES = {"message": "msg_", "function_call": "fc_"}
CALL = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "chatcmpl-tool-1", "name": "f"}


def _stream(events, edit=None):
    payloads = [json.dumps(event) for event in events]
    body = join_events(EDITS[edit](split_events(join_events(payloads, named=True))) if edit else payloads, named=True)
    return sse.parse(body, named_events=True)


def _responses_events():
    text = {"id": "msg_1", "type": "message", "status": "completed", "content": [{"type": "output_text", "text": "hi"}]}
    call = {**CALL, "arguments": '{"a": 1}'}
    events = [
        {"type": "response.created", "response": {"output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**text, "content": []}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "h"},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "i"},
        {"type": "response.output_item.done", "output_index": 0, "item": text},
        {"type": "response.output_item.added", "output_index": 1, "item": {**call, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": '{"a": 1}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 1,
            "arguments": '{"a": 1}',
        },
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": {"status": "completed", "output": [text, call]}},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def test_a_stream_that_is_its_final_answer_has_no_problem():
    assert responses.stream_problems(_stream(_responses_events()), PREFIXES) == []


def test_renamed_streamed_ids_and_a_dropped_arguments_done_are_named():
    renamed = responses.stream_problems(_stream(_responses_events(), "rename_streamed_item_ids"), PREFIXES)
    assert any(problem.startswith("output[0].id: streamed '") for problem in renamed), renamed
    assert any("the deltas under item 'msg_1' append to ''" in problem for problem in renamed), renamed
    dropped = responses.stream_problems(_stream(_responses_events(), "drop_function_call_arguments_done"), PREFIXES)
    assert dropped == ["output[1] (function_call 'fc_1'): 0 response.function_call_arguments.done events, expected 1"]


def _custom_call_events():
    call = {"id": "ctc_1", "type": "custom_tool_call", "call_id": "call_1", "name": "run_shell", "input": "ls"}
    events = [
        {"type": "response.created", "response": {"output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**call, "input": ""}},
        {"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0, "delta": "l"},
        {"type": "response.custom_tool_call_input.delta", "item_id": "ctc_1", "output_index": 0, "delta": "s"},
        {"type": "response.custom_tool_call_input.done", "item_id": "ctc_1", "output_index": 0, "input": "ls"},
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        {"type": "response.completed", "response": {"status": "completed", "output": [call]}},
    ]
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


def test_a_custom_tool_call_is_judged_by_its_input_events():
    prefixes = {**PREFIXES, "custom_tool_call": "ctc_"}
    assert responses.stream_problems(_stream(_custom_call_events()), prefixes) == []
    dropped = responses.stream_problems(_stream(_custom_call_events(), "drop_custom_tool_call_input_done"), prefixes)
    assert dropped == [
        "output[0] (custom_tool_call 'ctc_1'): 0 response.custom_tool_call_input.done events, expected 1"
    ]
    events = _custom_call_events()
    events[3]["delta"] = "x"
    assert responses.stream_problems(_stream(events), prefixes) == ["output[0].input 'ls': the deltas append to 'lx'"]


def test_a_custom_tool_streamed_by_vllm_0_32_is_its_final_answer():
    # Recorded behind hermes: the tiny model's input is cut at 64 tokens, the item and its events still agree.
    body = (Path(__file__).parents[1] / "data/wire_samples/agent_loops/responses_custom_call_stream.sse").read_bytes()
    stream = sse.parse(body, named_events=True)
    assert responses.stream_problems(stream, {**PREFIXES, "custom_tool_call": "ctc_"}) == []
    assert [item["type"] for item in responses.items_of(stream, "custom_tool_call")] == ["custom_tool_call"]
    assert responses.stream_cut(stream)


def _messages_events():
    start = {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 3}}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]


def test_an_anthropic_stream_reassembles_and_loses_its_stop_reason_to_the_fault():
    stream = _stream(_messages_events())
    assert messages.event_problems(stream) == []
    whole = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "max_tokens", "usage": {"input_tokens": 3}}
    assert messages.reassembled(stream) == messages.unstreamed(
        {**whole, "usage": {"input_tokens": 3, "output_tokens": 2}}
    )
    broken = messages.event_problems(_stream(_messages_events(), "drop_message_delta_stop_reason"))
    assert broken == [f"message_delta $.delta.stop_reason: None, not one of Anthropic's {messages.STOP_REASONS}"]


def test_a_block_out_of_order_is_named():
    events = _messages_events()
    events[1]["index"] = 1
    assert "content_block_start of block 1 (block 0 was due)" in " ".join(messages.event_problems(_stream(events)))


def test_the_envelope_fault_turns_anthropic_errors_into_openai_ones():
    draft = JsonResponseDraft(404, {"type": "error", "error": {"type": "NotFoundError", "message": "no model"}})
    assert ErrorsInOpenAIEnvelope().apply_to_response(draft)
    assert messages.schema_problems(messages.ENVELOPES["openai"], draft.payload) == []
    assert messages.schema_problems(messages.ENVELOPES["anthropic"], draft.payload)


# ---- a forced tool_choice answered with no call ------------------------------------------------------------

HERMES = [
    {"begin": '<tool_call>\n{"name": "{name}", "arguments": ', "end": "}\n</tool_call>"},
    {"begin": '<tool_call>{"name": "{name}", "arguments": ', "end": "}</tool_call>"},
]


def test_a_forced_choice_cut_inside_a_call_is_undecided_in_each_form_vllm_writes_it():
    weather = ["get_weather"]
    assert call_text_problem("", weather, HERMES) is None  # cut with nothing shown
    assert call_text_problem('{"unit": "cel', weather, HERMES) is None  # the named function's bare arguments
    assert call_text_problem('{"unit":          ', weather, HERMES) is None  # padded
    assert call_text_problem('[{"name": "get_weather", "parameters": {', weather, HERMES) is None  # required
    assert call_text_problem('<tool_call>{"name": "get_weather", "arguments": {"un', weather, HERMES) is None
    assert call_text_problem("<tool_c", weather, HERMES) is None


def test_a_forced_choice_answered_in_words_or_with_another_call_is_no_call():
    weather = ["get_weather"]
    assert "is no call of ['get_weather']" in str(call_text_problem(" flunshoockreerkstou pems", weather, HERMES))
    assert call_text_problem('{"zone": "utc"', weather, HERMES) is not None  # another function's arguments
    assert call_text_problem('[{"name": "get_time", "parameters": {', weather, HERMES) is not None
    assert call_text_problem('{"unit": "celsius"} and more words', weather, HERMES) is not None
    assert call_text_problem('<tool_call>{"name": "get_weather", "arguments": {"unit": 3', weather, None) is not None


def test_a_forced_choice_with_no_call_fails_unless_cut_inside_one():
    why = judge_uncalled('{"unit": ', True, ["get_weather"], HERMES, "the forced call", ["message"])
    assert why.startswith("the forced call: cut at max_output_tokens before a whole call of ['get_weather']"), why
    assert "with no text" in judge_uncalled("", True, ["get_weather"], HERMES, "the forced call", [])
    with pytest.raises(AssertionError, match=r"only \['message'\]: its text ' hello' is no call"):
        judge_uncalled(" hello", True, ["get_weather"], HERMES, "the forced call", ["message"])
    with pytest.raises(AssertionError, match="and it was not cut at max_output_tokens"):
        judge_uncalled('{"unit": ', False, ["get_weather"], HERMES, "the forced call", ["message"])


# ---- each output item's status against the response's, as vLLM 0.32 and OpenAI send them ----

REASONING_ITEM = {"id": "rs_1", "type": "reasoning", "summary": [], "content": [], "status": None}
MESSAGE_ITEM = {"id": "msg_1", "type": "message", "status": "completed", "content": []}


def _answer(status, *items):
    return {"status": status, "output": [dict(item) for item in items]}


def test_a_reasoning_item_without_status_contradicts_nothing():
    # vLLM 0.32's unstreamed reasoning item: status None (OpenAI's API makes it optional), whole or cut.
    assert shapes.status_problems(_answer("completed", REASONING_ITEM, MESSAGE_ITEM), "completed") == []
    assert shapes.status_problems(_answer("incomplete", REASONING_ITEM, MESSAGE_ITEM), "completed") == []
    assert shapes.status_problems(_answer("incomplete", REASONING_ITEM), "completed") == []
    assert shapes.with_status(_answer("incomplete", REASONING_ITEM, MESSAGE_ITEM)) == 1
    # A message must say its status (OpenAI's OutputMessage requires it).
    bare = {**MESSAGE_ITEM, "status": None}
    assert shapes.status_problems(_answer("completed", bare), "completed") == [
        "output[0] (message) has status None in a response of status 'completed', expected 'completed'"
    ]


def test_a_cut_item_may_say_incomplete_as_openai_does_or_what_the_release_reports():
    cut = {**MESSAGE_ITEM, "status": "incomplete"}
    assert shapes.status_problems(_answer("incomplete", REASONING_ITEM, cut), "completed") == []
    assert shapes.status_problems(_answer("incomplete", REASONING_ITEM, MESSAGE_ITEM), "completed") == []
    assert shapes.cut_item_status(_answer("incomplete", REASONING_ITEM, cut)) == "incomplete"
    # Only the last item was cut; one before it, and any item of a completed response, is completed.
    assert shapes.status_problems(_answer("incomplete", cut, MESSAGE_ITEM), "completed") == [
        "output[0] (message) has status 'incomplete' in a response of status 'incomplete', expected 'completed'"
    ]
    assert shapes.status_problems(_answer("completed", cut), "completed") == [
        "output[0] (message) has status 'incomplete' in a response of status 'completed', expected 'completed'"
    ]
    marked = {**REASONING_ITEM, "status": "incomplete"}  # a relay marking every item of a whole answer incomplete
    assert shapes.status_problems(_answer("completed", marked, cut), "completed") == [
        "output[0] (reasoning) has status 'incomplete' in a response of status 'completed', expected 'completed'",
        "output[1] (message) has status 'incomplete' in a response of status 'completed', expected 'completed'",
    ]
    unfinished = {**MESSAGE_ITEM, "status": "in_progress"}
    assert shapes.status_problems(_answer("incomplete", unfinished), "completed") == [
        "output[0] (message) has status 'in_progress' in a response of status 'incomplete', "
        "expected 'completed' or 'incomplete'"
    ]


def test_a_history_answered_by_reasoning_alone_is_an_answer_only_when_cut():
    reasoning, message = {"type": "reasoning"}, {"type": "message"}
    assert shapes.answer_problem([reasoning, message], cut=False) is None
    assert shapes.answer_problem([reasoning], cut=True) is None  # the model still thinking at max_output_tokens
    assert shapes.answer_problem([reasoning], cut=False) == (
        "the history request was answered with no message item (not cut): only ['reasoning']"
    )
    assert shapes.answer_problem([], cut=True) == (
        "the history request was answered with no message item (cut at max_output_tokens): only []"
    )
    assert shapes.answer_problem([reasoning, {"type": "function_call"}], cut=True) is not None
