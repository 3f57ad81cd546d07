"""A streamed Responses answer against its own final answer, as an agent reads both.

Codex and the Agents SDK build their turn from the stream: they keep each
``response.output_item.done`` item, key function calls by ``call_id``, take a
call's arguments from ``response.function_call_arguments.done`` and later look
items up in the terminal event's response by id. When the streamed items and
the final ones differ (ids renamed, arguments unfinished), the agent echoes ids
the server never gave (vllm issue 56285). Every judgement here reads one
stream: the events against the response its terminal event carries.
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.protocol import generation_routes, tools
from pytest_vllm_conformance.protocol.sse import TERMINAL, Stream
from pytest_vllm_conformance.protocol.tools import responses_tool

# The fields of an item an agent reads (absent on a type are compared as absent on both).
ITEM_FIELDS = ("id", "type", "status", "call_id", "name", "arguments", "input", "content")
RESPONSES = generation_routes.RESPONSES.path
MAX_OUTPUT_TOKENS = 16
# Room for the hermes envelope and the function's name: the streamed call item opens once the name is parsed.
CALL_MAX_OUTPUT_TOKENS = 64
WEATHER = responses_tool(tools.WEATHER)
# A custom tool as Codex declares apply_patch: its input is free text, not JSON arguments.
SHELL: dict[str, Any] = {"type": "custom", "name": "run_shell", "description": "Runs one shell command."}
# The same tool with its input constrained by a grammar (Lark, OpenAI's syntax for custom tools).
SHELL_BY_GRAMMAR: dict[str, Any] = {
    **SHELL,
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "ls" | "pwd"'},
}
# A call's two streamed forms: its text field on the item, and the event family that streams it.
CALL_STREAMS = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}
# The item types of a call: each is answered with an item of its type and "_output".
CALL_TYPES = tuple(CALL_STREAMS)


def text_request(model: str) -> dict[str, Any]:
    return {"model": model, "input": "Say hello.", "max_output_tokens": MAX_OUTPUT_TOKENS, "temperature": 0}


def call_request(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "input": "What is the weather?",
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": CALL_MAX_OUTPUT_TOKENS,
        "temperature": 0,
    }


def custom_call_request(model: str, tool: dict[str, Any] = SHELL) -> dict[str, Any]:
    """A forced custom tool, beside a function tool (as agents declare both)."""
    return {
        **call_request(model),
        "input": "List the files.",
        "tools": [WEATHER, tool],
        "tool_choice": {"type": "custom", "name": tool["name"]},
    }


def _events(stream: Stream) -> list[dict[str, Any]]:
    return [event.payload for event in stream.events if isinstance(event.payload, dict)]


def _terminal_response(stream: Stream) -> dict[str, Any] | None:
    """The response the terminal event carries, or None without one."""
    terminal = [event for event in _events(stream) if event.get("type") in TERMINAL]
    response = terminal[-1].get("response") if terminal else None
    return response if isinstance(response, dict) else None


def final_output(stream: Stream) -> list[Any] | None:
    """The output of the response the terminal event carries, or None without one."""
    output = (_terminal_response(stream) or {}).get("output")
    return output if isinstance(output, list) else None


def cut_at_max_output_tokens(response: dict[str, Any]) -> bool:
    """A Responses answer stopped at max_output_tokens: a call it lacks may just not be written yet."""
    details = response.get("incomplete_details") or {}
    return response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens"


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [event for event in events if event.get("type") == kind]


def _sequence_problems(events: list[dict[str, Any]]) -> list[str]:
    numbers = [event.get("sequence_number") for event in events]
    for before, after in zip(numbers, numbers[1:], strict=False):
        if not isinstance(after, int) or not isinstance(before, int) or after <= before:
            return [f"sequence_number {after!r} follows {before!r}: not strictly increasing"]
    return []


def _item_problems(events: list[dict[str, Any]], output: list[Any], prefixes: dict[str, str]) -> list[str]:
    problems = []
    done = {event.get("output_index"): event.get("item") for event in _of(events, "response.output_item.done")}
    added = {event.get("output_index"): event.get("item") for event in _of(events, "response.output_item.added")}
    for index, final in enumerate(output):
        streamed = done.get(index)
        if not isinstance(streamed, dict) or not isinstance(final, dict):
            problems.append(f"output[{index}] ({_label(final)}) has no response.output_item.done in the stream")
            continue
        for field in ITEM_FIELDS:
            if streamed.get(field) != final.get(field):
                problems.append(
                    f"output[{index}].{field}: streamed {_short(streamed.get(field))}, final {_short(final.get(field))}"
                )
        opened = added.get(index)
        if isinstance(opened, dict) and opened.get("id") != final.get("id"):
            problems.append(
                f"output[{index}].id: response.output_item.added streamed {opened.get('id')!r}, "
                f"final {final.get('id')!r}"
            )
        prefix = prefixes.get(str(final.get("type")))
        if prefix and not str(final.get("id", "")).startswith(prefix):
            problems.append(f"output[{index}].id {final.get('id')!r}: a {final.get('type')} id starts {prefix!r}")
    extra = sorted(set(done) - set(range(len(output))), key=str)
    if extra:
        problems.append(f"response.output_item.done at output_index {extra}: no such item in the final output")
    return problems


def _appended(events: list[dict[str, Any]], kind: str, item_id: Any, **where: Any) -> str:
    pieces = [
        event.get("delta")
        for event in _of(events, kind)
        if event.get("item_id") == item_id and all(event.get(k) == v for k, v in where.items())
    ]
    return "".join(piece for piece in pieces if isinstance(piece, str))


def _text_problems(events: list[dict[str, Any]], output: list[Any]) -> list[str]:
    problems = []
    for index, item in enumerate(output):
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part_index, part in enumerate(item.get("content") or []):
            if not isinstance(part, dict) or part.get("type") != "output_text":
                continue
            joined = _appended(events, "response.output_text.delta", item.get("id"), content_index=part_index)
            if joined != part.get("text"):
                problems.append(
                    f"output[{index}].content[{part_index}].text {_short(part.get('text'))}: the deltas under item "
                    f"{item.get('id')!r} append to {_short(joined)}"
                )
    return problems


def _call_problems(events: list[dict[str, Any]], output: list[Any]) -> list[str]:
    problems = []
    for index, item in enumerate(output):
        if not isinstance(item, dict) or item.get("type") not in CALL_STREAMS:
            continue
        field, family = CALL_STREAMS[item["type"]]
        label = f"output[{index}] ({item['type']} {item.get('id')!r})"
        ends = [e for e in _of(events, f"{family}.done") if e.get("item_id") == item.get("id")]
        if len(ends) != 1:
            problems.append(f"{label}: {len(ends)} {family}.done events, expected 1")
        elif ends[0].get(field) != item.get(field):
            problems.append(
                f"output[{index}].{field} {_short(item.get(field))}: {family}.done says {_short(ends[0].get(field))}"
            )
        joined = _appended(events, f"{family}.delta", item.get("id"))
        if joined != item.get(field):
            problems.append(f"output[{index}].{field} {_short(item.get(field))}: the deltas append to {_short(joined)}")
    return problems


def stream_problems(stream: Stream, prefixes: dict[str, str]) -> list[str]:
    """Where a Responses stream is not its own final answer (the framing itself is the wire suite's)."""
    events = _events(stream)
    output = final_output(stream)
    if output is None:
        return ["no terminal event carries a response with an output list: nothing to compare the stream with"]
    return [
        *_sequence_problems(events),
        *_item_problems(events, output, prefixes),
        *_text_problems(events, output),
        *_call_problems(events, output),
    ]


def stream_cut(stream: Stream) -> bool:
    """The stream's terminal response stopped at max_output_tokens."""
    response = _terminal_response(stream)
    return response is not None and cut_at_max_output_tokens(response)


def message_text(output: list[Any]) -> str:
    """The text of an answer's message items (their output_text parts), as a client shows it."""
    return "".join(
        str(part.get("text") or "")
        for item in output
        if isinstance(item, dict) and item.get("type") == "message"
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    )


def items_of(stream: Stream, kind: str) -> list[dict[str, Any]]:
    return [item for item in final_output(stream) or [] if isinstance(item, dict) and item.get("type") == kind]


def _label(item: Any) -> str:
    return f"{item.get('type')} {item.get('id')!r}" if isinstance(item, dict) else repr(item)[:40]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
