"""The one reader of vLLM's error answers: which envelope a body or stream event has, and the error it carries."""

from __future__ import annotations

from typing import Any

from pytest_vllm_conformance.connection.client import Response

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


def error_message(response: Response) -> str | None:
    """``error.message`` of vLLM's ErrorResponse envelope, if the body is one."""
    message = error(response).get("message")
    return message if isinstance(message, str) else None
