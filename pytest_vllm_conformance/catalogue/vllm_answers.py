"""How to read vLLM's answers: what the suites and the capture both interpret.

Pure functions over a response or a fact; no I/O, no verdicts. A suite
asserts on what they return, the capture records it, so the two never
read the same answer two different ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.release_facts import ScaleOutGate
from pytest_vllm_conformance.connection.client import Response

# A handler that ran answers with its result or refuses the body; a closed
# route is FastAPI's {"detail": ...} 404/405 or vLLM's 403 stub.
HANDLER_STATUSES = (200, 400, 422)
VALIDATION_COUNT = re.compile(r"^(\d+) validation errors?:")


# The error shapes a vLLM server answers with: OpenAI's envelope from its handlers, FastAPI's
# {"detail": "..."} from routing, and a bare {"error": "Unauthorized"} from the API-key middleware.
OPENAI_ENVELOPE, DETAIL_ENVELOPE, BARE_ENVELOPE = "openai", "detail", "bare"


def envelope(payload: Any) -> str | None:
    """Which error shape a decoded body or stream event has, None for none of them."""
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return OPENAI_ENVELOPE
    if isinstance(payload, dict) and isinstance(payload.get("detail"), str):
        return DETAIL_ENVELOPE
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return BARE_ENVELOPE
    return None


def error_of(payload: Any) -> dict[str, Any] | None:
    """The error a decoded body or stream event carries, as an object (a bare string becomes its message)."""
    found = payload.get("error") if isinstance(payload, dict) else None
    if found is None:
        return None
    return found if isinstance(found, dict) else {"message": str(found)}


def error(response: Response) -> dict[str, Any]:
    """The ``error`` object of vLLM's ErrorResponse envelope (message, type, param, code); empty if the body is none."""
    payload = response.json_or_none()
    return payload["error"] if envelope(payload) == OPENAI_ENVELOPE else {}


def reached_handler(response: Response) -> bool:
    """The request got past routing to the route's own handler (the 401 body's error is a bare string)."""
    return response.status in HANDLER_STATUSES and envelope(response.json_or_none()) != BARE_ENVELOPE


def scale_out_refusal_status(gate: ScaleOutGate, path: str) -> int | None:
    """The status a closed scale-out gate answers on ``path`` (fact ``scale_out_gate``)."""
    return gate.get("refusal_status_by_path", {}).get(path, gate.get("refusal_status"))


def tokenized(response: Response) -> list[int] | None:
    """The token ids of a ``/tokenize`` answer, or None when the answer is not one."""
    payload = response.json_or_none() if response.status == 200 else None
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    return tokens if isinstance(tokens, list) else None


def error_message(response: Response) -> str | None:
    """``error.message`` of vLLM's ErrorResponse envelope, if the body is one."""
    message = error(response).get("message")
    return message if isinstance(message, str) else None


@dataclass(frozen=True)
class ValidationListing:
    """A request-validation message: how many errors it reports, and how many it lists."""

    reported: int
    listed: int


def validation_listing(message: str) -> ValidationListing | None:
    """None for a single refusal (e.g. a list-length cap), which lists no errors."""
    count = VALIDATION_COUNT.match(message)
    if count is None:
        return None
    listed = sum(1 for line in message.splitlines()[1:] if line.startswith("  ") and "more error" not in line)
    return ValidationListing(reported=int(count.group(1)), listed=listed)
