"""What the fleet_entry suite sends through the entry, and what it reads back.

Each replica keeps some state in its own process: the Responses store (a dict
in the API server, with VLLM_ENABLE_RESPONSES_API_STORE=1) and the prefix
cache. An entry that spreads requests over replicas without affinity loses
that state for the caller: a stored response is "not found" when the read
lands on another replica, and a repeated prefix is computed again. These
helpers make the requests and return what each attempt saw; the suite judges.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import prometheus as metrics
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS, RESPONSES

# A caller's session, for entries that hash on a header (nginx `hash $http_x_session_affinity`,
# Envoy's header hash policy). Entries that route by cookie or by response id ignore it.
SESSION_HEADER = "X-Session-Affinity"
SESSION_VALUE = "vllm-conformance-fleet-entry"


@dataclass(frozen=True)
class Attempt:
    """One request through the entry: its status and what it showed."""

    status: int
    seen: Any
    detail: str


def create_stored_response(entry: BoundedClient, model: str) -> tuple[Attempt, str | None]:
    body = {"model": model, "input": "Say hello.", "store": True, "max_output_tokens": 4}
    response = entry.post(RESPONSES.path, body, headers={SESSION_HEADER: SESSION_VALUE})
    data = response.json_or_none()
    response_id = data.get("id") if isinstance(data, dict) else None
    return Attempt(response.status, response_id, response.describe()), response_id if response.status == 200 else None


def read_stored_response(entry: BoundedClient, response_id: str, reads: int) -> list[Attempt]:
    attempts = []
    for _ in range(reads):
        response = entry.get(f"/v1/responses/{response_id}", headers={SESSION_HEADER: SESSION_VALUE})
        data = response.json_or_none()
        found = isinstance(data, dict) and data.get("id") == response_id
        attempts.append(Attempt(response.status, found, f"{response.describe()} {response.text[:160]!r}"))
    return attempts


def prefix_prompt(tokens: int) -> list[int]:
    """A fixed prompt of ``tokens`` token ids, valid in any vocabulary of 300 ids or more."""
    return [10 + (index * 37) % 280 for index in range(tokens)]


def cached_tokens_of(entry: BoundedClient, model: str, prompt: list[int]) -> Attempt:
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    response = entry.post(COMPLETIONS.path, body, headers={SESSION_HEADER: SESSION_VALUE})
    data = response.json_or_none()
    usage = data.get("usage") if isinstance(data, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Attempt(response.status, cached, f"{response.describe()} usage {usage}")


def summary(attempts: list[Attempt]) -> str:
    return ", ".join(f"{index + 1}: {attempt.status} {attempt.seen}" for index, attempt in enumerate(attempts))


@dataclass(frozen=True)
class Reach:
    """What a replica's own counter of finished requests did while a burst went through the entry."""

    sent: int
    answered: int  # requests the entry answered 200
    before: float | None  # None: the replica's page has no such counter (or could not be read)
    after: float | None
    problem: str = ""

    @property
    def served(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before


def finished_requests(replica: BoundedClient, metrics_path: str, counter: str) -> tuple[float | None, str]:
    """The replica's count of finished requests, or None and why not."""
    reading = metrics.read(replica, metrics_path)
    if reading.problem:
        return None, f"GET {metrics_path} on the replica: {reading.problem}"
    total = reading.total(counter)
    return total, "" if total is not None else f"the replica's {metrics_path} has no {counter}"


def burst_reaches(
    entry: BoundedClient, replica: BoundedClient, model: str, *, metrics_path: str, counter: str, requests: int
) -> Reach:
    """Send ``requests`` one-token completions through the entry, each of its own session, and read how many
    the replica finished meanwhile (its caller keeps every other test off the replica)."""
    before, problem = finished_requests(replica, metrics_path, counter)
    answered = 0
    burst = uuid.uuid4().hex[:8]
    for number in range(requests):
        body = {"model": model, "prompt": "Hello", "max_tokens": 1}
        session = f"vllm-conformance-reach-{burst}-{number}"
        answered += entry.post(COMPLETIONS.path, body, headers={SESSION_HEADER: session}).status == 200
    after, problem_after = finished_requests(replica, metrics_path, counter)
    return Reach(requests, answered, before, after, problem or problem_after)
