"""Token accounting: what ``usage`` says against what was rendered and generated.

For one short greedy request per generation route the server serves
(completions, chat, Responses, Anthropic messages), streamed and not:
``prompt`` must be the length ``/tokenize`` gives for the same prompt,
``completion`` the number of tokens generated (counted from the returned
token ids; where a route returns none, a finish on the length limit means
exactly ``MAX_TOKENS``), ``total`` their sum (required where the version
sends it: every OpenAI route), and a stream's final usage the
non-streamed answer's. The same conversation sent on the chat path must be
rendered as ``/tokenize`` renders it: that is the rendering suite's
(``suites/rendering/chat_path.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.generation_routes import CHAT, COMPLETIONS, MESSAGES, RESPONSES
from pytest_vllm_conformance.protocol.tokenize import answer_or_none, tokenized

PROMPT = "Count the rivers of the city, one by one:"
MAX_TOKENS = 8
USER = [{"role": "user", "content": PROMPT}]


@dataclass(frozen=True)
class Usage:
    prompt: int | None
    completion: int | None
    total: int | None  # None where the answer carries none
    generated: int | None  # tokens counted in the answer itself; None when it cannot tell
    # Every release sends total_tokens on the OpenAI routes (UsageInfo.total_tokens, an int defaulting to 0, in
    # vllm/entrypoints/openai/engine/protocol.py at v0.28.0, vllm/entrypoints/serve/engine/protocol.py at
    # v0.29.0-v0.32.0; Responses' ResponseUsage requires it); Anthropic messages have no total.
    reports_total: bool = True
    unread: str = ""  # why the answer's usage could not be read, when it could not


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    body: Callable[[str, bool], dict[str, Any]]
    read: Callable[[Any, bool], Usage]  # the parsed answer (a JSON body, or the stream) -> usage
    chat: bool = True  # rendered through the chat template (else the prompt as text)
    named_events: bool = False

    def exchange(self, client: BoundedClient, model: str, streamed: bool) -> tuple[Usage | None, str]:
        response = client.answer_or_none("POST", self.path, json_body=self.body(model, streamed))
        if response is None or response.status != 200:
            return None, f"POST {self.path} answered {response.status if response else 'nothing'}"
        answer: Any = sse.parse(response.body, named_events=self.named_events) if streamed else response.json_or_none()
        return self.read(answer, streamed), ""


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _openai(usage: Any, generated: int | None) -> Usage:
    usage = usage if isinstance(usage, dict) else {}
    return Usage(
        _number(usage.get("prompt_tokens")),
        _number(usage.get("completion_tokens")),
        _number(usage.get("total_tokens")),
        generated,
    )


def _read_openai(answer: Any, streamed: bool) -> Usage:
    if not streamed:
        answer = answer if isinstance(answer, dict) else {}
        choice = (answer.get("choices") or [{}])[0]
        returned = choice.get("token_ids")
        return _openai(answer.get("usage"), len(returned) if isinstance(returned, list) else None)
    ids: list[int] = []
    usage = None
    for event in answer.chunks():
        usage = event.payload.get("usage") or usage
        for choice in event.choices():
            ids += choice.get("token_ids") or []
    return _openai(usage, len(ids) if ids else None)


# The closing events of a streamed Responses answer that carry its usage: OpenAI ends a cut answer with
# response.incomplete, vLLM 0.28-0.32 with response.completed (fact wire_responses_terminal_event); the wire suite
# judges which one is due.
CLOSING = (sse.TERMINAL_FOR_STATUS["completed"], sse.TERMINAL_FOR_STATUS["incomplete"])


def _read_responses(answer: Any, streamed: bool) -> Usage:
    if streamed:
        done = [e.payload.get("response") for e in answer.chunks() if e.payload.get("type") in CLOSING]
        if not done:
            return Usage(None, None, None, None, unread=f"the stream has no closing event ({' or '.join(CLOSING)})")
        answer = done[-1]
    answer = answer if isinstance(answer, dict) else {}
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    cut = (answer.get("incomplete_details") or {}).get("reason") == "max_output_tokens"
    return Usage(
        _number(usage.get("input_tokens")),
        _number(usage.get("output_tokens")),
        _number(usage.get("total_tokens")),
        MAX_TOKENS if cut else None,
    )


def _read_messages(answer: Any, streamed: bool) -> Usage:
    if streamed:  # message_start carries the input count, the last message_delta the output count and stop reason
        usage: dict[str, Any] = {}
        stop = None
        for event in answer.chunks():
            usage.update((event.payload.get("message") or {}).get("usage") or {})
            usage.update(event.payload.get("usage") or {})
            stop = (event.payload.get("delta") or {}).get("stop_reason") or stop
    else:
        answer = answer if isinstance(answer, dict) else {}
        usage, stop = answer.get("usage") or {}, answer.get("stop_reason")
    return Usage(
        _number(usage.get("input_tokens")),
        _number(usage.get("output_tokens")),
        None,
        MAX_TOKENS if stop == "max_tokens" else None,
        reports_total=False,
    )


def _openai_body(prompt: dict[str, Any]) -> Callable[[str, bool], dict[str, Any]]:
    def body(model: str, streamed: bool) -> dict[str, Any]:
        extra = {"stream": True, "stream_options": {"include_usage": True}} if streamed else {}
        return {"model": model, **prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True, **extra}

    return body


ROUTES = (
    Route(COMPLETIONS.name, COMPLETIONS.path, _openai_body({"prompt": PROMPT}), _read_openai, chat=COMPLETIONS.chat),
    Route(CHAT.name, CHAT.path, _openai_body({"messages": USER}), _read_openai),
    Route(
        RESPONSES.name,
        RESPONSES.path,
        lambda model, streamed: {
            "model": model,
            "input": PROMPT,
            "max_output_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": streamed,
        },
        _read_responses,
        named_events=RESPONSES.named_events,
    ),
    Route(
        MESSAGES.name,
        MESSAGES.path,
        lambda model, streamed: {
            "model": model,
            "messages": USER,
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": streamed,
        },
        _read_messages,
        named_events=MESSAGES.named_events,
    ),
)


def rendered_length(client: BoundedClient, model: str, route: Route) -> int | None:
    fields: dict[str, Any] = {"messages": USER} if route.chat else {"prompt": PROMPT}
    response = answer_or_none(client, {"model": model, **fields})
    ids = tokenized(response) if response is not None else None
    return len(ids) if ids is not None else None


def usage_problems(usage: Usage, rendered: int | None) -> list[str]:
    """What does not add up in one answer's usage."""
    if usage.unread:
        return [f"{usage.unread}: no usage to check"]
    problems = []
    if rendered is None:
        problems.append("/tokenize gave no length for the same prompt, so prompt_tokens was compared with nothing")
    elif usage.prompt != rendered:
        problems.append(f"prompt_tokens {usage.prompt}, but /tokenize renders the same prompt as {rendered} tokens")
    if usage.generated is None:
        problems.append("the answer shows neither its token ids nor a finish on the length limit: generated unknown")
    elif usage.completion != usage.generated:
        problems.append(f"completion_tokens {usage.completion}, but {usage.generated} tokens were generated")
    if usage.reports_total and usage.total is None:
        problems.append("no total_tokens, which the version sends on this route")
    if usage.total is not None and None not in (usage.prompt, usage.completion):
        if usage.total != usage.prompt + usage.completion:  # type: ignore[operator]
            problems.append(f"total_tokens {usage.total} is not prompt {usage.prompt} + completion {usage.completion}")
    return problems


