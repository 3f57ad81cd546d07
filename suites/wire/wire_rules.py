"""How a judged wire answer becomes a verdict and report lines, by the contract data and the profile's strictness.

What vLLM does on purpose (``wire_deviations``) and the fields it adds
(``wire_extension_fields``) come from the contract data for the server's
version; they are reported as JUnit properties and in the report's figures,
and fail only under ``wire.strict_openai``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.protocol.schemas import Deviation, deviations_from, judge


@dataclass
class Verdict:
    """One answer judged: what breaks OpenAI's shape, what is only reported, and where it departs from OpenAI.

    ``departures``: field pattern -> how the answer leaves OpenAI's schema there
    (``extension`` for a field OpenAI does not define, ``undefined`` for a
    value outside OpenAI's union, keyed by pattern and value, else the deviation's
    kind: ``null``, ``integer``, ``missing``), whether reported or, under
    strict, failed; comparing two answers' departures says what an ingress
    changed. ``headline`` opens the failure message (the request and answer).
    """

    headline: str = ""
    status: int | None = None  # the answer's HTTP status
    failures: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    departures: dict[str, str] = field(default_factory=dict)

    def message(self) -> str:
        return f"{self.headline}:\n  " + "\n  ".join(self.failures)


# Fields the OpenResponses specification requires of a Response that OpenAI's description leaves
# optional, each with whether that specification lets it be null: a deployment that promises the
# specification (wire.openresponses) owes them. From the required list and property types of
# schema/components/schemas/ResponseResource.json in github.com/openresponses/openresponses at
# 3452c0125645c81acc7690ebb612b6cb1000e19f, less what OpenAI's Response already requires.
OPENRESPONSES_REQUIRED: Mapping[str, bool] = {
    "completed_at": True,
    "status": False,
    "previous_response_id": True,
    "truncation": False,
    "text": False,
    "presence_penalty": False,
    "frequency_penalty": False,
    "top_logprobs": False,
    "reasoning": True,
    "user": True,
    "usage": True,
    "max_output_tokens": True,
    "max_tool_calls": True,
    "store": False,
    "background": False,
    "service_tier": False,
    "safety_identifier": True,
    "prompt_cache_key": True,
}


@dataclass(frozen=True)
class WireRules:
    """The contract data for the server's version, and the profile's strictness."""

    deviations: tuple[Deviation, ...]
    extension_fields: Mapping[str, Sequence[str]]
    strict: bool
    strict_basis: str
    version_label: str
    openresponses: bool = False
    openresponses_basis: str = ""

    def openresponses_missing(self, answer: str, label: str, body: Any) -> list[str]:
        """Under wire.openresponses, each field OpenResponses requires that a Response omits, or sends as
        null where that specification's type has no null."""
        if not self.openresponses or answer != "responses" or not isinstance(body, dict):
            return []
        because = f"[wire.openresponses is true ({self.openresponses_basis})]"
        found = []
        for name, nullable in OPENRESPONSES_REQUIRED.items():
            if name not in body:
                found.append(f"{label}$.{name}: missing, and the OpenResponses specification requires it {because}")
            elif body[name] is None and not nullable:
                found.append(f"{label}$.{name}: null, and the OpenResponses specification requires a value {because}")
        return found

    def departures(self, lines: Sequence[str], reported: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
        """What a departure vLLM makes on purpose comes to: failures under strict, else report lines.

        ``reported`` words the report lines (default: ``lines``); a failure
        says the strictness that made it one, and where it was declared.
        """
        if self.strict:
            return [f"{line} [wire.strict_openai is true ({self.strict_basis})]" for line in lines], []
        return [], list(lines if reported is None else reported)

    def verdict(
        self, answer: str, bodies: Sequence[tuple[str, Any]], headline: str = "", status: int | None = None
    ) -> Verdict:
        """Judge each (label, body) as ``answer``; no body at all is a failure, never a pass.

        Deviations and extensions are report lines, once per field whatever
        the event; under strict they fail instead.
        """
        judged = Verdict(headline, status)
        if not bodies:  # a stream of nothing but [DONE]: no event has the shape, so none can be said to
            judged.failures.append(f"nothing to judge: the stream carries no JSON event, so no {answer} shape")
            return judged
        reported: dict[str, str] = {}
        known = self.extension_fields.get(answer, ())
        for label, body in bodies:
            judgement = judge(answer, body, self.deviations)
            judged.failures += [f"{label}{finding}" for finding in judgement.failures]
            judged.failures += self.openresponses_missing(answer, label, body)
            for finding, deviation in judgement.deviations:
                sent = "omits it" if finding.kind == "missing" else f"sends {finding.kind}"
                reported.setdefault(finding.pattern, f"{finding.pattern}: vLLM {sent} ({deviation.why})")
                judged.departures.setdefault(finding.pattern, finding.kind)
            for finding in judgement.extensions:
                listed = any(fnmatchcase(finding.pattern, pattern) for pattern in known)
                note = "vLLM extension" if listed else f"extension not in the contract data for {self.version_label}"
                reported.setdefault(finding.pattern, f"{finding.pattern}: {note}")
                judged.departures.setdefault(finding.pattern, finding.kind)
            for finding in judgement.undefined:  # once per value: each unknown event type is its own line
                place = f"{finding.pattern} {finding.seen}"
                reported.setdefault(place, f"{label}{finding}")
                judged.departures.setdefault(place, finding.kind)
        # A body that breaks several branches of one union breaks each the same way: say it once.
        judged.failures = list(dict.fromkeys(judged.failures))
        failures, judged.reported = self.departures(list(reported.values()))
        judged.failures += failures
        return judged


def rules_for(expect: Expectations) -> WireRules:
    strict = expect.declared("wire", "strict_openai")
    openresponses = expect.declared("wire", "openresponses")
    return WireRules(
        openresponses=bool(openresponses.value),
        openresponses_basis=openresponses.basis,
        deviations=deviations_from(expect.fact("wire_deviations")),
        extension_fields=expect.fact("wire_extension_fields"),
        strict=bool(strict.value),
        strict_basis=strict.basis,
        version_label=expect.version_label,
    )
