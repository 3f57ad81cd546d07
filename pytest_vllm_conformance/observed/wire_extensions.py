"""The fields a server adds to OpenAI's generation answers, observed for the capture.

An upgrade can drop a vLLM extension (``token_ids``, ``stop_reason``,
``prompt_logprobs``, ...) that a pipeline reads without a word at the API;
profile_diff compares the sets of two captures. The fields are found by the
wire checks' own judgement (``schemas.judge``): whatever OpenAI's schema of
the answer does not define, named as the contract data names it
(``choices.*.token_ids``). Six short greedy requests: a completion, a chat
completion and a Responses answer, each plain and streamed (with the usage
chunk where there is one).
"""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, TransportFailure
from pytest_vllm_conformance.observed.wire_requests import RESPONSES, Exchange
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.generation_routes import CHAT, COMPLETIONS
from pytest_vllm_conformance.protocol.schemas import judge

EXCHANGES = (
    Exchange("capture", COMPLETIONS.path, "completion"),
    Exchange("capture stream", COMPLETIONS.path, "completion_chunk", stream=True, include_usage=True),
    Exchange("capture", CHAT.path, "chat_completion"),
    Exchange("capture stream", CHAT.path, "chat_chunk", stream=True, include_usage=True),
    Exchange("capture", RESPONSES, "responses"),
    Exchange("capture stream", RESPONSES, "responses_event", stream=True),
)


def _bodies(client: BoundedClient, exchange: Exchange, model: str) -> tuple[list[Any] | None, str]:
    """The answer's JSON bodies (each event's, for a stream), or None and what was answered instead."""
    try:
        response = client.post(exchange.path, exchange.body(model))
    except TransportFailure as exc:  # RequestTimeout is one
        return None, f"{exchange} got no answer ({type(exc).__name__})"
    if response.status != 200 or response.truncated:
        return None, f"{exchange} answered {response.status}{' (truncated)' if response.truncated else ''}"
    if exchange.stream:
        events = [event.payload for event in sse.parse(response.body, named_events=exchange.path == RESPONSES).chunks()]
        # No event shows no field: recorded as unobserved, never as every field gone.
        return (events, "") if events else (None, f"{exchange} answered 200 with no JSON event")
    payload = response.json_or_none()
    return ([payload], "") if isinstance(payload, dict) else (None, f"{exchange} answered 200 without JSON")


def observe_extensions(client: BoundedClient, model: str, unobserved: dict[str, str]) -> dict[str, list[str]] | None:
    """The ``wire_extensions`` section of a capture: answer kind -> sorted fields OpenAI does not define.

    A kind whose request was not answered is left out (and named in
    ``unobserved``); None when none was answered.
    """
    observed: dict[str, list[str]] = {}
    unanswered = []
    for exchange in EXCHANGES:
        bodies, why = _bodies(client, exchange, model)
        if bodies is None:
            unanswered.append(why)
            continue
        fields = {finding.pattern for body in bodies for finding in judge(exchange.answer, body).extensions}
        observed[exchange.answer] = sorted(fields)
    if unanswered:
        unobserved["wire_extensions"] = "; ".join(unanswered)
    return observed or None
