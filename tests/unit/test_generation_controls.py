"""Reading generation answers (whole and streamed) and judging them against a constraint, without a server."""

import json

import httpx
import pytest

from pytest_vllm_conformance.features.generation.answers import ToolCall, read_answer
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
