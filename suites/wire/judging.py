"""The wire checks' machinery: each request sent once, its answer judged, and through an ingress attributed.

A judge takes one answer and returns a ``Verdict``. Every judge needs the
answer readable as the kind it judges first (the expected status, a JSON
object, a stream within the byte cap): that precondition is ``unreadable``,
and a stream's judge states it once by its decorator, ``@stream_judge``,
whose function reads only the parsed events. ``judge_where_callers_go``
sends the request where callers send theirs and fails on what breaks
OpenAI's shape; through an ingress, the same request straight to the server
is judged too (``through_ingress.py``), to say whose the failure is and what
changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.observed.wire_requests import MAX_TOKENS, Exchange
from pytest_vllm_conformance.protocol import sse

from . import stream_framing, through_ingress
from .wire_rules import Verdict, WireRules

Judge = Callable[[Response], Verdict]


def unreadable(response: Response, status: int = 200, stream: bool = False) -> str:
    """Why the answer cannot be judged as the expected kind, or ""."""
    if response.status != status:
        return f"expected {status}, got {response.status}: {response.text[:200]!r}"
    if stream and response.truncated:
        return "the stream passed the byte cap"
    if not stream and not isinstance(response.json_or_none(), dict):
        return f"expected a JSON object: {response.text[:200]!r}"
    return ""


def stream_judge(what: str, *, named_events: bool = False) -> Callable[[Callable[[sse.Stream], Any]], Judge]:
    """Decorates ``check(events)`` into a judge of a 200 stream, failing under "<answer>: <what>".

    The precondition (a 200 stream within the byte cap) is the decorator's:
    an answer that fails it is failed on why, and ``check`` never sees it.
    ``check`` returns its problems, or ``(failures, reported)``.
    """

    def decorate(check: Callable[[sse.Stream], Any]) -> Judge:
        def judge(response: Response) -> Verdict:
            headline = f"{response.describe()}: {what}"
            if problem := unreadable(response, stream=True):
                return Verdict(headline, response.status, [problem])
            found = check(sse.parse(response.body, named_events=named_events))
            failures, reported = found if isinstance(found, tuple) else (found, [])
            return Verdict(headline, response.status, list(failures), list(reported))

        return judge

    return decorate


def framing(exchange: Exchange) -> Judge:
    """A judge of a stream's framing as the SDKs parse it (and, for chat, the role on each choice's first delta)."""

    @stream_judge("framed as OpenAI clients cannot parse")
    def judge(events: sse.Stream) -> list[str]:
        tokens = stream_framing.streamed_tokens(events, chat=exchange.chat) if exchange.logprobs else None
        problems = [*events.problems, *stream_framing.finish_problems(events)]
        problems += stream_framing.usage_problems(
            events, asked=exchange.include_usage, max_tokens=MAX_TOKENS, tokens_streamed=tokens
        )
        if exchange.logprobs:
            problems += stream_framing.logprob_problems(events, chat=exchange.chat)
        if exchange.chat:
            problems += stream_framing.role_problems(events)
        return problems

    return judge


def send(exchange: Exchange, model: str) -> Callable[[BoundedClient], Response]:
    """``exchange``'s request, as ``judged`` asks it of a client."""
    return lambda client: client.post(exchange.path, exchange.body(exchange.extra.get("model", model)))


def shape_judge(
    rules: WireRules, kind: str, status: int = 200, stream: bool = False, named_events: bool = False
) -> Judge:
    """A judge of the body (each event's, for a stream) as ``kind``.

    A Responses stream (``named_events``) has ``event:`` lines and no ``[DONE]``.
    """

    def judge(response: Response) -> Verdict:
        if problem := unreadable(response, status, stream):
            return Verdict(response.describe(), response.status, [problem])
        if stream:
            events = sse.parse(response.body, named_events=named_events).chunks()
            bodies = [(f"event {e.number} ", e.payload) for e in events]
        else:
            bodies = [("", response.json())]
        return rules.verdict(kind, bodies, f"{response.describe()}: not OpenAI's {kind} shape", response.status)

    return judge


def judge_where_callers_go(
    ask: Callable[[BoundedClient], Response],
    judge: Judge,
    *,
    ingress_client: BoundedClient,
    direct_client: BoundedClient,
    separate: bool,
    hidden: Callable[[Response], bool],
    record: Callable[[str, str], Any],
    judged: Callable[[int, str], Any],
) -> None:
    """The answer callers get to ``ask``'s request, judged by ``judge``: reports what is reported (``record``), and
    raises AssertionError on what breaks OpenAI's shape.

    Through a ``separate`` ingress, a request it does not expose (``hidden``) is not judged, and the server's answer
    to the same request is judged too, to attribute a failure and record what the ingress changed. ``judged``
    counts the answers judged, as the run's evidence.
    """
    answer = ask(ingress_client)
    if separate and hidden(answer):
        return  # no caller reaches it through the ingress: nothing to judge there
    through = judge(answer)
    judged(1, "answers")  # sent once per module: shape and framing judge the same answer
    message, figures = through.message(), []
    if through.reported:
        record("wire_report", "; ".join(through.reported))
        figures.append(f"{len(through.reported)} reported: " + "; ".join(through.reported))
    if separate:
        direct = judge(ask(direct_client))
        judged(1, "answers straight from the server")
        message = through_ingress.attributed(through, direct)
        figures = [f"through the ingress, {line}" for line in figures]
        if changed := through_ingress.changes(through, direct):
            record("wire_ingress_changes", "; ".join(changed))
            figures.append("the ingress against vLLM straight: " + "; ".join(changed))
    if figures:
        record("figures", "; ".join(figures))
    if through.failures:
        raise AssertionError(message)
