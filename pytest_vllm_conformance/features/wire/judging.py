"""The wire suite's machinery: each request sent once, its answer judged, and through an ingress attributed.

A judge takes one answer and returns a ``Verdict``. Every judge needs the
answer readable as the kind it judges first (the expected status, a JSON
object, a stream within the byte cap): that precondition is ``unreadable``,
and a stream's judge states it once by its decorator, ``@stream_judge``,
whose function reads only the parsed events. ``judged`` sends the request
where callers send theirs and fails on what breaks OpenAI's shape; through
an ingress, the same request straight to the server is judged too
(features/wire/through_ingress.py), to say whose the failure is and what changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.features import wire
from pytest_vllm_conformance.features.wire import Exchange, Verdict, through_ingress
from pytest_vllm_conformance.features.wire import stream as sse

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
        tokens = sse.streamed_tokens(events, chat=exchange.chat) if exchange.logprobs else None
        problems = [*events.problems, *sse.finish_problems(events)]
        problems += sse.usage_problems(
            events, asked=exchange.include_usage, max_tokens=wire.MAX_TOKENS, tokens_streamed=tokens
        )
        if exchange.logprobs:
            problems += sse.logprob_problems(events, chat=exchange.chat)
        if exchange.chat:
            problems += sse.role_problems(events)
        return problems

    return judge


def send(exchange: Exchange, model: str) -> Callable[[BoundedClient], Response]:
    """``exchange``'s request, as ``judged`` asks it of a client."""
    return lambda client: client.post(exchange.path, exchange.body(exchange.extra.get("model", model)))


# The suite's fixtures (suites/test_wire.py imports them).


@pytest.fixture(scope="module")
def rules(vllm_expect):
    return wire.rules_for(vllm_expect)


@pytest.fixture(scope="module")
def sent():
    """``sent(client, what, ask)``: ``ask(client)``, once per module and client (shape and framing judge one answer)."""
    seen = {}

    def sent(client, what, ask):
        if (id(client), what) not in seen:
            seen[id(client), what] = ask(client)
        return seen[id(client), what]

    return sent


@pytest.fixture
def judged(
    sent, vllm_ingress_client, vllm_direct_client, vllm_ingress_exposure, vllm_not_exposed, vllm_record, vllm_evidence
):
    """``judged(what, ask, judge)``: the answer callers get to ``ask(client)``'s request, judged by ``judge``.

    Reports what is reported; fails on what breaks OpenAI's shape. Through
    an ingress, the server's answer to the same request is judged too, to
    attribute a failure and record what the ingress changed.
    """

    def judged(what, ask, judge):
        def ask_once(client):
            return sent(client, what, ask)

        answer = ask_once(vllm_ingress_client)
        separate = vllm_ingress_exposure.separate
        if separate and vllm_not_exposed(what, ask_once, answer):
            return  # no caller reaches it through the ingress: nothing to judge there
        through = judge(answer)
        vllm_evidence.judged(1, "answers")  # sent once per module: shape and framing judge the same answer
        message, figures = through.message(), []
        if through.reported:
            vllm_record("wire_report", "; ".join(through.reported))
            figures.append(f"{len(through.reported)} reported: " + "; ".join(through.reported))
        if separate:
            direct = judge(ask_once(vllm_direct_client))
            vllm_evidence.judged(1, "answers straight from the server")
            message = through_ingress.attributed(through, direct)
            figures = [f"through the ingress, {line}" for line in figures]
            if changed := through_ingress.changes(through, direct):
                vllm_record("wire_ingress_changes", "; ".join(changed))
                figures.append("the ingress against vLLM straight: " + "; ".join(changed))
        if figures:
            vllm_record("figures", "; ".join(figures))
        assert not through.failures, message

    return judged


@pytest.fixture
def shape(rules):
    """``shape(kind, status=200, stream=False)``: a judge of the body (each event's, for a stream) as ``kind``.

    A Responses stream (``named_events``) has ``event:`` lines and no ``[DONE]``.
    """

    def shape(kind, status=200, stream=False, named_events=False):
        def judge(response):
            if problem := unreadable(response, status, stream):
                return Verdict(response.describe(), response.status, [problem])
            if stream:
                events = sse.parse(response.body, named_events=named_events).chunks()
                bodies = [(f"event {e.number} ", e.payload) for e in events]
            else:
                bodies = [("", response.json())]
            return rules.verdict(kind, bodies, f"{response.describe()}: not OpenAI's {kind} shape", response.status)

        return judge

    return shape
