"""A contract test's outcome as the harness decides it: undecided and known departures are their own, and a pass
carries its evidence.

``hooks.py`` calls ``judge`` on each report of a contract test. A check that
called ``undecided`` is marked undecided, one that called ``known_departure``
a known departure (pytest sees a skip; the terminal, the report and JUnit see
the outcome's own word). A check that passed hands over what it
judged (``vllm_evidence``); with none, the answers its clients received
during its call stand in; with neither, or with a count of 0, the pass is
turned into undecided, naming what was missing. So no suite can pass over
nothing, however it is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_vllm_conformance import KNOWN_DEPARTURE, UNDECIDED, KnownDeparture, Undecided
from pytest_vllm_conformance.connection import traffic
from pytest_vllm_conformance.reporting.evidence import Evidence
from pytest_vllm_conformance.reporting.outcomes import EVIDENCE_PROPERTY, OUTCOME_PROPERTY

EVIDENCE = pytest.StashKey[Evidence]()
ANSWERS_AT_CALL = pytest.StashKey[int]()


def evidence_of(item: pytest.Item) -> Evidence:
    """The evidence a test's check recorded (empty until it records some)."""
    return item.stash.setdefault(EVIDENCE, Evidence())


@contextmanager
def counting_answers(item: pytest.Item) -> Iterator[None]:
    """Around a test's call: how many answers the run's clients received meanwhile."""
    before = traffic.answers_so_far()
    try:
        yield
    finally:
        item.stash[ANSWERS_AT_CALL] = traffic.answers_so_far() - before


def judge(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    for raised, outcome in ((Undecided, UNDECIDED), (KnownDeparture, KNOWN_DEPARTURE)):
        if call.excinfo is not None and call.excinfo.errisinstance(raised):
            if isinstance(report.longrepr, tuple):
                # pytest words a skip's subclass "module.Class: message"; the reason alone is the message.
                path, line, _ = report.longrepr
                report.longrepr = (path, line, str(getattr(call.excinfo.value, "msg", "")))
            _record(item, report, OUTCOME_PROPERTY, outcome)
            return
    if report.when != "call" or not report.passed:
        return
    evidence = evidence_of(item)
    if not evidence.recorded and item.stash.get(ANSWERS_AT_CALL, 0):
        evidence.judged(item.stash[ANSWERS_AT_CALL], "answers")
    lacking = evidence.lacking()
    if lacking is None:
        _record(item, report, EVIDENCE_PROPERTY, evidence.line())
        return
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"{UNDECIDED}: {lacking}")
    _record(item, report, OUTCOME_PROPERTY, UNDECIDED)


def _record(item: pytest.Item, report: pytest.TestReport, name: str, value: str) -> None:
    # On the item too: pytest's JUnit writer reads the properties of the teardown report.
    item.user_properties.append((name, value))
    report.user_properties.append((name, value))


def test_status(report: pytest.TestReport | pytest.CollectReport) -> tuple[str, str, str] | None:
    """pytest's terminal: an undecided test and a known departure are counted and lettered as their own outcomes
    ("3 undecided", "U"; "1 known departure", "D").

    pytest asks this of collection reports too (a module skipped at collection, under -ra), which carry no
    user properties: those are never undecided, and are pytest's to word."""
    properties = getattr(report, "user_properties", ())
    if report.skipped and (OUTCOME_PROPERTY, UNDECIDED) in properties:
        return UNDECIDED, "U", UNDECIDED.upper()
    if report.skipped and (OUTCOME_PROPERTY, KNOWN_DEPARTURE) in properties:
        return KNOWN_DEPARTURE, "D", KNOWN_DEPARTURE.upper()
    return None
