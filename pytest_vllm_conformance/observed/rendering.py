"""Render the corpus on a server through ``/tokenize``, for the capture.

Each conversation is kept with its status: rendered (ids, token strings
where the version returns them, and the token ranges of any date the
template wrote, which the diff compares as one ``<date>`` mark), or refused
by the template (the status and vLLM's message), never dropped. The corpus is
``rendering_corpus.py``; ``rendering_drift.py`` compares two captured renderings,
and the rendering suite (suites/rendering/) sends the same corpus on the chat path.
"""

from __future__ import annotations

import datetime
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient, Response
from pytest_vllm_conformance.observed.rendering_corpus import CONVERSATIONS, CORPUS_VERSION
from pytest_vllm_conformance.observed.token_text import date_spans, date_texts
from pytest_vllm_conformance.protocol.error_envelope import error_message
from pytest_vllm_conformance.protocol.tokenize import answer_or_none, tokenized

# Answers that say the route is out of reach, not what the template does with a conversation.
UNREACHABLE = frozenset({401, 403, 404, 405, 407, 429, 502, 503, 504})
REFUSAL_CHARS = 300
DATES_NOTE = (
    "dates the template wrote (the capture day or a day either side, as 26 Jul 2024, 2024-07-26, ...) "
    "are compared as one <date> mark"
)


def _token_strings(response: Response) -> list[str] | None:
    payload = response.json_or_none()
    strings = payload.get("token_strs") if isinstance(payload, dict) else None
    return strings if isinstance(strings, list) and all(isinstance(s, str) for s in strings) else None


def render_conversation(client: BoundedClient, model: str, fields: dict[str, Any], dates: list[str]) -> dict[str, Any]:
    response = answer_or_none(client, {"model": model, **fields, "return_token_strs": True})
    if response is None:
        return {"status": None, "refused": "no answer"}
    ids = tokenized(response)
    if ids is None:
        message = error_message(response) or response.text
        return {"status": response.status, "refused": message[:REFUSAL_CHARS]}
    strings = _token_strings(response)
    spans = date_spans(strings, dates) if strings is not None and len(strings) == len(ids) else []
    return {"status": 200, "ids": ids, "tokens": strings, "dates": [list(span) for span in spans]}


def render_corpus(
    client: BoundedClient, model: str, unobserved: dict[str, str], now: datetime.datetime | None = None
) -> dict[str, Any] | None:
    """Every conversation of the corpus as the server renders it; None when /tokenize is out of reach."""
    dates = date_texts(now or datetime.datetime.now(datetime.UTC))
    rendered = {name: render_conversation(client, model, fields, dates) for name, fields in CONVERSATIONS.items()}
    blocked = [(name, r["status"]) for name, r in rendered.items() if r["status"] is None or r["status"] in UNREACHABLE]
    if blocked:
        name, status = blocked[0]
        unobserved["rendering"] = f"POST /tokenize ({name}) " + (
            f"answered {status}" if status is not None else "got no answer"
        )
        return None
    return {"corpus": CORPUS_VERSION, "dates": DATES_NOTE, "conversations": rendered}
