"""A streamed answer as OpenAI clients read it: SSE events, and what their framing must be.

The SDKs split the body on blank lines, take each ``data:`` line, stop at
``data: [DONE]`` and parse everything else as JSON; comment lines (``:``)
are skipped. A body that breaks this (a line that is not ``data:``, a
second ``[DONE]``, events after it, a stream without it) breaks them, so
each of those is a framing problem here, named by event number and JSON path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"


@dataclass(frozen=True)
class Event:
    number: int  # 1-based, as a message names it
    data: str
    payload: Any = None  # the parsed JSON, None for [DONE] or what does not parse

    @property
    def done(self) -> bool:
        return self.data == DONE

    def choices(self) -> list[dict[str, Any]]:
        choices = self.payload.get("choices") if isinstance(self.payload, dict) else None
        return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


@dataclass
class Stream:
    events: list[Event] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # framing the SDKs would trip on

    def chunks(self) -> Iterator[Event]:
        """The JSON events before the first [DONE]."""
        for event in self.events:
            if event.done:
                return
            if isinstance(event.payload, dict):
                yield event


def parse(body: bytes) -> Stream:
    stream = Stream()
    text = body.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        number = len(stream.events) + 1
        stray = [line for line in lines if not line.startswith("data:")]
        if stray:
            stream.problems.append(f"event {number}: a line that is not `data:` ({stray[0][:80]!r})")
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        payload = None
        if data != DONE:
            try:
                payload = json.loads(data)
            except ValueError:
                stream.problems.append(f"event {number}: data is neither JSON nor [DONE] ({data[:80]!r})")
            else:
                if not isinstance(payload, dict):
                    stream.problems.append(f"event {number}: data is JSON but not an object ({data[:80]!r})")
        stream.events.append(Event(number, data, payload))
    done = [event.number for event in stream.events if event.done]
    if not done:
        stream.problems.append("the stream does not end with `data: [DONE]`")
    elif len(done) > 1:
        stream.problems.append(f"`data: [DONE]` is sent {len(done)} times (events {', '.join(map(str, done))})")
    if done and done[0] != len(stream.events):
        stream.problems.append(f"{len(stream.events) - done[0]} event(s) after `data: [DONE]` (event {done[0]})")
    return stream


def finish_problems(stream: Stream) -> list[str]:
    """Each choice gets exactly one finish_reason."""
    finished: dict[int, list[int]] = {}
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            index = choice.get("index", position)
            finished.setdefault(index, [])
            if choice.get("finish_reason") is not None:
                finished[index].append(event.number)
    problems = []
    for index, events in sorted(finished.items()):
        if len(events) != 1:
            where = f"events {', '.join(map(str, events))}" if events else "no event"
            problems.append(f"choice {index} finished {len(events)} times ($.choices[*].finish_reason set in {where})")
    return problems


def role_problems(stream: Stream) -> list[str]:
    """A chat choice's first delta carries the role, as clients build the message from it."""
    seen: set[int] = set()
    problems = []
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            index = choice.get("index", position)
            if index in seen:
                continue
            seen.add(index)
            delta = choice.get("delta")
            role = delta.get("role") if isinstance(delta, dict) else None
            if role != "assistant":
                problems.append(
                    f"event {event.number} $.choices[{position}].delta.role: choice {index}'s first delta carries "
                    f"role {role!r}, not 'assistant'"
                )
    return problems


def usage_problems(stream: Stream, *, asked: bool, max_tokens: int, tokens_streamed: int | None) -> list[str]:
    """With include_usage: exactly one usage chunk, choices [], last, adding up; without it: no usage at all."""
    carrying = [event for event in stream.chunks() if event.payload.get("usage") is not None]
    if not asked:
        return [f"event {e.number} $.usage: usage sent without stream_options.include_usage" for e in carrying]
    if len(carrying) != 1:
        numbers = ", ".join(str(e.number) for e in carrying) or "none"
        return [f"$.usage: expected exactly one usage chunk with stream_options.include_usage, got events {numbers}"]
    event = carrying[0]
    usage, problems = event.payload["usage"], []
    if event.payload.get("choices") != []:
        carried = len(event.choices())
        problems.append(f"event {event.number} $.choices: the usage chunk carries {carried} choice(s), not []")
    last = [e.number for e in stream.chunks()][-1]
    if event.number != last:
        problems.append(f"event {event.number} $.usage: the usage chunk is not the last before [DONE] (event {last})")
    if not isinstance(usage, dict):
        return [*problems, f"event {event.number} $.usage: expected an object, got {usage!r}"]
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    prompt, completion, total = (n if isinstance(n, int) else -1 for n in counts)
    if -1 in (prompt, completion, total):
        return [*problems, f"event {event.number} $.usage: token counts are not integers: {usage}"]
    if total != prompt + completion:
        problems.append(f"event {event.number} $.usage.total_tokens: {prompt} + {completion} != {total}")
    if not 0 < completion <= max_tokens:
        problems.append(f"event {event.number} $.usage.completion_tokens: {completion}, for max_tokens={max_tokens}")
    if tokens_streamed is not None and tokens_streamed != completion:
        problems.append(
            f"event {event.number} $.usage.completion_tokens: {completion}, but the stream's logprobs "
            f"counted {tokens_streamed} tokens"
        )
    return problems


def streamed_tokens(stream: Stream, *, chat: bool) -> int:
    """How many tokens the stream's logprobs account for (one entry per sampled token)."""
    count = 0
    for event in stream.chunks():
        for choice in event.choices():
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict):
                entries = logprobs.get("content") if chat else logprobs.get("tokens")
                count += len(entries) if isinstance(entries, list) else 0
    return count


def logprob_problems(stream: Stream, *, chat: bool) -> list[str]:
    """Asked for logprobs, every chunk that carries text carries its logprobs."""
    problems = []
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            delta = choice.get("delta") if chat else choice
            text = delta.get("content" if chat else "text") if isinstance(delta, dict) else None
            if not text:
                continue
            logprobs = choice.get("logprobs")
            entries = None
            if isinstance(logprobs, dict):
                entries = logprobs.get("content") if chat else logprobs.get("tokens")
            if not entries:
                where = "content" if chat else "tokens"
                problems.append(
                    f"event {event.number} $.choices[{position}].logprobs.{where}: text {text[:20]!r} "
                    f"streamed without its logprobs ({logprobs!r:.60})"
                )
    return problems
