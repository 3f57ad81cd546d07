"""A greedy chat answer's reasoning and content, whole or streamed, and where they came back.

The reasoning is read under every name a release ever gave it (fact
``reasoning_output_field``: the documented field and its former names), so an
answer that carries it under a former name is seen, not missed. A streamed
answer is its deltas joined, field by field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import generation_routes, sse

CHAT = generation_routes.CHAT.path
QUESTION = [{"role": "user", "content": "How many rivers does the city have? Think first."}]
HISTORY_REASONING = "The user wants the weather in Paris, so I call get_weather for Paris."
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {
    "id": "call_reasoning_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def tool_loop(field: str | None = None) -> dict[str, Any]:
    """A tool loop's request fields (a question, an assistant turn with a tool call, the tool's result), the
    assistant turn's reasoning under ``field`` (None: without it)."""
    turn: dict[str, Any] = {"role": "assistant", "content": "Let me look that up.", "tool_calls": [CALL]}
    if field is not None:
        turn[field] = HISTORY_REASONING
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        turn,
        {"role": "tool", "tool_call_id": CALL["id"], "content": '{"temperature_c": 18}'},
    ]
    return {"messages": messages, "tools": [TOOL]}


# Room for a short thought within the smallest context served (512 tokens); a real model's greedy answer cut while
# it still thinks has its reasoning in the field and no content yet, alike streamed and not.
MAX_TOKENS = 256
SHOWN = 120


@dataclass
class ReasonedAnswer:
    """Choice 0 of a chat answer: the text under each reasoning field name, and the content."""

    streamed: bool
    reasoning: dict[str, str] = field(default_factory=dict)
    content: str = ""
    finish_reasons: list[str] = field(default_factory=list)

    def describe(self) -> str:
        fields = ", ".join(f"{name} {text[:SHOWN]!r}" for name, text in self.reasoning.items() if text) or "none"
        how = "streamed" if self.streamed else "unstreamed"
        return f"{how}: reasoning fields {fields}; content {self.content[:SHOWN]!r}; finish {self.finish_reasons}"


def chat_body(model: str, *, streamed: bool, after_tool: bool = False) -> dict[str, Any]:
    """The question, or (``after_tool``) the next turn of a tool loop, where parsers have leaked (vllm#39885)."""
    asked = {**tool_loop(), "tool_choice": "none"} if after_tool else {"messages": QUESTION}  # none: no tool parser
    body = {"model": model, **asked, "max_tokens": MAX_TOKENS, "temperature": 0}
    return {**body, "stream": True} if streamed else body


def ask(
    client: BoundedClient, model: str, names: Sequence[str], *, streamed: bool, after_tool: bool = False
) -> ReasonedAnswer:
    """The greedy answer to the reasoning question; an AssertionError saying why when none came."""
    response = client.post(CHAT, chat_body(model, streamed=streamed, after_tool=after_tool))
    assert response.status == 200 and not response.truncated, (
        f"the {'streamed ' if streamed else ''}reasoning question{' after a tool result' if after_tool else ''} "
        "was not answered whole: "
        f"{response.describe()} {response.text[:300]!r}"
    )
    answer = ReasonedAnswer(streamed, dict.fromkeys(names, ""))
    if streamed:
        for event in sse.parse(response.body).chunks():
            for choice in event.choices():
                if choice.get("index", 0) == 0:
                    _add(answer, names, choice.get("delta"), choice.get("finish_reason"))
    else:
        payload = response.json_or_none()
        choices = payload.get("choices") if isinstance(payload, dict) else None
        assert isinstance(choices, list) and choices, f"the answer carries no choice: {response.text[:300]!r}"
        _add(answer, names, choices[0].get("message"), choices[0].get("finish_reason"))
    return answer


