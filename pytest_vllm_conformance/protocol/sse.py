"""The one SSE reader: a streamed answer as OpenAI clients read it, whole or as its chunks arrive.

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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"


@dataclass(frozen=True)
class Event:
    number: int  # 1-based, as a message names it
    data: str
    payload: Any = None  # the parsed JSON, None for [DONE] or what does not parse
    name: str | None = None  # the `event:` line's value (Responses streams), None without one
    arrived: float | None = field(default=None, compare=False)  # perf_counter() when read as it came (Reader)

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


def _event(
    block: str, number: int, fields: tuple[str, ...], problems: list[str], arrived: float | None
) -> Event | None:
    """One blank-line-separated block as an event (None for a block of comments only); its framing problems noted."""
    lines = [line for line in block.split("\n") if line and not line.startswith(":")]
    if not lines:
        return None
    stray = [line for line in lines if not line.startswith(fields)]
    if stray:
        allowed = " or ".join(f"`{field}`" for field in fields)
        problems.append(f"event {number}: a line that is not {allowed} ({stray[0][:80]!r})")
    data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
    names = [line[6:].strip() for line in lines if line.startswith("event:")]
    payload = None
    if data != DONE:
        try:
            payload = json.loads(data)
        except ValueError:
            problems.append(f"event {number}: data is neither JSON nor [DONE] ({data[:80]!r})")
        else:
            if not isinstance(payload, dict):
                problems.append(f"event {number}: data is JSON but not an object ({data[:80]!r})")
    return Event(number, data, payload, names[-1] if names else None, arrived)


def parse(body: bytes, *, named_events: bool = False) -> Stream:
    """The events of an SSE body and its framing problems; ``named_events``: a Responses stream."""
    stream = Stream()
    fields = ("data:", "event:") if named_events else ("data:",)
    text = body.decode("utf-8", errors="replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        event = _event(block, len(stream.events) + 1, fields, stream.problems, None)
        if event is not None:
            stream.events.append(event)
    done = [event.number for event in stream.events if event.done]
    if not done and not named_events:
        stream.problems.append("the stream does not end with `data: [DONE]`")
    elif len(done) > 1:
        stream.problems.append(f"`data: [DONE]` is sent {len(done)} times (events {', '.join(map(str, done))})")
    if done and done[0] != len(stream.events):
        stream.problems.append(f"{len(stream.events) - done[0]} event(s) after `data: [DONE]` (event {done[0]})")
    return stream


class Reader:
    """The same reader fed as chunks arrive (a load generator's): each whole event, stamped with when it came.

    ``feed(chunk)`` returns the events the chunk completed, each with ``arrived``, the
    ``time.perf_counter()`` reading of the chunk that completed it; a block of comments only (a keep-alive)
    is no event. Bytes are held until their event is whole, so a character split across chunks stays one.
    """

    def __init__(self, *, named_events: bool = False) -> None:
        self.fields = ("data:", "event:") if named_events else ("data:",)
        self.stream = Stream()
        self.pending = b""

    def feed(self, chunk: bytes) -> list[Event]:
        now = time.perf_counter()
        self.pending = (self.pending + chunk).replace(b"\r\n", b"\n")
        *blocks, self.pending = self.pending.split(b"\n\n")
        events = []
        for block in blocks:
            text = block.decode("utf-8", errors="replace")
            event = _event(text, len(self.stream.events) + 1, self.fields, self.stream.problems, now)
            if event is not None:
                self.stream.events.append(event)
                events.append(event)
        return events


# A Responses stream ends with the terminal event OpenAI sends for the response's final status.
TERMINAL_FOR_STATUS = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}
TERMINAL = frozenset(TERMINAL_FOR_STATUS.values())
