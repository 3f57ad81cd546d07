"""An answer as the official SDKs parse it, a reasoning model's included: what its content must hold.

A reasoning model's answer cut at max_tokens while it still thinks holds only
its reasoning: chat's content is null beside the reasoning field (vLLM's
``reasoning``, formerly ``reasoning_content``: fact ``reasoning_output_field``),
Anthropic's content holds thinking blocks and no text, with stop_reason
max_tokens. Anywhere else, no text is a lost answer.
"""

from __future__ import annotations

from typing import Any

# Anthropic's content blocks of an answer without tools, each with the field that holds its text: the text, and a
# reasoning model's thinking before it (redacted: encrypted, as Anthropic's API and vLLM's protocol define it).
ANSWER_BLOCKS = {"text": "text", "thinking": "thinking", "redacted_thinking": "data"}


def content_problem(message: Any, finish_reason: Any, reasoning_field: dict[str, Any]) -> str | None:
    """Why a chat message's content is no answer (None when it is text, or null in an answer cut while reasoning).

    ``message`` is the SDK's parsed message; its reasoning is read under the release's field and former names."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return None
    names = (reasoning_field["field"], *reasoning_field["former"])
    thought = {name: getattr(message, name, None) for name in names}
    if content is None and finish_reason == "length" and any(isinstance(t, str) and t for t in thought.values()):
        return None
    return (
        f"the answer's content is {content!r} (finish_reason {finish_reason!r}, reasoning {thought}): only an "
        "answer cut at max_tokens while it reasons may have no content"
    )


def blocks_problem(message: Any, what: str) -> str | None:
    """Why an Anthropic message's content blocks are no answer: text blocks (thinking blocks before them), or
    thinking alone where the answer was cut at max_tokens; each block's text a string."""
    blocks = list(getattr(message, "content", None) or [])
    kinds = [getattr(block, "type", None) for block in blocks]
    if not kinds or not set(kinds) <= set(ANSWER_BLOCKS):
        return f"the {what}'s content blocks are {kinds}, not text"
    stop = getattr(message, "stop_reason", None)
    if "text" not in kinds and stop != "max_tokens":
        return f"the {what} holds only {kinds} blocks and stopped with {stop!r}: no text, yet not cut at max_tokens"
    for block, kind in zip(blocks, kinds, strict=True):
        said = getattr(block, ANSWER_BLOCKS[str(kind)], None)
        if not isinstance(said, str):
            return f"a {kind} block of the {what} holds {said!r}, not text"
    return None


def text_of(message: Any) -> str:
    """The text of an Anthropic message's text blocks (its thinking left out)."""
    return "".join(block.text for block in getattr(message, "content", None) or [] if block.type == "text")