@dataclass(frozen=True)
class Asker:
    """Asks the reasoning question and reads the answer under every name the reasoning had (fact
    ``reasoning_output_field``); knows the documented field and the declared parser's markers."""

    client: BoundedClient
    model: str
    documented: str
    former: tuple[str, ...]
    markers: tuple[str, ...]

    @classmethod
    def of(cls, client: BoundedClient, model: str, expect: Expectations) -> Asker:
        output = expect.fact("reasoning_output_field")
        parser = expect.declared("generation", "reasoning_parser").value
        markers = expect.fact("reasoning_parser_markers").get(parser, [])
        return cls(client, model, output["field"], tuple(output["former"]), tuple(markers))

    def __call__(self, *, streamed: bool, after_tool: bool = False) -> ReasonedAnswer:
        names = (self.documented, *self.former)
        return ask(self.client, self.model, names, streamed=streamed, after_tool=after_tool)


def _add(answer: ReasonedAnswer, names: Sequence[str], part: Any, finish: Any) -> None:
    part = part if isinstance(part, dict) else {}
    for name in names:
        answer.reasoning[name] += _text(part.get(name))
    answer.content += _text(part.get("content"))
    if isinstance(finish, str):
        answer.finish_reasons.append(finish)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def field_problems(
    answer: ReasonedAnswer, documented: str, markers: Sequence[str], reference: ReasonedAnswer | None = None
) -> list[str]:
    """Where ``answer`` leaves its reasoning other than in ``documented`` (``reference``: the unstreamed answer)."""
    problems = [
        f"the reasoning came back under {name!r}, a former name; the version documents {documented!r}"
        for name, text in answer.reasoning.items()
        if name != documented and text
    ]
    known = (reference.reasoning.get(documented) if reference else "") or answer.reasoning.get(documented, "")
    if known.strip() and known.strip() in answer.content:
        problems.append(f"the reasoning came back inside content ({known.strip()[:SHOWN]!r})")
    problems += [f"content holds the think marker {marker!r}" for marker in markers if marker in answer.content]
    if not answer.reasoning.get(documented):
        problems.append(f"no reasoning in {documented!r}")
    return problems


def markers_in_reasoning(answer: ReasonedAnswer, documented: str, markers: Sequence[str]) -> list[str]:
    """The parser's markers left in the reasoning text itself.

    vLLM's thinking parsers pass a streamed delta that holds the start marker
    and more tokens, but not the end marker, to ``reasoning`` whole, marker
    included (vllm/reasoning/basic_parsers.py, ``extract_reasoning_streaming``,
    at v0.32.0); a delta holds several tokens when the API server
    falls behind the engine, so whether it shows depends on the server's load.
    """
    text = answer.reasoning.get(documented, "")
    return [marker for marker in markers if marker in text]


def reassembly_problems(
    streamed: ReasonedAnswer, whole: ReasonedAnswer, documented: str, markers: Sequence[str] = ()
) -> list[str]:
    """Where the streamed deltas differ from the unstreamed answer; the reasoning is compared without ``markers``
    (``markers_in_reasoning`` says why a loaded server may leave one in)."""
    if not whole.reasoning.get(documented):
        return [f"nothing to compare: the unstreamed answer has no reasoning in {documented!r} ({whole.describe()})"]
    reasoning = streamed.reasoning.get(documented, "")
    for marker in markers:
        reasoning = reasoning.replace(marker, "")
    pairs = [
        ("reasoning", reasoning, whole.reasoning[documented]),
        ("content", streamed.content, whole.content),
    ]
    return [
        f"the streamed {name} deltas reassemble to {mine[:SHOWN]!r}, "
        f"the same request unstreamed says {theirs[:SHOWN]!r}"
        for name, mine, theirs in pairs
        if mine != theirs
    ]


@dataclass(frozen=True)
class ChatCase:
    streamed: bool
    after_tool: bool = False

    @property
    def id(self) -> str:
        return f"chat{' after a tool result' if self.after_tool else ''}{' streamed' if self.streamed else ''}"

    def __str__(self) -> str:
        after = " after a tool result" if self.after_tool else ""
        return f"POST {CHAT}{after}{' streamed' if self.streamed else ''}"


def chat_cases(ctx: CaseContext) -> list[ChatCase]:
    if not ctx.server.serves("POST", CHAT):
        raise NoCases(f"the server's route table does not list POST {CHAT}")
    return [ChatCase(streamed, after_tool) for after_tool in (False, True) for streamed in (False, True)]
