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
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.features.wire import stream as sse

CHAT = "/v1/chat/completions"
QUESTION = [{"role": "user", "content": "How many rivers does the city have? Think first."}]
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


def chat_body(model: str, *, streamed: bool) -> dict[str, Any]:
    body = {"model": model, "messages": QUESTION, "max_tokens": MAX_TOKENS, "temperature": 0}
    return {**body, "stream": True} if streamed else body


def ask(client: BoundedClient, model: str, names: Sequence[str], *, streamed: bool) -> ReasonedAnswer:
    """The greedy answer to the reasoning question; an AssertionError saying why when none came."""
    response = client.post(CHAT, chat_body(model, streamed=streamed))
    assert response.status == 200 and not response.truncated, (
        f"the {'streamed ' if streamed else ''}reasoning question was not answered whole: "
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


def reassembly_problems(streamed: ReasonedAnswer, whole: ReasonedAnswer, documented: str) -> list[str]:
    if not whole.reasoning.get(documented):
        return [f"nothing to compare: the unstreamed answer has no reasoning in {documented!r} ({whole.describe()})"]
    pairs = [
        ("reasoning", streamed.reasoning.get(documented, ""), whole.reasoning[documented]),
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

    @property
    def id(self) -> str:
        return "chat streamed" if self.streamed else "chat"

    def __str__(self) -> str:
        return f"POST {CHAT}{' streamed' if self.streamed else ''}"


def chat_cases(ctx: CaseContext) -> list[ChatCase]:
    if not ctx.server.serves("POST", CHAT):
        raise NoCases(f"the server's route table does not list POST {CHAT}")
    return [ChatCase(False), ChatCase(True)]
