"""From test reports to one verdict per catalogue feature.

A contract test is recognised by the ``vllm_contract`` and ``vllm_feature``
user properties the plugin gives it at collection. Those travel with every
report, including the ones pytest-xdist ships from its workers to the
controlling process, so the controller sees the whole run.

A test ends as one of six outcomes: passed, failed (any phase failed),
known departure, undecided, skipped, or not claimed. "Not claimed" is decided by the plugin
before the test runs (``applicability``) and travels as the ``vllm_claim``
property. "Undecided" travels as the ``vllm_outcome`` property: the check
ran and could not decide (it called ``undecided``), or it passed over no
evidence, which the plugin turns into undecided. "Known departure" travels
the same way: the check saw the release do what its catalogue fact marks as
not what clients need (``known_departure``). Any other skip is a plain
skip: the check could not run. A passed test carries its evidence
(``vllm_evidence``: "judged: 2 objectives, 128 requests"). A feature is:

- ``not run`` when the run had none of its tests (deselected, say);
- ``not claimed`` when every one of its tests was not claimed;
- otherwise claimed, and then ``failure`` if any test failed, else
  ``partial`` if any test was undecided or skipped (a claimed feature that
  was not fully checked is never a success), else ``known departures`` if
  any test saw one (checked, and not a pass), else ``success``.

"Checked" counts the claimed tests that ran to a verdict (passed, failed or
a known departure)
out of all claimed ones: "auth: 122 of 122 checked". A run none of whose
claimed tests was checked (or that claimed nothing) judged nothing, and does
not pass (``nothing_judged``), whatever its features' results.

Behind an ingress, a check the ingress does not expose (its own 404/405
where the server serves the route) on a route the profile declares hidden
(``ingress.hidden_routes``) passes as "not exposed": no caller can reach
that route there; on an undeclared route the check itself fails
(``vllm_not_exposed`` in plugin/fixtures.py). A claimed feature judged at the ingress none of whose
checks the ingress exposed judged nothing there, and is a ``failure``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pytest_vllm_conformance import KNOWN_DEPARTURE, NOT_CLAIMED, UNDECIDED

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
OUTCOMES = (PASSED, FAILED, KNOWN_DEPARTURE, UNDECIDED, SKIPPED, NOT_CLAIMED)

SUCCESS = "success"
PARTIAL = "partial"
KNOWN_DEPARTURES = "known departures"  # checked, and some contract saw the release's known departure
FAILURE = "failure"
NOT_RUN = "not run"
# Worst first: the run's overall result is the worst of its features'.
RESULTS_BY_SEVERITY = (FAILURE, PARTIAL, KNOWN_DEPARTURES, SUCCESS, NOT_CLAIMED, NOT_RUN)

REASON_MAX_CHARS = 600
_MESSAGE_PREFIXES = ("AssertionError: ", "Failed: ", "Skipped: ")


@dataclass
class ContractTest:
    """One test (one node id) of one contract, and how it ended."""

    test_id: str
    contract: str
    feature: str
    outcome: str | None = None
    reason: str = ""
    figures: str = ""  # what the test measured, in one line (its vllm_figures property), whatever the outcome
    evidence: str = ""  # what a passed test judged (its vllm_evidence property): "judged: 128 requests"
    at_ingress: bool = False  # judged through the run's ingress (the plugin's vllm_judged_at property)
    hidden: str = ""  # what the ingress did not expose to it (its vllm_ingress_hidden property)
    picture: str = ""  # a picture of its figures beside the report, by file name (its vllm_picture property)
    replica: str = ""  # the fleet's replica it ran against (its vllm_replica property); "" with one target


def failure_reason(report: Any) -> str:
    """The failure's one message, without pytest's assertion explanation lines."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = crash.message
    else:
        # A string longrepr (after redaction, or from a worker): its "E   " lines are the message.
        lines = str(report.longrepr or "").splitlines()
        errors = [line[1:].strip() for line in lines if line.startswith("E ")]
        text = "\n".join(errors) or next((line for line in reversed(lines) if line.strip()), "")
    text = _message(text)
    if report.when != "call":
        text = f"error in {report.when}: {text}"
    return _shorten(text)


