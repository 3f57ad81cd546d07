"""The header floods of CVE-2025-48956, and how a server answered one.

A flood is refused when the server (or its ingress) answers it with a refusal of the request's head, or closes
the connection; it reached the app when it is answered as the same request without the flood is. Anything else
(an error status, a hang) harmed the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vllm_conformance.connection.client import BoundedClient, RequestTimeout, TransportFailure

# 400 (uvicorn's h11, nginx's "Request Header Or Cookie Too Large" is 400 too), 413, 431 (RFC 6585), 494 (nginx's
# own code, logged and sometimes sent).
REFUSALS = (400, 413, 431, 494)
FLOOD_TIMEOUT_S = 30.0

FLOODS: dict[str, dict[str, str]] = {
    "300 headers": {f"x-flood-{index}": "1" for index in range(300)},
    "a 64 KiB header value": {"x-flood": "a" * 65536},
}


@dataclass(frozen=True)
class FloodAnswer:
    said: str
    harmless: bool
    reached_the_app: bool


def flood_answer(client: BoundedClient, headers: dict[str, str], served: int) -> FloodAnswer:
    """GET /v1/models with ``headers`` added; ``served`` is its status without them."""
    try:
        answer = client.get("/v1/models", headers=headers, timeout=FLOOD_TIMEOUT_S)
    except RequestTimeout:
        return FloodAnswer(f"no answer within {FLOOD_TIMEOUT_S:g} s: the flood hung the request", False, False)
    except TransportFailure as closed:
        return FloodAnswer(f"refused by closing the connection ({closed})", True, False)
    if answer.status in REFUSALS:
        return FloodAnswer(f"refused: {answer.describe()}", True, False)
    if answer.status == served:
        return FloodAnswer(f"answered {answer.status}, as without it ({answer.describe()})", True, True)
    said = f"answered {answer.status}, neither refused nor served as without it ({answer.describe()})"
    return FloodAnswer(said, False, False)
