"""A Responses tool loop, as Codex and the Agents SDK drive it: unstreamed turns, each fed the last one's items.

A client keeps the turn's ``function_call`` items, runs the tools, and sends
them back with one ``function_call_output`` per ``call_id`` (or names the turn
by ``previous_response_id`` where the server stores responses). Here: the
requests of such a loop, and how to read a turn's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.protocol import tools

from .responses import (
    CALL_MAX_OUTPUT_TOKENS,
    CALL_TYPES,
    RESPONSES,
    SHELL,
    WEATHER,
    cut_at_max_output_tokens,
)

# Room for the hermes envelope, the name and the arguments: the chat loop's 256 (a call cut short is undecided).
LOOP_MAX_OUTPUT_TOKENS = 256
QUESTION = "What is the weather, and what time is it?"
CLOCK = tools.responses_tool(tools.CLOCK)
TOOLS = [WEATHER, CLOCK]
# The loop's tools and a free-form custom one, as Codex declares apply_patch beside its functions.
WITH_CUSTOM = [*TOOLS, SHELL]
# What the tool answers a call with: any text a real tool would return.
TOOL_OUTPUT = '{"celsius": 21}'
# A call id no turn of the loop gave: what a client that lost its history echoes.
UNKNOWN_CALL_ID = "call_never_given_by_the_server"


def named(function: str, kind: str = "function") -> dict[str, Any]:
    return {"type": kind, "name": function}


def turn_request(
    model: str, tool_choice: Any, history: list[Any] | None = None, tools: list[Any] = TOOLS, **extra: Any
) -> dict[str, Any]:
    return {
        "model": model,
        "input": history if history is not None else [{"role": "user", "content": QUESTION}],
        "tools": tools,
        "tool_choice": tool_choice,
        "max_output_tokens": LOOP_MAX_OUTPUT_TOKENS,
        "temperature": 0,
        **extra,
    }


@dataclass(frozen=True)
class Turn:
    response: Response
    body: dict[str, Any]

    @property
    def output(self) -> list[dict[str, Any]]:
        return [item for item in self.body.get("output") or [] if isinstance(item, dict)]

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [item for item in self.output if item.get("type") == "function_call"]

    @property
    def kinds(self) -> list[Any]:
        return [item.get("type") for item in self.output]

    @property
    def cut(self) -> bool:
        """The answer stopped at max_output_tokens: a call it lacks may just not be written yet."""
        return cut_at_max_output_tokens(self.body)

    def input_tokens(self) -> Any:
        return (self.body.get("usage") or {}).get("input_tokens")

    def output_tokens(self) -> Any:
        return (self.body.get("usage") or {}).get("output_tokens")


def read_turn(response: Response, what: str) -> Turn:
    assert response.status == 200, f"{what} was not served: {response.describe()} {response.text[:300]!r}"
    body = response.json_or_none()
    assert isinstance(body, dict), f"{what}: no JSON object: {response.text[:300]!r}"
    return Turn(response, body)


def fed_back(turn: Turn, history: list[Any] | None = None) -> list[Any]:
    """The history, the turn's output items as the client got them, and one output per call under its call_id."""
    return fed_back_output(turn.output, history)


def fed_back_output(output: list[dict[str, Any]], history: list[Any] | None = None) -> list[Any]:
    """The history, an answer's output items, and one output per call under its call_id (a custom tool's as a
    custom_tool_call_output)."""
    calls = [item for item in output if item.get("type") in CALL_TYPES]
    outputs = [
        {"type": f"{call['type']}_output", "call_id": call.get("call_id"), "output": TOOL_OUTPUT} for call in calls
    ]
    return [*(history or [{"role": "user", "content": QUESTION}]), *output, *outputs]


def orphan_request(model: str) -> dict[str, Any]:
    """A turn whose input holds a call output naming a call no turn gave, after the user's question. No tools: the
    refusal a client needs is of the output, not of a tool_choice the server has no parser for."""
    history = [
        {"role": "user", "content": QUESTION},
        {"type": "function_call_output", "call_id": UNKNOWN_CALL_ID, "output": TOOL_OUTPUT},
    ]
    return {"model": model, "input": history, "max_output_tokens": LOOP_MAX_OUTPUT_TOKENS, "temperature": 0}


def custom_turn_request(model: str) -> dict[str, Any]:
    """The loop's first turn, streamed as Codex streams it: the custom tool forced. Short: the item opens as soon
    as the forced name is parsed, and its input is free text the model may never end."""
    return turn_request(
        model, named(SHELL["name"], "custom"), tools=WITH_CUSTOM, max_output_tokens=CALL_MAX_OUTPUT_TOKENS
    )


def stored_path(response_id: Any) -> str:
    return f"{RESPONSES}/{response_id}"


def text_turn(model: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": text, "max_output_tokens": 16, "temperature": 0, **extra}


def error_problem(response: Response) -> str | None:
    """Why an error body is not OpenAI's envelope ({error: {message, type}}), or None."""
    body = response.json_or_none()
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "no error object"
    if not isinstance(error.get("message"), str) or not error["message"]:
        return "error.message is not a text"
    if not isinstance(error.get("type"), str):
        return "error.type is not a text"
    return None


def same_answer(read: dict[str, Any], created: dict[str, Any]) -> bool:
    """The stored response is the created one: its id, status and output items."""
    return all(read.get(field) == created.get(field) for field in ("id", "status", "output"))


def has_input(listing: Any, text: str) -> bool:
    """A list of input items (OpenAI's ResponseItemList) holding a message with ``text``."""
    items = listing.get("data") if isinstance(listing, dict) else None
    return any(text in repr(item.get("content")) for item in items or [] if isinstance(item, dict))
