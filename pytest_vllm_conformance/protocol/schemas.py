"""Our JSON Schemas of OpenAI's answers (what each route returns), compiled once per run, and what a body does
against them.

The schemas (``schemas/*.json`` beside this file, Draft 2020-12) are written
from the OpenAI API reference and close every object they define, so a body
is judged three ways: what breaks OpenAI's shape (a failure), what breaks it
the way the server's vLLM release is known to on purpose (a deviation, from
the contract data), and fields OpenAI does not define (extensions). The last
two are reported, not failed, unless the profile asks for strict OpenAI shapes.
A union's discriminator that the schema marks ``x-unknown`` (the Responses
stream's event ``type``) is a fourth way: a value outside OpenAI's union has
no branch to be judged by, so it is reported (undefined), failed under strict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

SCHEMA_DIR = "schemas"
ANSWERS = (
    "models",
    "completion",
    "completion_chunk",
    "chat_completion",
    "chat_chunk",
    "embeddings",
    "error",
    "responses",
    "responses_event",
)


def _schema_files() -> dict[str, dict[str, Any]]:
    folder = resources.files(__package__).joinpath(SCHEMA_DIR)
    return {name: json.loads(folder.joinpath(f"{name}.json").read_text()) for name in (*ANSWERS, "common")}


@cache
def schemas() -> dict[str, dict[str, Any]]:
    """Every shipped schema by answer name (``common`` holds the shared parts)."""
    return _schema_files()


COMMON_REF = "urn:vllm-conformance:wire:common#/$defs/"


def _inlined(node: Any, defs: Mapping[str, Any]) -> Any:
    """The schema with every reference to the shared parts replaced by the part itself.

    jsonschema resolves a ``$ref`` through its registry at every instance it
    checks; inlined, a 1 MB body of logprobs validates about four times faster.
    The shared parts hold no cycle, so this ends.
    """
    if isinstance(node, list):
        return [_inlined(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref", "")
    for prefix in (COMMON_REF, "#/$defs/"):
        if ref.startswith(prefix):
            return _inlined(defs[ref.removeprefix(prefix)], defs)
    return {key: _inlined(value, defs) for key, value in node.items()}


@cache
def validator(answer: str) -> Draft202012Validator:
    """The compiled validator of one answer, built once per process (that is, per run)."""
    if answer not in ANSWERS:
        raise KeyError(f"no wire schema {answer!r}; known: {ANSWERS}")
    return Draft202012Validator(_inlined(schemas()[answer], schemas()["common"]["$defs"]))


def json_path(parts: Iterable[str | int]) -> str:
    """``$.choices[0].message.content``: how a failure names the place."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def pattern_path(parts: Iterable[str | int]) -> str:
    """``choices.*.message.content``: how the contract data names a place, whatever the index."""
    return ".".join("*" if isinstance(part, int) else str(part) for part in parts)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@dataclass(frozen=True)
class Finding:
    """One place where a body leaves OpenAI's shape."""

    parts: tuple[str | int, ...]
    # "missing", "extension", "undefined" (a discriminator value outside OpenAI's union),
    # or the JSON type seen ("null", "integer", ...) where another was expected
    kind: str
    expected: str
    seen: str

    @property
    def path(self) -> str:
        return json_path(self.parts)

    @property
    def pattern(self) -> str:
        return pattern_path(self.parts)

    def __str__(self) -> str:
        if self.kind == "extension":
            return f"{self.path}: a field OpenAI does not define"
        if self.kind == "undefined":
            return f"{self.path}: {self.seen} is {self.expected}"
        return f"{self.path}: expected {self.expected}, got {self.seen}"


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _expected(error: ValidationError) -> str:
    rule = error.validator_value
    if error.validator == "type":
        return " or ".join(rule) if isinstance(rule, list) else str(rule)
    if error.validator == "const":
        return f"the constant {_shown(rule)}"
    if error.validator == "enum":
        shown = [_shown(item) for item in rule]
        return "one of " + ", ".join(shown if len(shown) <= 8 else [*shown[:6], f"... ({len(shown)} in all)"])
    return f"{error.validator} {_shown(rule)}"


def _findings(error: ValidationError) -> Iterator[Finding]:
    parts = tuple(error.absolute_path)
    instance = error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {})
        for name in instance:
            if name not in known:
                yield Finding((*parts, name), "extension", "", "")
    elif error.validator == "required" and isinstance(instance, dict):
        for name in error.validator_value:
            if name not in instance:
                yield Finding((*parts, name), "missing", "the field (required by OpenAI)", "no such field")
    elif error.validator == "enum" and "x-unknown" in error.schema:
        yield Finding(parts, "undefined", error.schema["x-unknown"], _shown(instance))
    elif error.validator in ("anyOf", "oneOf") and error.context:
        # The null branch of a nullable shape says nothing useful: judge the other one.
        for sub in error.context:
            if sub.validator_value != "null":
                yield from _findings(sub)
    else:
        yield Finding(parts, json_type(instance), _expected(error), _shown(instance))


@dataclass(frozen=True)
class Deviation:
    """A way a vLLM release leaves OpenAI's shape on purpose (contract data ``wire_deviations``)."""

    answers: tuple[str, ...]
    at: str
    seen: str
    why: str

    def covers(self, answer: str, finding: Finding) -> bool:
        return (
            ("*" in self.answers or answer in self.answers)
            and fnmatchcase(finding.pattern, self.at)
            and finding.kind == self.seen
        )


def deviations_from(raw: Sequence[Any]) -> tuple[Deviation, ...]:
    """The contract data's entries; an entry that is a list (another range's, by YAML alias) stands for its entries."""
    entries: list[Mapping[str, Any]] = [
        item for entry in raw for item in (entry if isinstance(entry, list) else [entry])
    ]
    return tuple(
        Deviation(tuple(entry.get("answers", ["*"])), entry["at"], entry["seen"], entry["why"]) for entry in entries
    )


@dataclass
class Judgement:
    """What one body does against its schema: failures, declared deviations, extensions, undefined union members."""

    answer: str
    failures: list[Finding] = field(default_factory=list)
    deviations: list[tuple[Finding, Deviation]] = field(default_factory=list)
    extensions: list[Finding] = field(default_factory=list)
    undefined: list[Finding] = field(default_factory=list)


def judge(answer: str, body: Any, deviations: Sequence[Deviation] = ()) -> Judgement:
    """Validate ``body`` as ``answer``: a finding fails unless it is an extension or a deviation covers it."""
    judgement = Judgement(answer)
    for error in validator(answer).iter_errors(body):
        for finding in _findings(error):
            covering = next((d for d in deviations if d.covers(answer, finding)), None)
            if finding.kind == "extension":
                judgement.extensions.append(finding)
            elif finding.kind == "undefined":
                judgement.undefined.append(finding)
            elif covering is not None:
                judgement.deviations.append((finding, covering))
            else:
                judgement.failures.append(finding)
    return judgement
