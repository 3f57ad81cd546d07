"""A streamed Responses answer as OpenAI's clients read it: typed events in order, one terminal event.

The SDKs build the response from the event sequence: they dispatch on each
event's ``type`` (and on the ``event:`` line, which must say the same), order
by ``sequence_number``, append ``response.output_text.delta`` texts and stop
at the terminal event (``response.completed``, ``response.incomplete`` or
``response.failed``), whose status must match it. A stream that breaks this
loses text or hangs a client waiting for the end.
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.catalogue.release_facts import ResponsesTerminalEvent
from pytest_vllm_conformance.protocol.sse import TERMINAL, TERMINAL_FOR_STATUS, Event, Stream

from .wire_rules import WireRules


def _type(event: Event) -> str:
    kind = event.payload.get("type") if isinstance(event.payload, dict) else None
    return kind if isinstance(kind, str) else ""


def _order_problems(events: list[Event]) -> list[str]:
    """Named events say their type; the stream opens with response.created; sequence numbers only grow."""
    problems = []
    for event in events:
        if event.name is not None and event.name != _type(event):
            problems.append(
                f"event {event.number}: `event: {event.name}` names another type than $.type {_type(event)!r}"
            )
    if events and _type(events[0]) != "response.created":
        problems.append(
            f"event {events[0].number} $.type: the stream opens with {_type(events[0])!r}, not response.created"
        )
    numbered = [(e, e.payload.get("sequence_number")) for e in events if "sequence_number" in e.payload]
    if numbered and len(numbered) != len(events):
        problems.append(f"$.sequence_number: on {len(numbered)} of {len(events)} events")
    previous: int | None = None
    for event, number in numbered:
        if not isinstance(number, int) or (previous is not None and number <= previous):
            problems.append(f"event {event.number} $.sequence_number: {number!r} after {previous!r}, not increasing")
        previous = number if isinstance(number, int) else previous
    return problems


def _text_problems(events: list[Event]) -> list[str]:
    """Each text part's deltas, appended, are its response.output_text.done text, which comes once."""
    deltas: dict[tuple[Any, ...], list[str]] = {}
    done: dict[tuple[Any, ...], list[Event]] = {}
    for event in events:
        key = tuple(event.payload.get(k) for k in ("item_id", "output_index", "content_index"))
        if _type(event) == "response.output_text.delta":
            delta = event.payload.get("delta")
            deltas.setdefault(key, []).append(delta if isinstance(delta, str) else "")
        elif _type(event) == "response.output_text.done":
            done.setdefault(key, []).append(event)
    problems = []
    for key in sorted(set(deltas) | set(done), key=str):
        where = "item {}, output {}, content {}".format(*key)
        ends = done.get(key, [])
        if len(ends) != 1:
            problems.append(f"{where}: {len(ends)} response.output_text.done events, expected 1")
            continue
        text, joined = ends[0].payload.get("text"), "".join(deltas.get(key, []))
        if text != joined:
            problems.append(
                f"event {ends[0].number} $.text: {str(text)[:40]!r} is not the deltas appended ({joined[:40]!r})"
            )
    return problems


def framing_verdict(
    rules: WireRules, terminal_fact: ResponsesTerminalEvent, stream: Stream
) -> tuple[list[str], list[str]]:
    """(failures, report lines) of a Responses stream's framing.

    ``terminal_fact`` (contract data ``wire_responses_terminal_event``) names
    the terminal event the version sends instead of OpenAI's for a status:
    reported, failed under ``wire.strict_openai``.
    """
    events = [event for event in stream.events if isinstance(event.payload, dict)]
    problems = [*stream.problems, *_order_problems(events), *_text_problems(events)]
    terminal = [event for event in events if _type(event) in TERMINAL]
    if len(terminal) != 1:
        numbers = ", ".join(str(e.number) for e in terminal) or "none"
        return [
            *problems,
            f"$.type: expected exactly one terminal event ({', '.join(sorted(TERMINAL))}), got {numbers}",
        ], []
    end = terminal[0]
    if end is not events[-1]:
        problems.append(f"event {end.number} $.type: {_type(end)} is not the last event (event {events[-1].number})")
    response = end.payload.get("response")
    status = response.get("status") if isinstance(response, dict) else None
    expected = TERMINAL_FOR_STATUS.get(status) if isinstance(status, str) else None
    if expected is None or expected == _type(end):
        return problems, []
    said = (
        f"event {end.number} $.type: {_type(end)} ends a response whose status is {status!r}; OpenAI sends {expected}"
    )
    if _type(end) == terminal_fact.get("vllm_sends") and status in terminal_fact.get("statuses", ()):
        failures, reported = rules.departures(
            [said], [f"{said}: {rules.version_label} does so on purpose ({terminal_fact.get('why', '')})"]
        )
        return [*problems, *failures], reported
    return [*problems, said], []
