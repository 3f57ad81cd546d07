"""The Anthropic Messages API (/v1/messages) as Claude Code and the Anthropic SDK read it.

The shapes follow Anthropic's published API reference (the Message object,
the streaming events, the error envelope), held as JSON Schemas here and
validated with jsonschema: the plugin takes no Anthropic SDK (README,
"Dependencies"). Only what a client reads is required: an answer without
``stop_sequence`` (vLLM leaves out a null one) is read by the SDK as null.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from pytest_vllm_conformance.protocol import generation_routes
from pytest_vllm_conformance.protocol.generation_routes import STOP_REASONS
from pytest_vllm_conformance.protocol.sse import Stream

MESSAGES = generation_routes.MESSAGES.path
COUNT_TOKENS = "/v1/messages/count_tokens"
MAX_TOKENS = 16
PROMPT = [{"role": "user", "content": "Say hello."}]

_USAGE = {
    "type": "object",
    "required": ["input_tokens", "output_tokens"],
    "properties": {
        "input_tokens": {"type": "integer", "minimum": 0},
        "output_tokens": {"type": "integer", "minimum": 0},
    },
}
_BLOCK = {
    "type": "object",
    "required": ["type"],
    "oneOf": [
        {"properties": {"type": {"const": "text"}, "text": {"type": "string"}}, "required": ["text"]},
        {
            "properties": {
                "type": {"const": "tool_use"},
                "id": {"type": "string"},
                "name": {"type": "string"},
                "input": {"type": "object"},
            },
            "required": ["id", "name", "input"],
        },
        {"properties": {"type": {"const": "thinking"}, "thinking": {"type": "string"}}, "required": ["thinking"]},
    ],
}
MESSAGE_SCHEMA = {
    "type": "object",
    "required": ["id", "type", "role", "content", "model", "stop_reason", "usage"],
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "content": {"type": "array", "items": _BLOCK},
        "model": {"type": "string"},
        "stop_reason": {"enum": STOP_REASONS},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": _USAGE,
    },
}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
# OpenAI's ErrorResponse, as vLLM sends it where the Messages route does not translate the error.
OPENAI_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type"]}},
    "not": {"required": ["type"]},
}
ENVELOPES = {"anthropic": ERROR_SCHEMA, "openai": OPENAI_ERROR_SCHEMA}


def schema_problems(schema: dict[str, Any], body: Any, where: str = "$") -> list[str]:
    found = []
    for error in Draft202012Validator(schema).iter_errors(body):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        found.append(f"{where}{path}: {error.message[:160]}")
    return found


def request(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": MAX_TOKENS, "messages": PROMPT, "temperature": 0, **extra}


# What each refused request is, by the name the fact messages_error_envelopes gives it.
def refused_requests(model: str) -> dict[str, dict[str, Any]]:
    return {
        "unknown_model": request("no-such-model-of-the-conformance-suite"),
        "missing_max_tokens": {"model": model, "messages": PROMPT},
    }


def text_of(message: dict[str, Any]) -> str:
    return "".join(
        b.get("text", "") for b in message.get("content") or [] if isinstance(b, dict) and b.get("type") == "text"
    )


def _payloads(stream: Stream) -> list[tuple[str | None, dict[str, Any]]]:
    return [(event.name, event.payload) for event in stream.events if isinstance(event.payload, dict)]


def event_problems(stream: Stream) -> list[str]:
    """Where the stream leaves Anthropic's event sequence."""
    problems = list(stream.problems)
    events = [(name, payload) for name, payload in _payloads(stream) if payload.get("type") != "ping"]
    kinds = [payload.get("type") for _, payload in events]
    for number, (name, payload) in enumerate(events, 1):
        if name is not None and name != payload.get("type"):
            problems.append(f"event {number}: `event: {name}` names another type than $.type {payload.get('type')!r}")
        if payload.get("type") == "error":
            problems.append(f"event {number}: an error event: {payload.get('error')!r}")
    if not kinds or kinds[0] != "message_start":
        problems.append(f"the stream opens with {kinds[:1]}, not message_start")
    if not kinds or kinds[-1] != "message_stop":
        problems.append(f"the stream ends with {kinds[-1:]}, not message_stop")
    deltas = [payload for _, payload in events if payload.get("type") == "message_delta"]
    if len(deltas) != 1:
        problems.append(f"{len(deltas)} message_delta events, expected 1")
    for payload in deltas:
        stop = (payload.get("delta") or {}).get("stop_reason")
        if stop not in STOP_REASONS:
            problems.append(f"message_delta $.delta.stop_reason: {stop!r}, not one of Anthropic's {STOP_REASONS}")
        problems += schema_problems(
            _USAGE | {"required": ["output_tokens"]}, payload.get("usage"), "message_delta $.usage"
        )
    if (
        "message_delta" in kinds
        and "message_stop" in kinds
        and kinds.index("message_delta") > kinds.index("message_stop")
    ):
        problems.append("message_delta comes after message_stop")
    return problems + _block_problems([payload for _, payload in events])


