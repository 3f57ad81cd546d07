"""The tools every tool-calling request declares: ``get_weather`` and ``get_time``, each taking one enum argument,
and the chat request that offers them (the tool-call suite's, the agent loops').

A random-weight model meets their schema only when the server constrains the
arguments (``strict``). The Responses API declares a function flat (its name
beside its type, no ``function`` object): ``responses_tool`` gives that form.
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.protocol import generation_routes

WEATHER: dict[str, Any] = {
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
CLOCK: dict[str, Any] = {
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
CHAT = generation_routes.CHAT.path
MAX_TOKENS = 256
MESSAGES = [{"role": "user", "content": "What is the weather, and what time is it?"}]


def named(function: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": function}}


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


def responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat tool declaration as the Responses API declares it: flat."""
    return {"type": tool["type"], **tool["function"]}
