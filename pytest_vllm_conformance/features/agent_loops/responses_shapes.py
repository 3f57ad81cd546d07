"""The request shapes agents send to /v1/responses, and each output item's status against the response's.

Codex and the Agents SDK send input items, not a string: the instructions as
system and developer messages, the conversation's earlier assistant turns
(echoed as the output items they came as, with their ids), images; and a
client reads an item's ``status`` to know whether it is whole, so a
``completed`` message inside an ``incomplete`` response tells it a cut answer
is finished.
"""

from __future__ import annotations

from typing import Any

# A 1x1 PNG: an image any vision model reads, which a text-only model must refuse.
PIXEL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
MAX_OUTPUT_TOKENS = 8


def history_request(model: str) -> dict[str, Any]:
    """Instructions as system and developer messages, an earlier assistant turn echoed as its output item."""
    return {
        "model": model,
        "input": [
            {"type": "message", "role": "system", "content": "You answer briefly."},
            {"type": "message", "role": "developer", "content": "Answer in English."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
            {
                "type": "message",
                "id": "msg_earlier_turn",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello.", "annotations": []}],
            },
            {"type": "message", "role": "user", "content": "Say it again."},
        ],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "temperature": 0,
    }


def image_request(model: str) -> dict[str, Any]:
    content = [{"type": "input_image", "image_url": PIXEL}, {"type": "input_text", "text": "What is this?"}]
    return {"model": model, "input": [{"role": "user", "content": content}], "max_output_tokens": MAX_OUTPUT_TOKENS}


def invalid_request(model: str) -> dict[str, Any]:
    """An input that is neither a string nor a list of items."""
    return {"model": model, "input": 5, "max_output_tokens": MAX_OUTPUT_TOKENS}


def cut_request(model: str) -> dict[str, Any]:
    """An answer cut by max_output_tokens: an incomplete response."""
    return {"model": model, "input": "Count from one to fifty in words.", "max_output_tokens": 2, "temperature": 0}


def status_problems(body: dict[str, Any], incomplete_item_status: str) -> list[str]:
    """Items whose status the response's own status contradicts.

    In a completed response every item is completed; in an incomplete one the
    last item is what was cut, so it must be ``incomplete`` unless the
    release's facts say it reports ``completed`` (``incomplete_item_status``).
    """
    status = body.get("status")
    items = [item for item in body.get("output") or [] if isinstance(item, dict)]
    problems = []
    for index, item in enumerate(items):
        due = "completed"
        if status == "incomplete" and index == len(items) - 1:
            due = incomplete_item_status
        if item.get("status") != due:
            problems.append(
                f"output[{index}] ({item.get('type')}) has status {item.get('status')!r} in a response of status "
                f"{status!r}, expected {due!r}"
            )
    return problems
