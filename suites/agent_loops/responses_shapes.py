"""The request shapes agents send to /v1/responses, and each output item's status against the response's.

Codex and the Agents SDK send input items, not a string: the instructions as
system and developer messages, the conversation's earlier assistant turns
(echoed as the output items they came as, with their ids), images; and a
client reads an item's ``status`` to know whether it is whole, so a
``completed`` message inside an ``incomplete`` response tells it a cut answer
is finished. A reasoning model's deployment answers too: its reasoning items
may carry no status, and an answer cut while it still thinks holds reasoning
alone.
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


def answer_problem(output: list[dict[str, Any]], cut: bool) -> str | None:
    """Why an answer to the history request is no answer: it must hold a message item, or, cut at
    max_output_tokens before the model's reasoning was done, only reasoning items (a reasoning model's answer)."""
    kinds = [item.get("type") for item in output]
    if "message" in kinds or (cut and kinds and set(kinds) == {"reasoning"}):
        return None
    how = "cut at max_output_tokens" if cut else "not cut"
    return f"the history request was answered with no message item ({how}): only {kinds}"


def image_request(model: str) -> dict[str, Any]:
    content = [{"type": "input_image", "image_url": PIXEL}, {"type": "input_text", "text": "What is this?"}]
    return {"model": model, "input": [{"role": "user", "content": content}], "max_output_tokens": MAX_OUTPUT_TOKENS}


def invalid_request(model: str) -> dict[str, Any]:
    """An input that is neither a string nor a list of items."""
    return {"model": model, "input": 5, "max_output_tokens": MAX_OUTPUT_TOKENS}


def cut_request(model: str) -> dict[str, Any]:
    """An answer cut by max_output_tokens: an incomplete response."""
    return {"model": model, "input": "Count from one to fifty in words.", "max_output_tokens": 2, "temperature": 0}


# The output items whose status OpenAI's API requires (OutputMessage in OpenAI's OpenAPI description); on the
# others (reasoning, function_call, custom_tool_call) it is optional: vLLM 0.32 builds an unstreamed reasoning item
# with status None (build_response_output_items, vllm/entrypoints/openai/responses/utils.py at v0.32.0).
STATUS_REQUIRED = frozenset({"message"})
# The status OpenAI gives the item a cut answer ends with; vLLM's harmony path sends it too (harmony.py at v0.32.0).
CUT = "incomplete"


def status_problems(body: dict[str, Any], incomplete_item_status: str) -> list[str]:
    """Items whose status the response's own status contradicts.

    In a completed response every item is completed; in an incomplete one the
    last item is what was cut, so it is ``incomplete`` (OpenAI's) or what the
    release's facts say it reports instead (``incomplete_item_status``). An
    item without a status, where OpenAI's API makes it optional, says
    nothing to contradict.
    """
    status = body.get("status")
    items = [item for item in body.get("output") or [] if isinstance(item, dict)]
    problems = []
    for index, item in enumerate(items):
        due = {"completed"}
        if status == "incomplete" and index == len(items) - 1:
            due = {CUT, incomplete_item_status}
        said = item.get("status")
        if said is None and item.get("type") not in STATUS_REQUIRED:
            continue
        if said not in due:
            expected = " or ".join(repr(one) for one in sorted(due))
            problems.append(
                f"output[{index}] ({item.get('type')}) has status {said!r} in a response of status {status!r}, "
                f"expected {expected}"
            )
    return problems


def cut_item_status(body: dict[str, Any]) -> Any:
    """The status of the last output item of an answer (the item a cut answer was cut in), None without one."""
    items = [item for item in body.get("output") or [] if isinstance(item, dict)]
    return items[-1].get("status") if items else None


def with_status(body: dict[str, Any]) -> int:
    """How many of an answer's output items carry a status (the items status_problems judges)."""
    items = [item for item in body.get("output") or [] if isinstance(item, dict)]
    return sum(1 for item in items if item.get("status") is not None or item.get("type") in STATUS_REQUIRED)
