"""Reading generation answers (whole and streamed) and judging them against a constraint, without a server."""

import json

import httpx

from pytest_vllm_conformance.features.generation.answers import ToolCall, read_answer
from pytest_vllm_conformance.features.generation.structured import CONSTRAINTS
from pytest_vllm_conformance.features.generation.tool_calls import argument_problem
from pytest_vllm_conformance.target.client import Response


def response(body: str) -> Response:
    return Response("POST", "/v1/chat/completions", 200, httpx.Headers(), body.encode(), len(body), False, 0.01)


def sse(*events) -> str:
    return "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"


def chunk(delta, finish_reason=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def test_streamed_tool_call_fragments_reassemble_by_index():
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "get_time"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"zone": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"utc"}'}}]}),
        chunk({}, "tool_calls"),
    )
    answer = read_answer(response(body), streamed=True)
    assert answer.tool_calls == [ToolCall("get_time", '{"zone": "utc"}')]
    assert answer.finish_reasons == ["tool_calls"]


def test_a_stream_that_finishes_twice_keeps_both_reasons():
    body = sse(chunk({"content": "ab"}), chunk({"content": "a"}, "stop"), chunk({}, "stop"))
    answer = read_answer(response(body), streamed=True)
    assert (answer.text, answer.finish_reasons) == ("aba", ["stop", "stop"])


def test_a_whole_completion_reads_its_text_and_calls():
    body = {"choices": [{"index": 0, "text": "quokka", "finish_reason": "stop"}]}
    assert read_answer(response(json.dumps(body)), streamed=False).text == "quokka"
    chat = {"choices": [{"message": {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": "1"}}]}}]}
    assert read_answer(response(json.dumps(chat)), streamed=False).tool_calls == [ToolCall("f", "1")]


def test_constraints_judge_answers_and_tell_a_cut_answer_from_an_ignored_one():
    schema = CONSTRAINTS[("response_format", "json_schema")]
    assert schema.violation('{"answer": "alpha", "confirmed": true}') is None
    assert "breaks the schema at answer" in schema.violation('{"answer": "gamma", "confirmed": true}')
    assert schema.could_continue('{"answer": "al') and not schema.could_continue("random words")
    choice = CONSTRAINTS[("structured_outputs", "choice")]
    assert choice.violation("quokka") is None and choice.could_continue("zebra cro")
    assert CONSTRAINTS[("structured_outputs", "regex")].violation("aab-12") is None
    assert CONSTRAINTS[("structured_outputs", "regex")].violation("aab-123") is not None


def test_tool_arguments_are_judged_against_the_named_function():
    assert argument_problem(ToolCall("get_time", '{"zone": "cet"}')) is None
    assert "are not JSON" in argument_problem(ToolCall("get_time", "{not json"))
    assert "breaks the schema" in argument_problem(ToolCall("get_time", "85359113786238663"))
    assert "not a declared function" in argument_problem(ToolCall("get_date", "{}"))
