"""Errors as clients meet them: refused before a stream starts, and each refusal's status and envelope by version.

Two tables of contract data drive it. ``wire_prestream_errors``: streamed
requests that fail validation, which OpenAI clients expect refused with an
HTTP status and a JSON error before any event. ``wire_error_probes``: one
request per way to be wrong (unknown model, unknown route, wrong method,
malformed JSON, wrong content type, invalid parameter, missing key) and the
status, envelope, ``error.type`` and ``error.param`` the version answers
with. Where vLLM answers otherwise than OpenAI on purpose (FastAPI's
``{"detail": ...}``, a 200 and an error event), the data says so and the
answer is reported, failed only under ``wire.strict_openai``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.observed.wire_requests import Exchange
from pytest_vllm_conformance.protocol import error_envelope, sse

from .wire_rules import Verdict, WireRules

# Who breaks when a validation error arrives as 200 and an error event, quoted in failures.
PRESTREAM_BREAKS = (
    "clients that check the status before reading a stream (the OpenAI SDKs raise on an error status; "
    "gateways retry, fail over or count errors by it) take the 200 for success and meet the error inside the stream"
)


@dataclass(frozen=True)
class PreStreamProbe:
    """A streamed request the server must refuse before streaming (contract data ``wire_prestream_errors``)."""

    name: str
    path: str
    status: int
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)
    prompt_over_limit: bool = False
    vllm_sends: str = ""  # what the version does instead, by the contract data ("" when it refuses as expected)
    why: str = ""

    @property
    def id(self) -> str:
        return f"{self.path} {self.name}"

    def __str__(self) -> str:
        return self.id

    def body(self, model: str, max_model_len: int | None) -> dict[str, Any]:
        body = Exchange(self.name, self.path, "error", stream=True).body(model)
        if self.prompt_over_limit:
            body["prompt"] = [PROMPT_TOKEN_ID] * ((max_model_len or LIMIT_UNKNOWN) + 1)
        return {**body, **self.overrides}


# Any id below every vocabulary's size; a prompt of them is one token each, whatever the tokenizer.
PROMPT_TOKEN_ID = 10
# With no max_model_len published, a prompt over any context this plugin can be pointed at.
LIMIT_UNKNOWN = 1 << 20


def prestream_probes(ctx: CaseContext) -> list[PreStreamProbe]:
    return [
        PreStreamProbe(
            entry["name"],
            entry["path"],
            entry["status"],
            entry["body"],
            entry.get("prompt_over_limit", False),
            entry.get("vllm_sends", ""),
            entry.get("why", ""),
        )
        for entry in ctx.expect.fact("wire_prestream_errors")
        if ctx.server.serves("POST", entry["path"])
    ]


STREAM_ERROR_EVENT = "200 and an error event"


def prestream_answer(response: Response) -> str:
    """How a refused streamed request was answered: its status with a JSON error, 200 and an error event, or else."""
    content_type = response.headers.get("content-type", "")
    payload = response.json_or_none()
    if response.status != 200 and "json" in content_type and isinstance(payload, dict):
        openai = error_envelope.envelope(payload) == error_envelope.OPENAI_ENVELOPE
        return f"{response.status}" if openai else f"{response.status} without error"
    first = next(iter(sse.parse(response.body).events), None) if "event-stream" in content_type else None
    if response.status == 200 and first is not None and error_envelope.error_of(first.payload) is not None:
        return STREAM_ERROR_EVENT
    return f"{response.status} {content_type or 'no content type'}"


def prestream_verdict(rules: WireRules, probe: PreStreamProbe, response: Response) -> Verdict:
    """The probe's answer: refused before any event with the probe's status, or what the version is known to do."""
    judged = Verdict(response.describe(), response.status)
    seen = prestream_answer(response)
    if seen == str(probe.status):
        return judged
    said = (
        f"a streamed request that fails validation ({probe.name}) must be refused with "
        f"{probe.status} and a JSON error body before any event, got {seen}: {response.text[:200]!r}; "
        f"{PRESTREAM_BREAKS}"
    )
    judged.departures["answer"] = seen
    if probe.vllm_sends and seen == probe.vllm_sends:
        known = f"{probe.id}: {rules.version_label} sends {seen} ({probe.why}); {PRESTREAM_BREAKS}"
        failures, reported = rules.departures([said], [known])
        judged.failures += failures
        judged.reported += reported
        return judged
    judged.failures.append(said)
    return judged


# What a client reading OpenAI's envelope gets from each of vLLM's other error shapes, quoted in reports.
ENVELOPES = {
    "openai": "OpenAI's error envelope",
    "detail": 'FastAPI\'s {"detail": ...}: clients that read error.message get nothing',
    "bare": '{"error": "..."} with a string: clients that read error.message get nothing',
}


@dataclass(frozen=True)
class ErrorProbe:
    """One way for a request to be wrong, and the answer the version gives it (contract data ``wire_error_probes``)."""

    name: str
    method: str
    path: str
    status: int
    envelope: str  # a key of ENVELOPES
    expected: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)  # error.type, error.param
    body: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    raw: str | None = None  # a body sent as it is, with ``content_type``
    content_type: str = "application/json"
    without_key: bool = False

    @property
    def id(self) -> str:
        return f"{self.name} ({self.method} {self.path})"

    def __str__(self) -> str:
        return self.id

    def request(self, model: str) -> dict[str, Any]:
        """Keyword arguments of the bounded client's ``request``."""
        if self.raw is not None:
            return {
                "content": self.raw.encode(),
                "headers": {"Content-Type": self.content_type},
                "auth": not self.without_key,
            }
        if self.body is None:
            return {"auth": not self.without_key}
        exchange = Exchange(self.name, self.path, "error")
        return {"json_body": {**exchange.body(model), **self.body}, "auth": not self.without_key}


