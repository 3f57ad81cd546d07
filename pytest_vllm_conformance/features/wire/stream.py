"""A streamed answer as OpenAI clients read it: SSE events, and what their framing must be.

The SDKs split the body on blank lines, take each ``data:`` line, stop at
``data: [DONE]`` and parse everything else as JSON; comment lines (``:``)
are skipped. A body that breaks this (a line that is not ``data:``, a
second ``[DONE]``, events after it, a stream without it) breaks them, so
each of those is a framing problem here, named by event number and JSON path.

A Responses stream is framed otherwise: each event names its type on an
``event:`` line before its ``data:``, and the stream ends with its terminal
event, not ``[DONE]`` (``parse(body, named_events=True)``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard

DONE = "[DONE]"


@dataclass(frozen=True)
class Event:
    number: int  # 1-based, as a message names it
    data: str
    payload: Any = None  # the parsed JSON, None for [DONE] or what does not parse
    name: str | None = None  # the `event:` line's value (Responses streams), None without one

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


def parse(body: bytes, *, named_events: bool = False) -> Stream:
    """The events of an SSE body and its framing problems; ``named_events``: a Responses stream."""
    stream = Stream()
    fields = ("data:", "event:") if named_events else ("data:",)
    text = body.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        number = len(stream.events) + 1
        stray = [line for line in lines if not line.startswith(fields)]
        if stray:
            allowed = " or ".join(f"`{field}`" for field in fields)
            stream.problems.append(f"event {number}: a line that is not {allowed} ({stray[0][:80]!r})")
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        names = [line[6:].strip() for line in lines if line.startswith("event:")]
        payload = None
        if data != DONE:
            try:
                payload = json.loads(data)
            except ValueError:
                stream.problems.append(f"event {number}: data is neither JSON nor [DONE] ({data[:80]!r})")
            else:
                if not isinstance(payload, dict):
                    stream.problems.append(f"event {number}: data is JSON but not an object ({data[:80]!r})")
        stream.events.append(Event(number, data, payload, names[-1] if names else None))
    done = [event.number for event in stream.events if event.done]
    if not done and not named_events:
        stream.problems.append("the stream does not end with `data: [DONE]`")
    elif len(done) > 1:
        stream.problems.append(f"`data: [DONE]` is sent {len(done)} times (events {', '.join(map(str, done))})")
    if done and done[0] != len(stream.events):
        stream.problems.append(f"{len(stream.events) - done[0]} event(s) after `data: [DONE]` (event {done[0]})")
    return stream


def finish_problems(stream: Stream) -> list[str]:
    """At least one choice is streamed, and each choice gets exactly one finish_reason.

    A stream without any choice (only ``data: [DONE]``, or only a usage
    chunk) gives a client nothing to read: it is not a well-framed empty answer.
    """
    finished: dict[int, list[int]] = {}
    for event in stream.chunks():
        for position, choice in enumerate(event.choices()):
            index = choice.get("index", position)
            finished.setdefault(index, [])
            if choice.get("finish_reason") is not None:
                finished[index].append(event.number)
    if not finished:
        return [
            f"no event carries a choice ({len(list(stream.chunks()))} JSON event(s) before [DONE]): "
            "the stream has no text and no finish_reason to read"
        ]
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
    return _final_usage_problems(stream, carrying[0], max_tokens=max_tokens, tokens_streamed=tokens_streamed)


def _final_usage_problems(stream: Stream, event: Event, *, max_tokens: int, tokens_streamed: int | None) -> list[str]:
    """The usage chunk: choices [], the last before [DONE], counts that add up to what was streamed."""
    problems = []
    if event.payload.get("choices") != []:
        carried = len(event.choices())
        problems.append(f"event {event.number} $.choices: the usage chunk carries {carried} choice(s), not []")
    last = [e.number for e in stream.chunks()][-1]
    if event.number != last:
        problems.append(f"event {event.number} $.usage: the usage chunk is not the last before [DONE] (event {last})")
    counts = _counts(event)
    if isinstance(counts, str):
        return [*problems, counts]
    prompt, completion, total = counts
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


def _counts(event: Event) -> tuple[int, int, int] | str:
    """(prompt, completion, total) tokens of an event's usage, or what is wrong with it."""
    usage = event.payload.get("usage")
    if not isinstance(usage, dict):
        return f"event {event.number} $.usage: expected an object, got {usage!r}"
    prompt, completion, total = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if not (_count(prompt) and _count(completion) and _count(total)):
        return f"event {event.number} $.usage: token counts are not integers: {usage}"
    return prompt, completion, total


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def continuous_usage_problems(stream: Stream, *, max_tokens: int, chat: bool) -> list[str]:
    """With stream_options.continuous_usage_stats: usage on every chunk, counting the tokens streamed so far.

    Every chunk's usage adds up, keeps the prompt's count, and its
    completion_tokens are the tokens the stream's logprobs have carried up to
    and including that chunk (so they never shrink); the final usage chunk
    keeps the include_usage rules: the one chunk with choices [], last, its
    count the whole stream's.
    """
    problems: list[str] = []
    chunks = list(stream.chunks())
    streamed, prompts = 0, set()
    for event in chunks:
        streamed += _logprob_entries(event, chat=chat)  # counted whether or not this chunk says so
        if event.payload.get("usage") is None:
            problems.append(f"event {event.number} $.usage: a chunk without usage under continuous_usage_stats")
            continue
        counts = _counts(event)
        if isinstance(counts, str):
            problems.append(counts)
            continue
        prompt, completion, total = counts
        prompts.add(prompt)
        if total != prompt + completion:
            problems.append(f"event {event.number} $.usage.total_tokens: {prompt} + {completion} != {total}")
        if event.payload.get("choices") == []:
            continue  # the final usage chunk: judged below
        if completion != streamed:
            problems.append(
                f"event {event.number} $.usage.completion_tokens: {completion}, but {streamed} token(s) "
                "streamed up to this chunk"
            )
    if len(prompts) > 1:
        problems.append(f"$.usage.prompt_tokens: changes during the stream ({sorted(prompts)})")
    finals = [event for event in chunks if event.payload.get("choices") == []]
    if len(finals) != 1:
        numbers = ", ".join(str(e.number) for e in finals) or "none"
        problems.append(f"$.choices: expected exactly one final usage chunk with choices [], got events {numbers}")
    elif finals[0].payload.get("usage") is not None:
        problems += _final_usage_problems(stream, finals[0], max_tokens=max_tokens, tokens_streamed=streamed)
    return problems


def _logprob_entries(event: Event, *, chat: bool) -> int:
    count = 0
    for choice in event.choices():
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict):
            entries = logprobs.get("content") if chat else logprobs.get("tokens")
            count += len(entries) if isinstance(entries, list) else 0
    return count


def streamed_tokens(stream: Stream, *, chat: bool) -> int:
    """How many tokens the stream's logprobs account for (one entry per sampled token)."""
    return sum(_logprob_entries(event, chat=chat) for event in stream.chunks())


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
