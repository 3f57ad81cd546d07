"""The rendering suite: a conversation sent on the chat path is rendered as ``/tokenize`` renders it.

Each conversation of the corpus is sent as a chat request (one token, greedy,
its prompt token ids asked back) and to ``/tokenize``: the prompt's length and
ids must match. A conversation both paths refuse agrees only when both answer
the same client error; one that does not reach a path tells nothing. The corpus
and what counts as out of reach are the capture's (observed/rendering_corpus.py,
observed/rendering.py): the suite judges the conversations the capture records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.observed.rendering import UNREACHABLE
from pytest_vllm_conformance.observed.rendering_corpus import CONVERSATIONS
from pytest_vllm_conformance.protocol.generation_routes import CHAT
from pytest_vllm_conformance.protocol.tokenize import answer_or_none, tokenized


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Conversation:
    name: str
    fields: dict[str, Any]

    @property
    def id(self) -> str:
        return self.name


@dataclass(frozen=True)
class Compared:
    """The chat path's prompt against /tokenize's: what differs, or why nothing could be compared."""

    problems: tuple[str, ...] = ()
    undecided: str | None = None


def _out_of_reach(status: int | None) -> bool:
    return status is None or status in UNREACHABLE


def refusal_compared(chat: int | None, tokenize: int | None, rendered: int | None) -> Compared:
    """A conversation one path or both did not render: ``chat`` and ``tokenize`` are their statuses (None: no
    answer), ``rendered`` the length /tokenize gave (None: it rendered nothing).

    An answer that says the route is out of reach (404, 503, no answer: ``UNREACHABLE``, as the capture reads
    it) tells nothing of the template: undecided. Only the same client error on both paths is the same refusal.
    """
    blocked = [
        f"{side} {'answered ' + str(status) if status is not None else 'got no answer'}"
        for side, status in (("the chat request", chat), ("/tokenize", tokenize))
        if status != 200 and _out_of_reach(status)
    ]
    if blocked:
        return Compared(undecided=" and ".join(blocked) + ": out of reach, which says nothing of the rendering")
    if rendered is not None:
        return Compared((f"/tokenize renders {rendered} tokens, but the chat request answered {chat}",))
    if chat == 200:
        return Compared((f"the chat request was served, but /tokenize answered {tokenize}: compared with nothing",))
    if chat == tokenize and chat is not None and 400 <= chat < 500:
        return Compared()  # both refuse it alike: the chat path agrees with /tokenize
    return Compared(
        (f"the chat request answered {chat} and /tokenize {tokenize}: only the same client error on both is agreement",)
    )


def chat_prompt_compared(client: BoundedClient, model: str, conversation: Conversation) -> Compared:
    """The chat request's prompt (its usage, and its prompt token ids) against /tokenize's rendering."""
    fields = dict(conversation.fields)
    if fields.get("tools"):  # rendered with the tools, and answerable without a tool-call parser
        fields["tool_choice"] = "none"
    rendering = answer_or_none(client, {"model": model, **conversation.fields})
    ids = tokenized(rendering) if rendering is not None else None
    body = {"model": model, **fields, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
    chat = client.answer_or_none("POST", CHAT.path, json_body=body)
    if chat is None or chat.status != 200 or ids is None:
        return refusal_compared(
            chat.status if chat is not None else None,
            rendering.status if rendering is not None else None,
            len(ids) if ids is not None else None,
        )
    answer = chat.json_or_none() or {}
    prompt = _number((answer.get("usage") or {}).get("prompt_tokens"))
    problems = [] if prompt == len(ids) else [f"usage.prompt_tokens {prompt}, /tokenize renders {len(ids)} tokens"]
    served_ids = answer.get("prompt_token_ids")
    if isinstance(served_ids, list) and served_ids != ids:
        at = next(
            (i for i, (a, b) in enumerate(zip(ids, served_ids, strict=False)) if a != b), min(len(ids), len(served_ids))
        )
        problems.append(
            f"prompt_token_ids differ from /tokenize's from token {at}: {served_ids[at : at + 4]} vs {ids[at : at + 4]}"
        )
    return Compared(tuple(problems))


# ---- the suite's cases -------------------------------------------------------------


def corpus_conversations(ctx: CaseContext) -> list[Conversation]:
    if not ctx.server.serves("POST", CHAT.path):
        raise NoCases(f"the server's route table does not list {CHAT}")
    return [Conversation(name, fields) for name, fields in CONVERSATIONS.items()]