def stream_problems(streamed: Usage, whole: Usage | None, why: str) -> list[str]:
    """A stream's final usage against the same greedy request unstreamed."""
    if whole is None:
        return [f"the same request unstreamed was not answered ({why}): the stream's usage was compared with nothing"]
    pairs = (("prompt", streamed.prompt, whole.prompt), ("completion", streamed.completion, whole.completion))
    return [
        f"the stream's final {name} count is {mine}, the same request unstreamed says {theirs}"
        for name, mine, theirs in pairs
        if mine != theirs
    ]


@dataclass(frozen=True)
class AccountingCase:
    route: Route
    streamed: bool

    @property
    def id(self) -> str:
        return f"{self.route.name}{' streamed' if self.streamed else ''}"

    def __str__(self) -> str:
        return f"POST {self.route.path}{' streamed' if self.streamed else ''}"


def accounting_problems(client: BoundedClient, model: str, case: AccountingCase) -> list[str]:
    usage, why = case.route.exchange(client, model, case.streamed)
    if usage is None:
        return [f"{why}: no usage to check"]
    problems = usage_problems(usage, rendered_length(client, model, case.route))
    if case.streamed:
        whole, why = case.route.exchange(client, model, False)
        problems += stream_problems(usage, whole, why)
    return problems


# ---- the suite's cases -------------------------------------------------------------


def accounting_cases(ctx: CaseContext) -> list[AccountingCase]:
    """Each generation route the server serves, plain and streamed."""
    facts = ctx.server
    served = [route for route in ROUTES if facts.serves("POST", route.path)]
    if not served:
        raise NoCases(f"the server's route table lists none of {[route.path for route in ROUTES]}")
    return [AccountingCase(route, streamed) for route in served for streamed in (False, True)]
