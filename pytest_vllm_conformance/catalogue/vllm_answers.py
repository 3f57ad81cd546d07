"""How to read vLLM's answers: what the suites and the capture both interpret.

Pure functions over a response or a fact; no I/O, no verdicts. A suite
asserts on what they return, the capture records it, so the two never
read the same answer two different ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_vllm_conformance.catalogue.release_facts import ScaleOutGate
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.protocol.error_envelope import BARE_ENVELOPE, envelope

# A handler that ran answers with its result or refuses the body; a closed
# route is FastAPI's {"detail": ...} 404/405 or vLLM's 403 stub.
HANDLER_STATUSES = (200, 400, 422)
VALIDATION_COUNT = re.compile(r"^(\d+) validation errors?:")


def reached_handler(response: Response) -> bool:
    """The request got past routing to the route's own handler (the 401 body's error is a bare string)."""
    return response.status in HANDLER_STATUSES and envelope(response.json_or_none()) != BARE_ENVELOPE


def scale_out_refusal_status(gate: ScaleOutGate, path: str) -> int | None:
    """The status a closed scale-out gate answers on ``path`` (fact ``scale_out_gate``)."""
    return gate.get("refusal_status_by_path", {}).get(path, gate.get("refusal_status"))


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
