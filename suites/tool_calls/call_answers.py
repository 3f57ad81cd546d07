"""Tool-call answers: served in OpenAI's chat shape, and what a parsed call must look like.

The functions take one enum argument each, so a random-weight model meets
their schema only when the server constrains the arguments (``strict``).
Requests are greedy with room to finish, but a model may pad the arguments
with the whitespace JSON allows until ``max_tokens`` (no vLLM flag forbids it
there: fact ``json_whitespace_control``). Such a call is judged by what was
generated (``protocol/cut_calls.py``, which the agent loops judge by too):
the raw text of a whole answer against the parser's envelope (fact
``tool_call_envelopes``), a streamed call's arguments against its
function's parameters (``json_prefix``).

Every answer is also judged against our wire schemas of OpenAI's chat
answers, whose tool-call items are typed: a client parses them; a streamed
call's first fragment must carry what the unstreamed call does (its id,
``type: function`` and name), which the chunk schema cannot require of
every fragment.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.protocol import sse as stream
from pytest_vllm_conformance.protocol.answer_reader import Answer, ToolCall, read_answer
from pytest_vllm_conformance.protocol.cut_calls import argument_problem, skip_if_cut
from pytest_vllm_conformance.protocol.schemas import Deviation, Finding, json_type, judge
from pytest_vllm_conformance.protocol.tools import CHAT, tool_request

MISSING = object()
CUT_MAX_TOKENS = 4


def without_strict(tool: dict[str, Any]) -> dict[str, Any]:
    loose = copy.deepcopy(tool)
    del loose["function"]["strict"]
    return loose


def shape_problems(response: Response, *, streamed: bool, deviations: Sequence[Deviation]) -> list[str]:
    """Where a chat answer (each event of a streamed one) leaves OpenAI's shape, vLLM's known deviations aside."""
    if streamed:
        answer = "chat_chunk"
        events = list(stream.parse(response.body).chunks())
        bodies = [(f"event {event.number} ", event.payload) for event in events]
        firsts = first_fragment_findings(events)
    else:
        answer, bodies, firsts = "chat_completion", [("", response.json_or_none())], []
    found = [f"{label}{finding}" for label, body in bodies for finding in judge(answer, body, deviations).failures]
    found += [f"event {number} {finding}" for number, finding in firsts if not _covered(finding, deviations)]
    return list(dict.fromkeys(found))


def _covered(finding: Finding, deviations: Sequence[Deviation]) -> bool:
    return any(deviation.covers("chat_chunk", finding) for deviation in deviations)


FIRST_FRAGMENT = "the field (required by OpenAI of a call, so of its first fragment)"


def first_fragment_findings(events: Sequence[stream.Event]) -> list[tuple[int, Finding]]:
    """(event number, finding) for each call whose first fragment lacks what the unstreamed call must carry.

    The chunk schema can require only ``index`` of a fragment: the later ones carry arguments alone. But a call's
    ``id``, ``type: function`` and name come once, on its first fragment (vllm/parser/engine/parser_engine.py,
    _emit_name_delta and _handle_tool_end, at v0.28.0-v0.32.0), and a client assembling the call has them
    nowhere else: that fragment is judged as the unstreamed call is (chat_completion.json's tool call item).
    """
    found: list[tuple[int, Finding]] = []
    seen: set[tuple[Any, Any]] = set()
    for event in events:
        for at, choice in enumerate(event.choices()):
            delta = choice.get("delta")
            fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
            for position, fragment in enumerate(fragments if isinstance(fragments, list) else []):
                if not isinstance(fragment, dict):
                    continue
                # A fragment without its index (the schema's finding) is taken as the call at its position.
                call = (choice.get("index"), fragment.get("index", position))
                if call in seen:
                    continue
                seen.add(call)
                parts: tuple[str | int, ...] = ("choices", at, "delta", "tool_calls", position)
                found += [(event.number, finding) for finding in _first_fragment_problems(fragment, parts)]
    return found


def _first_fragment_problems(fragment: Mapping[str, Any], parts: tuple[str | int, ...]) -> list[Finding]:
    function = fragment.get("function")
    function = function if isinstance(function, dict) else {}
    wanted: list[tuple[tuple[str | int, ...], Any, str, bool]] = [
        (("id",), fragment.get("id", MISSING), "string", isinstance(fragment.get("id"), str)),
        (("type",), fragment.get("type", MISSING), 'the constant "function"', fragment.get("type") == "function"),
        (("function", "name"), function.get("name", MISSING), "string", isinstance(function.get("name"), str)),
    ]
    return [
        Finding((*parts, *where), "missing", FIRST_FRAGMENT, "no such field")
        if value is MISSING
        else Finding((*parts, *where), json_type(value), expected, json.dumps(value)[:60])
        for where, value, expected, holds in wanted
        if not holds
    ]


def served_call(
    client: BoundedClient,
    model: str,
    deviations: Sequence[Deviation],
    tool_choice: Any,
    *,
    stream: bool = False,
    **extra: Any,
) -> Answer:
    """The answer to ``tool_request(tool_choice, ...)``, asserted served and in OpenAI's chat shape."""
    response = client.post(CHAT, tool_request(model, tool_choice, stream=stream, **extra))
    assert response.status == 200, (
        f"tool_choice {tool_choice!r} was not served: {response.describe()} {response.text[:300]!r}"
    )
    answer = read_answer(response, streamed=stream)  # first: a body cut at the byte cap is unreadable, not misshapen
    problems = shape_problems(response, streamed=stream, deviations=deviations)
    assert not problems, (
        f"tool_choice {tool_choice!r}: not OpenAI's chat {'chunk' if stream else 'completion'} shape "
        f"({response.describe()}):\n  " + "\n  ".join(problems)
    )
    return answer


def assert_one_valid_call(
    answer: Answer, what: str, finish_reason: str, names: Sequence[str], cut_call, padding: str
) -> ToolCall:
    skip_if_cut(answer, what, names, cut_call, padding)
    assert len(answer.tool_calls) == 1, f"{what}: expected one parsed tool call, got {answer.describe()}"
    (call,) = answer.tool_calls
    assert call.name in names, f"{what}: the call names {call.name!r}, not one of {names}"
    assert answer.finish_reason == finish_reason, (
        f"{what}: finish_reason {answer.finish_reason!r}, the version documents {finish_reason!r}: {answer.describe()}"
    )
    problem = argument_problem(call)
    assert problem is None, f"{what}: the strict function's arguments were not constrained: {problem}"
    return call
