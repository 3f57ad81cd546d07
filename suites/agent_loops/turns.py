"""The agent loops' requests, asserted served: the chat tool loop's turns, a Responses stream, a Messages answer.

The chat tool loop is a forced call, its result fed back under the call's
id, a second forced call. The suite's fixtures (test_agent_loops.py) hand
these out bound to the run's client. Beside it: ``responses.py``, a streamed
Responses answer against its own final answer; ``responses_loop.py``, a
Responses tool loop's requests and turns; ``messages.py``, the Anthropic
Messages API's answer, stream and errors; ``forced_calls.py``, a forced
choice answered without a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response
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


def chat_turn(client: BoundedClient, model: str, function: str, history: list[dict[str, Any]] = MESSAGES) -> Turn:
    """A forced call of ``function`` after ``history``, asserted served."""
    response = client.post(CHAT, tool_request(model, named(function), messages=history))
    assert response.status == 200, (
        f"the loop's forced call of {function} after {len(history)} messages was not served: "
        f"{response.describe()} {response.text[:300]!r}"
    )
    answer = read_answer(response, streamed=False)
    message = ((response.json_or_none() or {}).get("choices") or [{}])[0].get("message") or {}
    calls = [call for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    return Turn(answer, [call.get("id") for call in calls], calls, message.get("content"))


def _streamed(response: Response, what: str, named_events: bool) -> sse.Stream:
    assert response.status == 200, f"{what} was not served: {response.describe()} {response.text[:300]!r}"
    assert not response.truncated, f"{what}: the stream passed the byte cap ({response.describe()})"
    return sse.parse(response.body, named_events=named_events)


def responses_stream(client: BoundedClient, body: dict[str, Any]) -> sse.Stream:
    """The parsed events of a streamed POST /v1/responses, asserted served."""
    response = client.post(RESPONSES.path, {**body, "stream": True})
    return _streamed(response, "the streamed Responses request", named_events=True)


def messages_answer(client: BoundedClient, body: dict[str, Any], stream: bool = False) -> Any:
    """A /v1/messages answer, asserted served (a dict, or a stream)."""
    response = client.post(MESSAGES_ROUTE.path, {**body, "stream": True} if stream else body)
    if stream:
        return _streamed(response, "the streamed messages request", named_events=True)
    assert response.status == 200, f"/v1/messages was not served: {response.describe()} {response.text[:300]!r}"
    answer = response.json_or_none()
    assert isinstance(answer, dict), f"/v1/messages answered no JSON object: {response.text[:300]!r}"
    return answer
