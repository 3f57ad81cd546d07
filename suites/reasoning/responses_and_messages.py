"""The reasoning on the Responses API (reasoning items) and Anthropic messages (thinking blocks), whole or streamed.

What each route returns is fact ``reasoning_route_shapes``: the output item
and content part types of a Responses answer and the delta event its stream
carries, the content block type of a messages answer and its stream's delta.
The reasoning each returns is compared with the chat answer's to the same
greedy question: the route may not reason otherwise than the chat path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.generation_routes import MESSAGES, RESPONSES

from .answers import MAX_TOKENS, QUESTION, SHOWN

Shape = Mapping[str, str]


def _responses(answer: Any, streamed: bool, shape: Shape) -> tuple[str, str]:
    """(reasoning, text) of a Responses answer."""
    if streamed:
        reasoning = text = ""
        for event in answer.chunks():
            kind, delta = event.payload.get("type"), event.payload.get("delta")
            reasoning += delta if kind == shape["delta_event"] and isinstance(delta, str) else ""
            text += delta if kind == "response.output_text.delta" and isinstance(delta, str) else ""
        return reasoning, text
    items = [item for item in (answer or {}).get("output") or [] if isinstance(item, dict)]
    reasoning = "".join(_texts(items, shape["item"], shape["part"]))
    return reasoning, "".join(_texts(items, "message", "output_text"))


def _texts(items: list[dict[str, Any]], item_type: str, part_type: str) -> list[str]:
    """The text of each content part of type ``part_type`` in the output items of type ``item_type``."""
    parts = [part for item in items if item.get("type") == item_type for part in item.get("content") or []]
    return [part.get("text") or "" for part in parts if isinstance(part, dict) and part.get("type") == part_type]


def _messages(answer: Any, streamed: bool, shape: Shape) -> tuple[str, str]:
    """(thinking, text) of an Anthropic messages answer."""
    if streamed:
        deltas = [event.payload.get("delta") or {} for event in answer.chunks()]
        thinking = "".join(d.get("thinking") or "" for d in deltas if d.get("type") == shape["delta"])
        return thinking, "".join(d.get("text") or "" for d in deltas if d.get("type") == "text_delta")
    blocks = [block for block in (answer or {}).get("content") or [] if isinstance(block, dict)]
    thinking = "".join(block.get("thinking") or "" for block in blocks if block.get("type") == shape["block"])
    return thinking, "".join(block.get("text") or "" for block in blocks if block.get("type") == "text")


@dataclass(frozen=True)
class RouteCase:
    name: str  # the key of fact reasoning_route_shapes
    path: str
    streamed: bool
    read: Callable[[Any, bool, Shape], tuple[str, str]]
    what: str  # what the route calls the reasoning

    @property
    def id(self) -> str:
        return f"{self.name}{' streamed' if self.streamed else ''}"

    def __str__(self) -> str:
        return f"POST {self.path}{' streamed' if self.streamed else ''}"

    def body(self, model: str) -> dict[str, Any]:
        if self.name == "responses":
            body = {"model": model, "input": QUESTION[0]["content"], "max_output_tokens": MAX_TOKENS}
        else:
            body = {"model": model, "messages": QUESTION, "max_tokens": MAX_TOKENS}
        return {**body, "temperature": 0, "stream": self.streamed}


ROUTES = (
    ("responses", RESPONSES.path, _responses, "a reasoning item"),
    ("messages", MESSAGES.path, _messages, "a thinking block"),
)


def route_cases(ctx: CaseContext) -> list[RouteCase]:
    served = [route for route in ROUTES if ctx.server.serves("POST", route[1])]
    if not served:
        raise NoCases(f"the server's route table lists none of {[route[1] for route in ROUTES]}")
    return [
        RouteCase(name, path, streamed, read, what) for name, path, read, what in served for streamed in (False, True)
    ]


def bare(reasoning: str, markers: Sequence[str]) -> str:
    """The reasoning as compared across routes: without the parser's markers (a loaded server may leave one in,
    answers.markers_in_reasoning) and the whitespace around it."""
    for marker in markers:
        reasoning = reasoning.replace(marker, "")
    return reasoning.strip()


def route_problems(
    client: BoundedClient, model: str, case: RouteCase, shape: Shape, markers: Sequence[str], chat_reasoning: str
) -> list[str]:
    """``chat_reasoning``: the reasoning of the same greedy question asked on the chat path, which the route's
    must equal (the same prompt, rendered by the same template, parsed by the same parser)."""
    response = client.post(case.path, case.body(model))
    if response.status != 200 or response.truncated:
        return [f"not answered whole: {response.describe()} {response.text[:300]!r}"]
    answer = sse.parse(response.body, named_events=True) if case.streamed else response.json_or_none()
    reasoning, text = case.read(answer, case.streamed, shape)
    problems = [] if reasoning else [f"no reasoning came back as {case.what} (text {text[:SHOWN]!r})"]
    if reasoning and bare(reasoning, markers) != bare(chat_reasoning, markers):
        problems.append(
            f"{case.what} holds {bare(reasoning, markers)[:SHOWN]!r}, the chat answer's reasoning to the same greedy "
            f"question is {bare(chat_reasoning, markers)[:SHOWN]!r}"
        )
    if reasoning.strip() and reasoning.strip() in text:
        problems.append(f"the reasoning came back inside the answer's text ({reasoning.strip()[:SHOWN]!r})")
    return problems + [f"the answer's text holds the think marker {marker!r}" for marker in markers if marker in text]
