"""What changed between two captured renderings of the corpus, conversation by conversation.

Data in, data out: ``changes`` takes the ``rendering`` sections of two
captures and returns one ``Change`` per conversation the model now sees
otherwise (another token, a refusal where there was a rendering), with the
first differing position shown as text on both sides. The profile diff
turns each into a difference that fails; captures of two corpora are not
compared, which the diff reports as undecided.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.observed.token_text import normalised, tokens_text

# Tokens shown before and from the first difference.
BEFORE, FROM = 2, 6


@dataclass(frozen=True)
class Change:
    id: str
    before: Any
    after: Any
    matters: bool
    why: str
    # Nothing compared (a capture of another corpus): neither a change nor its absence.
    undecided: bool = False


def _state(rendered: Mapping[str, Any]) -> str:
    return "rendered" if rendered.get("status") == 200 else f"refused {rendered.get('status')}"


def _sequence(rendered: Mapping[str, Any]) -> tuple[list[int | str], list[str] | None]:
    """The ids and token strings with each date collapsed to one mark."""
    spans = rendered.get("dates") or []
    ids = normalised(rendered.get("ids") or [], spans)
    tokens = rendered.get("tokens")
    strings = [str(t) for t in normalised(tokens, spans)] if isinstance(tokens, list) else None
    return ids, strings


def first_difference(before: Sequence[Any], after: Sequence[Any]) -> int | None:
    for position, (old, new) in enumerate(zip(before, after, strict=False)):
        if old != new:
            return position
    return None if len(before) == len(after) else min(len(before), len(after))


def _shown(ids: Sequence[Any], strings: Sequence[str] | None, at: int) -> str:
    start, end = max(0, at - BEFORE), at + FROM
    if strings is None:  # a version without token strings: the ids themselves
        return str(list(ids[start:end]))
    text = tokens_text(strings[start:end]) if strings[start:end] else ""
    return json.dumps(text, ensure_ascii=False) + ("" if end < len(strings) else " (end)")


def _compare(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> Change | None:
    if old.get("status") != 200 or new.get("status") != 200:
        if _state(old) == _state(new):
            return None
        refused = old if new.get("status") == 200 else new
        return Change(
            f"rendering of {name}: {_state(old)} -> {_state(new)}",
            _state(old),
            _state(new),
            True,
            f"the template {'now refuses' if refused is new else 'now renders'} this conversation "
            f"({refused.get('refused')}): clients sending it get another answer",
        )
    (old_ids, old_strings), (new_ids, new_strings) = _sequence(old), _sequence(new)
    at = first_difference(old_ids, new_ids)
    if at is None:
        return None
    shown_old, shown_new = _shown(old_ids, old_strings, at), _shown(new_ids, new_strings, at)
    return Change(
        f"rendering changed: {name}",
        f"{len(old_ids)} tokens",
        f"{len(new_ids)} tokens",
        True,
        f"first difference at token {at}: {shown_old} -> {shown_new}; the model sees other tokens for the "
        "same conversation (chat template, tokenizer or special tokens changed)",
    )


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """One change per conversation rendered otherwise; dates the template wrote compare equal."""
    if before.get("corpus") != after.get("corpus"):
        return [
            Change(
                "rendering corpus changed",
                before.get("corpus"),
                after.get("corpus"),
                False,
                "the captures rendered different corpora, so no conversation was compared; capture the baseline "
                "again to compare renderings",
                undecided=True,
            )
        ]
    old, new = before.get("conversations") or {}, after.get("conversations") or {}
    found = [_compare(name, old[name], new[name]) for name in old if name in new]
    return [change for change in found if change is not None]
