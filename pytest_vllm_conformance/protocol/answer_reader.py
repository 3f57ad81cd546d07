"""One completions or chat answer read the same way whether it came whole or streamed.

A streamed answer (its events as the protocol's SSE reader parses them) is the
concatenation of its deltas: text pieces joined, tool-call fragments grouped
by their ``index`` (the name from the first fragment, the arguments joined),
every ``finish_reason`` kept so a choice that finishes twice is seen. Only choice 0 is read; the suites ask for one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.protocol import sse as stream


@dataclass(frozen=True)
class ToolCall:
    name: str | None
    arguments: str | None

    def arguments_object(self) -> tuple[Any, str | None]:
        """The parsed arguments, or (None, why they are not JSON)."""
        if not isinstance(self.arguments, str):
            return None, f"arguments are {self.arguments!r}, not a JSON string"
        try:
            return json.loads(self.arguments), None
        except ValueError as exc:
            return None, f"arguments {self.arguments[:120]!r} are not JSON ({exc})"


@dataclass
class Answer:
    """What choice 0 of a completion or chat answer says."""

    text: str = ""
    finish_reasons: list[str] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    streamed: bool = False

    @property
    def finish_reason(self) -> str | None:
        return self.finish_reasons[-1] if self.finish_reasons else None

    @property
    def cut(self) -> bool:
        """Stopped by max_tokens: what it holds may be the start of more."""
        return self.finish_reason == "length"

    def describe(self) -> str:
        calls = ", ".join(f"{call.name}({call.arguments})" for call in self.tool_calls) or "no tool call"
        how = "streamed" if self.streamed else "whole"
        return f"{how}: finish_reason {self.finish_reasons or None}, text {self.text[:120]!r}, {calls}"


class Unreadable(AssertionError):
    """An answer that cannot be read as one: cut at the byte cap, or without choice 0. The check it feeds fails."""


def read_answer(response: Response, *, streamed: bool) -> Answer:
    """Choice 0 of a whole or streamed completions / chat answer.

    A body cut at the byte cap, or one with no choice 0 (a stream of nothing
    but ``[DONE]``, a body without choices), is not an empty answer: a check
    reading it as one would pass on what it never saw ("no tool call", say),
    so ``Unreadable`` is raised instead, saying what was answered.
    """
    if response.truncated:
        raise Unreadable(f"{response.describe()}: the body passed the byte cap, so the answer cannot be read whole")
    if streamed:
        payloads = [event.payload for event in stream.parse(response.body).chunks()]
        if not any(choice.get("index", 0) == 0 for payload in payloads for choice in _choices(payload)):
            raise Unreadable(f"{response.describe()}: no streamed event carries choice 0: {response.text[:200]!r}")
        return _read_stream(payloads)
    payload = response.json_or_none()
    choices = _choices(payload)
    if not choices:
        raise Unreadable(f"{response.describe()}: the answer carries no choice: {response.text[:200]!r}")
    choice = choices[0]
    message = choice["message"] if isinstance(choice.get("message"), dict) else {}
    text = choice.get("text") if "text" in choice else message.get("content")
    calls = [
        ToolCall((call.get("function") or {}).get("name"), (call.get("function") or {}).get("arguments"))
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    reason = choice.get("finish_reason")
    return Answer(text or "", [reason] if reason else [], calls)


def _choices(payload: Any) -> list[dict[str, Any]]:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return [choice for choice in choices if isinstance(choice, dict)] if isinstance(choices, list) else []


def _read_stream(payloads: list[Any]) -> Answer:
    answer = Answer(streamed=True)
    names: dict[int, str | None] = {}
    arguments: dict[int, str] = {}
    for payload in payloads:
        choices = payload.get("choices") if isinstance(payload, dict) else None
        for choice in choices or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            answer.text += choice.get("text") or delta.get("content") or ""
            for fragment in delta.get("tool_calls") or []:
                index = fragment.get("index", 0)
                function = fragment.get("function") or {}
                if function.get("name") is not None and names.get(index) is None:
                    names[index] = function["name"]
                names.setdefault(index, None)
                arguments[index] = arguments.get(index, "") + (function.get("arguments") or "")
            if choice.get("finish_reason"):
                answer.finish_reasons.append(choice["finish_reason"])
    answer.tool_calls = [ToolCall(names[index], arguments.get(index, "")) for index in sorted(names)]
    return answer
