"""Tool-call requests and what a parsed call must look like.

The functions take one enum argument each, so a random-weight model meets
their schema only when the server constrains the arguments (``strict``).
Requests are greedy, with room for a model that pads its JSON with
whitespace: a call is cut by ``max_tokens`` only when the test asks for it.
"""

from __future__ import annotations

import copy
from typing import Any

from pytest_vllm_conformance.features.generation.answers import ToolCall
from pytest_vllm_conformance.features.generation.structured import schema_problem

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a unit.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"unit": {"enum": ["celsius", "kelvin"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a zone.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["utc", "cet"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = (WEATHER, CLOCK)
MAX_TOKENS = 256
CUT_MAX_TOKENS = 4
MESSAGES = [{"role": "user", "content": "What is the weather, and what time is it?"}]


def named(function: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": function}}


def without_strict(tool: dict[str, Any]) -> dict[str, Any]:
    loose = copy.deepcopy(tool)
    del loose["function"]["strict"]
    return loose


def tool_request(
    model: str,
    tool_choice: Any,
    *,
    tools: tuple[dict[str, Any], ...] = TOOLS,
    max_tokens: int = MAX_TOKENS,
    stream: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": MESSAGES,
        "tools": list(tools),
        "tool_choice": tool_choice,
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    if stream:
        body["stream"] = True
    return body


def parameters_of(name: str | None, tools: tuple[dict[str, Any], ...] = TOOLS) -> dict[str, Any] | None:
    for tool in tools:
        if tool["function"]["name"] == name:
            return tool["function"]["parameters"]
    return None


def argument_problem(call: ToolCall, tools: tuple[dict[str, Any], ...] = TOOLS) -> str | None:
    """Why ``call``'s arguments are not JSON valid against its function's parameters, or None."""
    arguments, problem = call.arguments_object()
    if problem:
        return problem
    schema = parameters_of(call.name, tools)
    if schema is None:
        return f"{call.name!r} is not a declared function"
    problem = schema_problem(schema, arguments)
    return f"{call.name}'s arguments {call.arguments!r} {problem}" if problem else None
