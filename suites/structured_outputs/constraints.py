"""Structured-output requests, and whether an answer meets the constraint it carried.

Every constraint is one a random-weight model never meets by chance (an enum
inside an object, a fixed-shape regex, two long choices), so an answer that
meets it shows the constraint was applied, and one that does not shows it
was dropped. Requests are greedy with room to finish, but a model may pad
JSON with the whitespace a schema allows until ``max_tokens``: a cut answer
is judged by what it generated (``json_prefix``). Still the start of an
answer that meets the constraint, it is undecided; not even that, the
constraint was not applied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance.catalogue.cases import CaseContext, NoCases
from pytest_vllm_conformance.protocol.answer_controls import HELD, Judgement
from pytest_vllm_conformance.protocol.generation_routes import CHAT, COMPLETIONS
from pytest_vllm_conformance.protocol.json_prefix import prefix_problem, schema_problem

OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"enum": ["alpha", "beta"]}, "confirmed": {"type": "boolean"}},
    "required": ["answer", "confirmed"],
    "additionalProperties": False,
}
PATTERN = "[ab]{3}-[0-9]{2}"
CHOICES = ["zebra crossing", "quokka"]
GRAMMAR = 'root ::= "yes" | "no"'
GRAMMAR_WORDS = ("yes", "no")
MAX_TOKENS = 128
PROMPT = "Answer the question about the weather."


@dataclass(frozen=True)
class Constraint:
    """One constraint as a request carries it: ``carrier`` is response_format or structured_outputs."""

    carrier: str
    kind: str
    spec: Any

    @property
    def name(self) -> str:
        return f"{self.carrier} {self.kind}"

    def request_fields(self) -> dict[str, Any]:
        if self.carrier == "response_format":
            if self.kind == "json_schema":
                return {
                    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": self.spec}}
                }
            return {"response_format": {"type": self.kind}}
        return {"structured_outputs": {self.kind: self.spec}}

    @property
    def schema(self) -> Any:
        return {"type": "object"} if self.kind == "json_object" else self.spec

    def start_problem(self, text: str) -> str | None:
        """Why no continuation of ``text`` meets the constraint, or None when some does.

        The regex is fixed-length and short: applied, it never reaches MAX_TOKENS, so a cut answer broke it.
        """
        if self.kind in ("json_schema", "json", "json_object"):
            problem = prefix_problem(text, self.schema)
            return f"{text[:200]!r} cannot become JSON that meets the schema: {problem}" if problem else None
        if self.kind in ("choice", "grammar"):
            allowed = self.spec if self.kind == "choice" else list(GRAMMAR_WORDS)
            if any(option.startswith(text) for option in allowed):
                return None
            return f"{text[:200]!r} does not start any of {allowed}"
        return f"{text[:200]!r} ran past the fixed-length {self.spec!r}"

    def judge(self, text: str, *, cut: bool) -> Judgement:
        """Met, broken, or (cut by max_tokens, every character consistent with it so far) undecided."""
        violation = self.violation(text)
        if violation is None:
            return HELD
        if not cut:
            return Judgement(problem=violation)
        problem = self.start_problem(text)
        if problem:
            return Judgement(problem=f"{problem} (and ran to max_tokens)")
        consistent = f"every character of {text[:120]!r} consistent with it"
        return Judgement(undecided=f"cut by max_tokens before the constraint closed, {consistent}")

    def violation(self, text: str) -> str | None:
        """Why ``text`` does not meet the constraint, or None when it does."""
        if self.kind in ("json_schema", "json", "json_object"):
            try:
                value = json.loads(text)
            except ValueError as exc:
                return f"{text[:200]!r} is not JSON ({exc})"
            if self.kind == "json_object":
                return None if isinstance(value, dict) else f"{text[:200]!r} is JSON but not an object"
            problem = schema_problem(self.spec, value)
            return f"{text[:200]!r} {problem}" if problem else None
        if self.kind == "regex":
            return None if re.fullmatch(self.spec, text) else f"{text[:200]!r} does not fully match {self.spec!r}"
        allowed = self.spec if self.kind == "choice" else list(GRAMMAR_WORDS)
        return None if text in allowed else f"{text[:200]!r} is not one of {allowed}"


CONSTRAINTS = {
    ("response_format", "json_schema"): Constraint("response_format", "json_schema", OBJECT_SCHEMA),
    ("response_format", "json_object"): Constraint("response_format", "json_object", None),
    ("structured_outputs", "json"): Constraint("structured_outputs", "json", OBJECT_SCHEMA),
    ("structured_outputs", "regex"): Constraint("structured_outputs", "regex", PATTERN),
    ("structured_outputs", "choice"): Constraint("structured_outputs", "choice", CHOICES),
    ("structured_outputs", "grammar"): Constraint("structured_outputs", "grammar", GRAMMAR),
}
# Where each form is sent: every bounded form once, JSON schema on both endpoints
# (completions takes response_format too), and one form per endpoint streamed.
# json_object is left out: any object is allowed, and a random model writes one
# long string value until max_tokens, so its answer could never be judged.
PLAN = (
    ("response_format", "json_schema", "chat", False),
    ("response_format", "json_schema", "completions", False),
    ("structured_outputs", "json", "completions", False),
    ("structured_outputs", "regex", "chat", False),
    ("structured_outputs", "choice", "completions", False),
    ("structured_outputs", "grammar", "chat", False),
    ("response_format", "json_schema", "chat", True),
    ("structured_outputs", "choice", "completions", True),
)


def generation_request(endpoint: str, model: str, fields: dict[str, Any], *, max_tokens: int, stream: bool = False):
    """(path, body) of a greedy completions or chat request carrying ``fields``."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": 0, **fields}
    if stream:
        body["stream"] = True
    if endpoint == "chat":
        return CHAT.path, {"messages": [{"role": "user", "content": PROMPT}], **body}
    return COMPLETIONS.path, {"prompt": PROMPT, **body}