def _block_problems(events: list[dict[str, Any]]) -> list[str]:
    """Blocks open, take their deltas and close one at a time, in index order, before message_delta."""
    problems, open_index, next_index = [], None, 0
    for number, event in enumerate(events, 1):
        kind, index = event.get("type"), event.get("index")
        if kind == "content_block_start":
            if open_index is not None or index != next_index:
                problems.append(f"event {number}: content_block_start of block {index!r} (block {next_index} was due)")
            open_index, next_index = index, next_index + 1
        elif kind in ("content_block_delta", "content_block_stop") and index != open_index:
            problems.append(f"event {number}: {kind} of block {index!r}, the open block is {open_index!r}")
        elif kind == "content_block_stop":
            open_index = None
        elif kind in ("message_delta", "message_stop") and open_index is not None:
            problems.append(f"event {number}: {kind} while block {open_index} is open")
    return problems


def reassembled(stream: Stream) -> dict[str, Any]:
    """The text, stop_reason and usage the stream adds up to."""
    text: list[str] = []
    stop: Any = None
    usage: dict[str, Any] = {}
    for _, payload in _payloads(stream):
        kind = payload.get("type")
        if kind == "message_start":
            usage.update((payload.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start" and (payload.get("content_block") or {}).get("type") == "text":
            text.append((payload.get("content_block") or {}).get("text") or "")
        elif kind == "content_block_delta" and (payload.get("delta") or {}).get("type") == "text_delta":
            text.append((payload.get("delta") or {}).get("text") or "")
        elif kind == "message_delta":
            stop = (payload.get("delta") or {}).get("stop_reason")
            usage.update(payload.get("usage") or {})
    counts = {key: usage.get(key) for key in ("input_tokens", "output_tokens")}
    return {"text": "".join(text), "stop_reason": stop, "usage": counts}


def unstreamed(message: dict[str, Any]) -> dict[str, Any]:
    usage = message.get("usage") or {}
    counts = {key: usage.get(key) for key in ("input_tokens", "output_tokens")}
    return {"text": text_of(message), "stop_reason": message.get("stop_reason"), "usage": counts}


# Anthropic's tool definitions of the loop's two functions, strict as the chat loop's: without it the
# parser's structural tag leaves the input free, and the tiny model's `inf` made vLLM 0.32 answer 400
# (the tool_use block's input must be an object; measured 2026-12-04).
def _tool(name: str, description: str, field: str, values: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": {field: {"enum": values}}, "required": [field]}
    return {
        "name": name,
        "description": description,
        "strict": True,
        "input_schema": schema | {"additionalProperties": False},
    }


TOOLS = [
    _tool("get_weather", "The weather in a unit.", "unit", ["celsius", "kelvin"]),
    _tool("get_time", "The time in a zone.", "zone", ["utc", "cet"]),
]
QUESTION = [{"role": "user", "content": "What is the weather, and what time is it?"}]
# Room for the hermes envelope, the name and the input: the chat loop's 256 (a call cut short is undecided).
TOOL_MAX_TOKENS = 256


def tool_request(model: str, name: str, history: list[dict[str, Any]] = QUESTION) -> dict[str, Any]:
    """A forced call of ``name`` (Anthropic's tool_choice {type: tool}) after ``history``."""
    return request(
        model,
        max_tokens=TOOL_MAX_TOKENS,
        messages=history,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": name},
    )


def counted(body: dict[str, Any]) -> dict[str, Any]:
    """The count_tokens request of the same prompt (count_tokens takes no max_tokens or sampling)."""
    return {key: body[key] for key in ("model", "messages", "tools", "tool_choice", "system") if key in body}


def blocks(message: dict[str, Any]) -> list[Any]:
    """The types of the answer's content blocks."""
    return [b.get("type") if isinstance(b, dict) else type(b).__name__ for b in message.get("content") or []]


def uncalled_of(message: dict[str, Any]) -> tuple[str, bool]:
    """An answer with no tool_use block: its text, and whether it was cut at max_tokens."""
    text = "".join(
        str(b.get("text") or "")
        for b in message.get("content") or []
        if isinstance(b, dict) and b.get("type") == "text"
    )
    return text, message.get("stop_reason") == "max_tokens"


def tool_uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"]


def tool_use_problems(message: dict[str, Any], name: str) -> list[str]:
    """Why the answer is not one tool_use block of ``name`` (an id, an input object) with stop_reason tool_use."""
    uses = tool_uses(message)
    if len(uses) != 1:
        return [f"{len(uses)} tool_use blocks, expected 1: {message.get('content')!r:.300}"]
    use, problems = uses[0], []
    if not isinstance(use.get("id"), str) or not use["id"]:
        problems.append(f"tool_use id {use.get('id')!r} is no id")
    if use.get("name") != name:
        problems.append(f"tool_use name {use.get('name')!r}, not the forced {name}")
    if not isinstance(use.get("input"), dict):
        problems.append(f"tool_use input {use.get('input')!r:.120} is not an object")
    if message.get("stop_reason") != "tool_use":
        problems.append(f"stop_reason {message.get('stop_reason')!r} after a tool_use block, not tool_use")
    return problems


def fed_back(message: dict[str, Any], result: str, history: list[dict[str, Any]] = QUESTION) -> list[dict[str, Any]]:
    """The history, the assistant turn as it came, and one tool_result per tool_use under its id."""
    results = [{"type": "tool_result", "tool_use_id": use.get("id"), "content": result} for use in tool_uses(message)]
    return [*history, {"role": "assistant", "content": message.get("content")}, {"role": "user", "content": results}]