def skip_reason(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return _shorten(f"expected to fail: {report.wasxfail}".rstrip(": "))
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return _shorten(_message(text))


def _message(text: str) -> str:
    lines = text.strip().splitlines()
    # pytest's rewritten asserts append "assert 200 == 401" and "+  where ..." lines.
    for index, line in enumerate(lines):
        if index and (line.startswith("assert ") or line.lstrip().startswith("+")):
            lines = lines[:index]
            break
    text = "\n".join(lines).strip()
    for prefix in _MESSAGE_PREFIXES:
        text = text.removeprefix(prefix)
    return text


def _shorten(text: str) -> str:
    return text if len(text) <= REASON_MAX_CHARS else text[: REASON_MAX_CHARS - 3] + "..."


# A test's measurements in one line, shown in the report beside its verdict, passed tests included:
# a gate that passed is trusted for the margin it passed by.
FIGURES_PROPERTY = "vllm_figures"
JUDGED_AT_PROPERTY = "vllm_judged_at"
HIDDEN_PROPERTY = "vllm_ingress_hidden"
PICTURE_PROPERTY = "vllm_picture"
REPLICA_PROPERTY = "vllm_replica"
OUTCOME_PROPERTY = "vllm_outcome"  # "undecided" or "known departure": set by the plugin, never by a suite
EVIDENCE_PROPERTY = "vllm_evidence"


class OutcomeCollector:
    """Follows every contract test through its setup, call and teardown reports."""

    def __init__(self) -> None:
        self.tests: dict[str, ContractTest] = {}

    def add(self, report: Any) -> None:
        properties = dict(getattr(report, "user_properties", ()) or ())
        contract, feature = properties.get("vllm_contract"), properties.get("vllm_feature")
        if not contract or not feature:
            return
        test = self.tests.setdefault(report.nodeid, ContractTest(report.nodeid, str(contract), str(feature)))
        if properties.get(FIGURES_PROPERTY):
            test.figures = _shorten(str(properties[FIGURES_PROPERTY]))
        if properties.get(REPLICA_PROPERTY):
            test.replica = str(properties[REPLICA_PROPERTY])
        if properties.get(PICTURE_PROPERTY):
            test.picture = str(properties[PICTURE_PROPERTY])
        if properties.get(EVIDENCE_PROPERTY):
            test.evidence = _shorten(str(properties[EVIDENCE_PROPERTY]))
        test.at_ingress = properties.get(JUDGED_AT_PROPERTY) == "ingress"
        if properties.get(HIDDEN_PROPERTY):
            test.hidden = str(properties[HIDDEN_PROPERTY])
        if report.failed:
            if test.outcome != FAILED:  # the first failure is the one that explains
                test.outcome, test.reason = FAILED, failure_reason(report)
        elif report.skipped:
            if test.outcome is None:
                if properties.get("vllm_claim") == NOT_CLAIMED:
                    test.outcome, test.reason = NOT_CLAIMED, _shorten(str(properties.get("vllm_claim_reason", "")))
                elif properties.get(OUTCOME_PROPERTY) in (UNDECIDED, KNOWN_DEPARTURE):
                    outcome = str(properties[OUTCOME_PROPERTY])
                    test.outcome, test.reason = outcome, skip_reason(report).removeprefix(f"{outcome}: ")
                else:
                    test.outcome, test.reason = SKIPPED, skip_reason(report)
        elif report.when == "call" and test.outcome is None:
            test.outcome = PASSED

    def finished(self) -> list[ContractTest]:
        return [test for test in self.tests.values() if test.outcome is not None]


@dataclass
class FeatureResult:
    name: str
    statement: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    failed: list[ContractTest] = field(default_factory=list)
    departed: list[ContractTest] = field(default_factory=list)
    undecided: list[ContractTest] = field(default_factory=list)
    skipped: list[ContractTest] = field(default_factory=list)
    not_claimed: list[ContractTest] = field(default_factory=list)
    measured: list[ContractTest] = field(default_factory=list)
    # Claimed tests judged through the ingress: those it exposed, and what it did not expose.
    exposed: int = 0
    not_exposed: int = 0
    hidden: list[str] = field(default_factory=list)
    tests: list[ContractTest] = field(default_factory=list)  # every finished test, in the order added

    @property
    def claimed(self) -> bool:
        return self.applicable > 0

    @property
    def applicable(self) -> int:
        """Claimed tests: those the feature promises for this server."""
        return self.checked + self.counts[UNDECIDED] + self.counts[SKIPPED]

    @property
    def checked(self) -> int:
        """Claimed tests that ran to a verdict."""
        return self.counts[PASSED] + self.counts[FAILED] + self.counts[KNOWN_DEPARTURE]

    @property
    def coverage(self) -> str:
        return f"{self.checked} of {self.applicable} checked"

    @property
    def nothing_exposed(self) -> bool:
        """Judged at an ingress that exposed none of its checks: the ingress judged nothing of it."""
        return bool(self.hidden) and not self.exposed

    @property
    def problem(self) -> str:
        """Why a feature with no failed test fails anyway ('' when none)."""
        if not self.nothing_exposed:
            return ""
        return f"the ingress exposes none of the routes this feature checks there: {', '.join(sorted(self.hidden))}"

    @property
    def result(self) -> str:
        if self.counts[FAILED] or self.nothing_exposed:
            return FAILURE
        if self.counts[UNDECIDED] or self.counts[SKIPPED]:
            return PARTIAL
        if self.counts[KNOWN_DEPARTURE]:
            return KNOWN_DEPARTURES
        if self.counts[PASSED]:
            return SUCCESS
        if self.counts[NOT_CLAIMED]:
            return NOT_CLAIMED
        return NOT_RUN

    def add(self, test: ContractTest) -> None:
        assert test.outcome is not None, "only finished tests are added"
        self.counts[test.outcome] += 1
        self.tests.append(test)
        listing = {
            FAILED: self.failed,
            KNOWN_DEPARTURE: self.departed,
            UNDECIDED: self.undecided,
            SKIPPED: self.skipped,
            NOT_CLAIMED: self.not_claimed,
        }.get(test.outcome)
        if listing is not None:
            listing.append(test)
        if test.figures and test.outcome != NOT_CLAIMED:
            self.measured.append(test)
        if test.at_ingress and test.outcome in (PASSED, FAILED):
            if test.hidden:
                self.not_exposed += 1
                if test.hidden not in self.hidden:
                    self.hidden.append(test.hidden)
            else:
                self.exposed += 1

    def not_claimed_by_contract(self) -> list[tuple[str, str, int]]:
        """(contract, reason, number of tests): not-claimed tests repeat one reason per case."""
        grouped = Counter((test.contract, test.reason) for test in self.not_claimed)
        return [(contract, reason, count) for (contract, reason), count in grouped.items()]


def feature_results(features: dict[str, str], tests: list[ContractTest]) -> list[FeatureResult]:
    """One result per catalogue feature, in catalogue order (then any unknown feature)."""
    results = {name: FeatureResult(name, statement) for name, statement in features.items()}
    for test in tests:
        if test.feature not in results:
            results[test.feature] = FeatureResult(test.feature, "")
        results[test.feature].add(test)
    return list(results.values())


def replica_results(features: dict[str, str], tests: list[ContractTest], replicas: list[str]) -> dict[str, str]:
    """A fleet: each replica's overall result, from its own tests (those of no replica, the fleet's own, aside)."""
    return {
        name: overall_result(feature_results(features, [test for test in tests if test.replica == name]))
        for name in replicas
    }


def overall_result(results: list[FeatureResult]) -> str:
    seen = {result.result for result in results}
    return next((result for result in RESULTS_BY_SEVERITY if result in seen), NOT_RUN)


NOTHING_CLAIMED = (
    "nothing was claimed: no contract of this run applies to this server and profile, "
    "so nothing was judged, and the run does not pass"
)


def nothing_judged(results: list[FeatureResult]) -> str:
    """Why a run that failed no test still does not pass because it judged nothing ('' when it judged something).

    A run that claimed nothing, or whose claimed checks all ended undecided or skipped, reached no verdict:
    "partial" with exit 0 would let a promotion gate pass on no evidence at all.
    """
    if overall_result(results) == NOT_CLAIMED:
        return NOTHING_CLAIMED
    claimed = [result for result in results if result.claimed]
    if claimed and not any(result.checked for result in claimed):
        tests = sum(result.applicable for result in claimed)
        return (
            f"nothing was judged: none of the {tests} claimed check(s) of this run reached a verdict "
            "(each was undecided or skipped, listed above), and the run does not pass"
        )
    return ""