@dataclass(frozen=True)
class ConstraintCase:
    constraint: Constraint
    endpoint: str
    streamed: bool
    # structured_outputs fields that forbid free whitespace, where the version has them (fact json_whitespace_control)
    no_free_whitespace: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.constraint.name} on {self.endpoint}{' streamed' if self.streamed else ''}"

    def __str__(self) -> str:
        return self.id

    def request(self, model: str):
        fields = self.constraint.request_fields()
        if self.no_free_whitespace:
            fields["structured_outputs"] = {**fields["structured_outputs"], **self.no_free_whitespace}
        return generation_request(self.endpoint, model, fields, max_tokens=MAX_TOKENS, stream=self.streamed)


def constraint_cases(ctx: CaseContext) -> list[ConstraintCase]:
    forms = ctx.expect.fact("structured_output_forms")
    no_free_whitespace = ctx.expect.release.json_whitespace_control["request_fields"] or {}
    served = {("response_format", kind) for kind in forms["response_format"]}
    served |= {("structured_outputs", kind) for kind in forms["structured_outputs"]}
    cases = [
        ConstraintCase(
            CONSTRAINTS[(carrier, kind)],
            endpoint,
            streamed,
            no_free_whitespace if (carrier, kind) == ("structured_outputs", "json") else {},
        )
        for carrier, kind, endpoint, streamed in PLAN
        if (carrier, kind) in served and endpoint in forms["endpoints"]
    ]
    if not cases:
        raise NoCases("the version's structured_output_forms fact names no form this suite can send")
    return cases


@dataclass(frozen=True)
class InvalidConstraint:
    """A constraint the version refuses, and the words its refusal holds (fact ``invalid_structured_outputs``)."""

    name: str
    fields: dict[str, Any]
    endpoint: str
    messages: Mapping[str, str] = field(hash=False, compare=False)  # backend -> words; "auto" is the default's

    @property
    def id(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def worded_by(self, message: str) -> str | None:
        """The backend whose words ``message`` holds, or None: the server's backend is not visible over the API."""
        return next((backend for backend, words in self.messages.items() if words in message), None)

    def wordings(self) -> str:
        return "; ".join(f"{words!r} ({backend})" for backend, words in self.messages.items())


def _nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def invalid_constraints(ctx: CaseContext) -> list[InvalidConstraint]:
    cases = []
    for entry in ctx.expect.fact("invalid_structured_outputs"):
        if "structured_outputs" in entry:
            fields, endpoint = {"structured_outputs": entry["structured_outputs"]}, "completions"
        else:
            schema = entry.get("response_format_schema") or _nested_schema(entry["nested_schema_depth"])
            fields = {"response_format": {"type": "json_schema", "json_schema": {"name": "invalid", "schema": schema}}}
            endpoint = "chat"
        messages = {"auto": entry["message"], **entry.get("backend_messages", {})}
        cases.append(InvalidConstraint(entry["name"], fields, endpoint, messages))
    return cases


@dataclass(frozen=True)
class LegacyField:
    """A guided_* field vLLM removed, the constraint it used to carry, and what to send instead."""

    field: str
    value: Any
    constraint: Constraint
    instead: str

    @property
    def id(self) -> str:
        return self.field

    def __str__(self) -> str:
        return self.field


def legacy_fields(ctx: CaseContext) -> list[LegacyField]:
    removed = ctx.expect.release.removed_guided_fields
    fields = []
    for entry in removed["fields"]:
        ((kind, spec),) = entry["constraint"].items()
        constraint = Constraint("structured_outputs", kind, spec)
        fields.append(LegacyField(entry["field"], entry["value"], constraint, entry["instead"]))
    return fields
