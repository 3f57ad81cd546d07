"""An assistant turn's reasoning in a request's history: accepted or refused as documented, never left out silently.

Clients send the reasoning of earlier turns back (interleaved thinking); one
that sends it under a former field name (``reasoning_content``) to a release
that drops that name renders the history without it, and nothing fails. The
history is a tool loop (a question, an assistant turn with its reasoning and
a tool call, the tool's result), the turn templates that render reasoning
keep (Qwen3's drops the reasoning of turns before the last user message).

Each field name of fact ``reasoning_history_fields`` is one case. Where the
version renders it, the chat request's prompt must be ``/tokenize``'s
rendering of the same history under the current name; where the template
renders no reasoning at all (the history renders alike with and without it),
only the acceptance is checked, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol.error_envelope import error_message
from pytest_vllm_conformance.protocol.tokenize import answer_or_none, tokenized

from .answers import CHAT, tool_loop


@dataclass(frozen=True)
class HistoryCase:
    field: str
    documented: str  # rendered or refused (fact reasoning_history_fields)
    current: str  # the name the release reads (fact reasoning_output_field)

    @property
    def id(self) -> str:
        return self.field

    def __str__(self) -> str:
        return f"history reasoning under {self.field!r} ({self.documented} by the version)"


def history_cases(ctx: CaseContext) -> list[HistoryCase]:
    if not ctx.server.serves("POST", CHAT):
        raise NoCases(f"the server's route table does not list POST {CHAT}")
    current = ctx.expect.fact("reasoning_output_field")["field"]
    return [HistoryCase(name, how, current) for name, how in ctx.expect.fact("reasoning_history_fields").items()]


def _rendered(client: BoundedClient, model: str, field: str | None) -> list[int] | None:
    response = answer_or_none(client, {"model": model, **tool_loop(field)})
    return tokenized(response) if response is not None else None


def history_problems(client: BoundedClient, model: str, case: HistoryCase) -> tuple[list[str], str]:
    """What is wrong with the chat path's handling of the case's history, and a note on what was compared."""
    body = {**tool_loop(case.field), "model": model, "tool_choice": "none", "max_tokens": 1, "temperature": 0}
    chat = client.answer_or_none("POST", CHAT, json_body={**body, "return_token_ids": True})
    status = chat.status if chat is not None else None
    if case.documented == "refused":
        refused = status is not None and 400 <= status < 500
        said = f"{status} {(error_message(chat) or '')[:200]!r}" if chat is not None else "nothing"
        return ([] if refused else [f"the version refuses it, but the chat request answered {said}"]), ""
    if chat is None or status != 200:
        said = f"{status} {(error_message(chat) or chat.text)[:200]!r}" if chat is not None else "nothing"
        return [f"the version renders it, but the chat request answered {said}"], ""
    with_it, without = _rendered(client, model, case.current), _rendered(client, model, None)
    if with_it is None or without is None:
        return [f"/tokenize did not render the history (under {case.current!r}, and without reasoning)"], ""
    answer = chat.json_or_none() or {}
    served = answer.get("prompt_token_ids")
    prompt = (answer.get("usage") or {}).get("prompt_tokens")
    seen = served if isinstance(served, list) else None
    if with_it == without:
        note = "the chat template renders no reasoning history: only the acceptance was checked"
        return ([] if prompt == len(without) else [f"prompt_tokens {prompt}, /tokenize renders {len(without)}"]), note
    note = f"/tokenize renders {len(with_it)} tokens with the reasoning, {len(without)} without"
    if (seen == without) if seen is not None else prompt == len(without):
        return [f"rendered without the reasoning ({len(without)} tokens): the template's reasoning was left out"], note
    if (seen != with_it) if seen is not None else prompt != len(with_it):
        got = f"{len(seen)} prompt token ids" if seen is not None else f"prompt_tokens {prompt}"
        return [f"{got}: neither the rendering with the reasoning nor the one without"], note
    return [], note
