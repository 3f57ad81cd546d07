"""The reasoning suite's judgements on answers built by hand, and the stream edit that leaks reasoning."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from fixtures.fault_proxy.stream_rules import EDITS, split_events
from pytest_vllm_conformance.connection.client import Response
from suites.reasoning.answers import (
    ReasonedAnswer,
    field_problems,
    markers_in_reasoning,
    reassembly_problems,
)
from suites.reasoning.responses_and_messages import ROUTES, RouteCase, route_problems

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "wire_samples" / "chat_reasoning_stream.sse"
NAMES = ("reasoning", "reasoning_content")
MARKERS = ("<think>", "</think>")


def answer(reasoning: str = "", content: str = "", *, former: str = "", streamed: bool = False) -> ReasonedAnswer:
    return ReasonedAnswer(streamed, {"reasoning": reasoning, "reasoning_content": former}, content, ["stop"])


def test_reasoning_in_its_field_alone_holds():
    assert field_problems(answer("Two rivers.", " Two."), "reasoning", MARKERS) == []


def test_reasoning_under_the_former_name_or_inside_content_is_named():
    assert field_problems(answer(former="Two rivers."), "reasoning", MARKERS) == [
        "the reasoning came back under 'reasoning_content', a former name; the version documents 'reasoning'",
        "no reasoning in 'reasoning'",
    ]
    leaked = answer(content="<think>Two rivers.</think> Two.", streamed=True)
    assert field_problems(leaked, "reasoning", MARKERS, reference=answer("Two rivers.", " Two.")) == [
        "the reasoning came back inside content ('Two rivers.')",
        "content holds the think marker '<think>'",
        "content holds the think marker '</think>'",
        "no reasoning in 'reasoning'",
    ]


def test_a_stream_reassembles_or_says_which_part_differs():
    whole = answer("Two rivers.", " Two.")
    assert reassembly_problems(answer("Two rivers.", " Two.", streamed=True), whole, "reasoning") == []
    assert reassembly_problems(answer("", "Two rivers. Two.", streamed=True), whole, "reasoning") == [
        "the streamed reasoning deltas reassemble to '', the same request unstreamed says 'Two rivers.'",
        "the streamed content deltas reassemble to 'Two rivers. Two.', the same request unstreamed says ' Two.'",
    ]
    assert reassembly_problems(whole, answer(content=" Two."), "reasoning")[0].startswith("nothing to compare")


def test_a_start_marker_a_loaded_server_streams_into_the_reasoning_is_named_and_not_compared():
    """vLLM passes a delta holding <think> and more tokens (no </think>) to reasoning whole (basic_parsers.py)."""
    whole = answer("Two rivers.", " Two.")
    coalesced = answer("<think>Two rivers.", " Two.", streamed=True)
    assert markers_in_reasoning(coalesced, "reasoning", MARKERS) == ["<think>"]
    assert markers_in_reasoning(whole, "reasoning", MARKERS) == []
    assert reassembly_problems(coalesced, whole, "reasoning", MARKERS) == []
    assert reassembly_problems(answer("<think>Two.", " Two.", streamed=True), whole, "reasoning", MARKERS) == [
        "the streamed reasoning deltas reassemble to 'Two.', the same request unstreamed says 'Two rivers.'"
    ]


def test_the_leak_edit_moves_every_reasoning_delta_into_content():
    payloads = split_events(SAMPLE.read_bytes())
    deltas = [json.loads(p)["choices"][0]["delta"] for p in EDITS["reasoning_into_content"](payloads) if p != "[DONE]"]
    original = [json.loads(p)["choices"][0]["delta"] for p in payloads if p != "[DONE]"]
    assert not any("reasoning" in delta for delta in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == "".join(
        (d.get("reasoning") or "") + (d.get("content") or "") for d in original
    )
    assert any(d.get("reasoning") for d in original)


class _MessagesRoute:
    """Answers POST /v1/messages with one thinking block and one text block, as vLLM does."""

    def __init__(self, thinking: str) -> None:
        self.thinking = thinking

    def post(self, path, body):
        payload = {"content": [{"type": "thinking", "thinking": self.thinking}, {"type": "text", "text": " Two."}]}
        text = json.dumps(payload).encode()
        return Response("POST", path, 200, httpx.Headers(), text, len(text), False, 0.0)


def test_a_routes_reasoning_must_equal_the_chat_answers_markers_and_whitespace_aside():
    name, path, read, what = ROUTES[1]
    case = RouteCase(name, path, False, read, what)
    shape = {"block": "thinking", "delta": "thinking_delta"}
    chat = "<think>Two rivers. "
    assert route_problems(_MessagesRoute(" Two rivers."), "m", case, shape, MARKERS, chat) == []
    assert route_problems(_MessagesRoute("One river."), "m", case, shape, MARKERS, chat) == [
        "a thinking block holds 'One river.', the chat answer's reasoning to the same greedy question is 'Two rivers.'"
    ]