def error_probes(ctx: CaseContext) -> list[ErrorProbe]:
    probes = []
    for entry in ctx.expect.fact("wire_error_probes"):
        if entry.get("without_key") and not ctx.settings.api_key:
            continue  # the server under test is only refused without a key when it was given one
        if entry.get("served") and not ctx.server.serves(entry["served"], entry["path"]):
            continue
        probes.append(
            ErrorProbe(
                name=entry["name"],
                method=entry["method"],
                path=entry["path"],
                status=entry["status"],
                envelope=entry["envelope"],
                expected={key: entry[key] for key in ("type", "param") if key in entry},
                body=entry.get("body"),
                raw=entry.get("raw"),
                content_type=entry.get("content_type", "application/json"),
                without_key=bool(entry.get("without_key")),
            )
        )
    return probes


def status_map_verdict(rules: WireRules, probe: ErrorProbe, response: Response) -> Verdict:
    """The status, envelope, type and param the version documents, and OpenAI's shape."""
    payload = response.json_or_none()
    envelope = error_envelope.envelope(payload)
    judged = Verdict(f"{probe}: {response.describe()} {response.text[:300]!r}", response.status)
    if response.status != probe.status:
        judged.failures.append(f"status {response.status}, expected {probe.status}")
    if envelope != "openai":
        judged.departures["envelope"] = envelope or "no known error shape"
    if envelope != probe.envelope:
        judged.failures.append(f"expected {ENVELOPES[probe.envelope]}, got {envelope or 'no known error shape'}")
    elif envelope == "openai":
        error = payload["error"]
        for key, value in probe.expected.items():
            if error.get(key) != value:
                judged.failures.append(f"$.error.{key}: expected {value!r}, got {error.get(key)!r}")
        if not isinstance(error.get("message"), str) or not error["message"]:
            judged.failures.append(f"$.error.message: expected a message, got {error.get('message')!r}")
        shape = rules.verdict("error", [("", payload)])
        judged.failures += shape.failures
        judged.reported += shape.reported
        judged.departures.update(shape.departures)
    else:
        failures, reported = rules.departures([f"{probe.id}: {rules.version_label} answers {ENVELOPES[envelope]}"])
        judged.failures += failures
        judged.reported += reported
    return judged
