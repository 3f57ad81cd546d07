"""Reading generation answers (whole and streamed) and judging them against a constraint, without a server."""

import json

import httpx
import pytest

from pytest_vllm_conformance.features.generation.answers import ToolCall, Unreadable, read_answer
from pytest_vllm_conformance.features.generation.defaults import completions_max_tokens
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


@pytest.mark.parametrize(
    ("body", "streamed", "says"),
    [
        (sse(), True, "no streamed event carries choice 0"),
        (sse({"choices": [], "usage": {"completion_tokens": 1}}), True, "no streamed event carries choice 0"),
        (json.dumps({"choices": []}), False, "the answer carries no choice"),
        ("{}", False, "the answer carries no choice"),
    ],
)
def test_an_answer_without_choice_0_is_unreadable_not_empty(body, streamed, says):
    with pytest.raises(Unreadable, match=says):
        read_answer(response(body), streamed=streamed)


@pytest.mark.parametrize("streamed", [True, False])
def test_a_truncated_body_is_never_read_as_if_whole(streamed):
    whole = sse(chunk({"content": "ab"}, "stop")) if streamed else json.dumps({"choices": [{"text": "ab"}]})
    cut = Response("POST", "/v1/completions", 200, httpx.Headers(), whole.encode(), 2 * len(whole), True, 0.01)
    with pytest.raises(Unreadable, match="truncated at .* bytes .*: the body passed the byte cap"):
        read_answer(cut, streamed=streamed)


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


class _StreamingCompletions:
    """Streams a bare completion of ``tokens`` one-token chunks (then usage), as vLLM does with include_usage, and
    honours ``enough`` as the bounded client does; records how many chunks it was made to send."""

    def __init__(self, tokens):
        self.tokens, self.sent = tokens, 0

    def post(self, path, body, enough=None):
        assert body["stream"] and body["ignore_eos"] and "max_tokens" not in body
        events = [
            {"choices": [{"index": 0, "text": "x", "finish_reason": "length" if i == self.tokens - 1 else None}]}
            for i in range(self.tokens)
        ]
        events.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": self.tokens}})
        sent = ""
        for event in events:
            sent += f"data: {json.dumps(event)}\n\n"
            self.sent += 1
            if enough is not None and enough(sent.encode()):
                return Response("POST", path, 200, httpx.Headers(), sent.encode(), len(sent), True, 0.01)
        sent += "data: [DONE]\n\n"
        return Response("POST", path, 200, httpx.Headers(), sent.encode(), len(sent), False, 0.01)


@pytest.mark.parametrize(("default", "observed", "sent"), [(16, 16, 17), (5, 5, 6), (4096, "more than 16", 16)])
def test_the_bare_completion_reads_16_tokens_at_most(default, observed, sent):
    server = _StreamingCompletions(default)
    assert completions_max_tokens(server, "m") == observed
    assert server.sent == sent  # a longer default is hung up on after 16 tokens
