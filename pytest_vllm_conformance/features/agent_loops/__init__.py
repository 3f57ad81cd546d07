"""Agent loops: the protocols coding agents drive vLLM through, judged across a loop of turns and a stream.

``responses.py``: a streamed Responses answer against its own final answer.
``responses_loop.py``: a Responses tool loop's requests and turns.
``messages.py``: the Anthropic Messages API's answer, stream and errors.
Here: the suite's fixtures, and the chat tool loop (a forced call, its result
fed back under the call's id, a second forced call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.features.agent_loops import responses_loop
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.answer_reader import Answer, read_answer
from pytest_vllm_conformance.protocol.generation_routes import MESSAGES as MESSAGES_ROUTE
from pytest_vllm_conformance.protocol.generation_routes import RESPONSES
from pytest_vllm_conformance.protocol.tools import CHAT, MESSAGES, named, tool_request

# What the tool answers the first call with: any text a real tool would return.
TOOL_RESULT = '{"celsius": 21}'


@dataclass(frozen=True)
class Turn:
    answer: Answer
    call_ids: list[Any]  # each parsed call's id, as the client reads it (not necessarily a string)
    calls: list[dict[str, Any]]  # the message's tool_calls, as the client echoes them
    content: Any = None  # the message's content, echoed back as it came


def fed_back(turn: Turn, history: list[dict[str, Any]] = MESSAGES) -> list[dict[str, Any]]:
    """The history, the turn's assistant message with its calls, and one tool message per call under its id."""
    results = [{"role": "tool", "tool_call_id": call.get("id"), "content": TOOL_RESULT} for call in turn.calls]
    return [*history, {"role": "assistant", "content": turn.content, "tool_calls": turn.calls}, *results]


@pytest.fixture
def chat_turn(vllm_client, vllm_facts):
    """``chat_turn(function, history)``: a forced call of ``function`` after ``history``, asserted served."""

    def chat_turn(function: str, history: list[dict[str, Any]] = MESSAGES) -> Turn:
        response = vllm_client.post(CHAT, tool_request(vllm_facts.model, named(function), messages=history))
        assert response.status == 200, (
            f"the loop's forced call of {function} after {len(history)} messages was not served: "
            f"{response.describe()} {response.text[:300]!r}"
        )
        answer = read_answer(response, streamed=False)
        message = ((response.json_or_none() or {}).get("choices") or [{}])[0].get("message") or {}
        calls = [call for call in message.get("tool_calls") or [] if isinstance(call, dict)]
        return Turn(answer, [call.get("id") for call in calls], calls, message.get("content"))

    return chat_turn


@pytest.fixture(scope="module")
def item_prefixes(vllm_expect):
    return vllm_expect.fact("responses_item_id_prefixes")


@pytest.fixture(scope="module")
def error_envelopes(vllm_expect):
    return vllm_expect.fact("messages_error_envelopes")


def _streamed(response: Response, what: str, named_events: bool) -> sse.Stream:
    assert response.status == 200, f"{what} was not served: {response.describe()} {response.text[:300]!r}"
    assert not response.truncated, f"{what}: the stream passed the byte cap ({response.describe()})"
    return sse.parse(response.body, named_events=named_events)


@pytest.fixture
def responses_stream(vllm_client):
    """``responses_stream(body)``: the parsed events of a streamed POST /v1/responses, asserted served."""

    def responses_stream(body: dict[str, Any]) -> sse.Stream:
        response = vllm_client.post(RESPONSES.path, {**body, "stream": True})
        return _streamed(response, "the streamed Responses request", named_events=True)

    return responses_stream


@pytest.fixture
def messages_answer(vllm_client):
    """``messages_answer(body, stream=False)``: a /v1/messages answer, asserted served (a dict, or a stream)."""

    def messages_answer(body: dict[str, Any], stream: bool = False) -> Any:
        response = vllm_client.post(MESSAGES_ROUTE.path, {**body, "stream": True} if stream else body)
        if stream:
            return _streamed(response, "the streamed messages request", named_events=True)
        assert response.status == 200, f"/v1/messages was not served: {response.describe()} {response.text[:300]!r}"
        answer = response.json_or_none()
        assert isinstance(answer, dict), f"/v1/messages answered no JSON object: {response.text[:300]!r}"
        return answer

    return messages_answer


@pytest.fixture
def responses_turn(vllm_client):
    """``responses_turn(body, what)``: an unstreamed POST /v1/responses, asserted served (a responses_loop.Turn)."""

    def responses_turn(body: dict[str, Any], what: str) -> responses_loop.Turn:
        return responses_loop.read_turn(vllm_client.post("/v1/responses", body), what)

    return responses_turn


@pytest.fixture(scope="module")
def unknown_call_output(vllm_expect):
    return vllm_expect.fact("responses_unknown_call_output")


@pytest.fixture(scope="module")
def store_routes(vllm_expect):
    return vllm_expect.fact("responses_store_routes")


@pytest.fixture(scope="module")
def custom_tools(vllm_expect):
    return vllm_expect.fact("responses_custom_tools")
