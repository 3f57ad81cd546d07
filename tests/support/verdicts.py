"""Reading a run's JUnit file by contract id, and pinning each contract's verdict.

A proof declares the contracts it pins (``@pytest.mark.pins``) and is held to
its declaration while it runs: see "what a proof pins" below.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ---- verdicts by contract id --------------------------------------------------
#
# Our proofs pin what each contract of a run must come to, by its id (the
# vllm_contract property), never by a suite test's function name: a suite that
# quietly turns a check into a skip, or a "not claimed", fails our CI.

VERDICTS = ("passed", "failed", "undecided", "skipped", "not claimed")


@dataclass(frozen=True)
class ContractRun:
    """One suite test of a run, as its JUnit testcase tells it."""

    contract: str
    case: str | None  # the parameter id between the brackets, None for an unparametrized test
    verdict: str
    message: str  # the failure's whole text, or the skip's reason
    properties: dict[str, str]

    @property
    def key(self) -> str:
        return self.contract if self.case is None else f"{self.contract}[{self.case}]"


def _leading_properties(text: str | None) -> dict[str, str]:
    properties = {}
    for line in (text or "").splitlines():
        name, sep, value = line.partition(": ")
        if not sep or not name.startswith("vllm_"):
            break
        properties.setdefault(name, value)
    return properties


def contract_runs(path: Path) -> list[ContractRun]:
    import xml.etree.ElementTree as ET

    runs = []
    for case in ET.parse(path).iter("testcase"):
        system_out = case.find("system-out")
        properties = _leading_properties(system_out.text if system_out is not None else None)
        properties.update({p.get("name"): p.get("value") for p in case.iter("property")})
        contract = properties.get("vllm_contract")
        if contract is None:
            continue
        verdict, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                verdict, message = "failed", child.text or child.get("message", "")
            elif child.tag == "skipped":
                claim = properties.get("vllm_claim")
                verdict = "not claimed" if claim == "not claimed" else "skipped"
                if properties.get("vllm_outcome") == "undecided":
                    verdict = "undecided"
                message = child.get("message", "")
        name = case.get("name")
        param = name[name.index("[") + 1 : -1] if name.endswith("]") and "[" in name else None
        runs.append(ContractRun(contract, param, verdict, message, properties))
    return runs


def verdicts(path: Path) -> dict[str, dict[str, int]]:
    """Contract id -> {verdict: number of its tests}."""
    from collections import Counter

    counted: dict[str, Counter] = {}
    for run in contract_runs(path):
        counted.setdefault(run.contract, Counter())[run.verdict] += 1
    return {contract: dict(counts) for contract, counts in counted.items()}


def assert_verdicts(
    path: Path, expected: dict[str, str | dict[str, int]], failed: Collection[str] | None = None
) -> None:
    """Every contract of the run is pinned: a verdict all its tests share, or {verdict: count}.

    ``failed``: the exact set of tests (``contract[case]``) that must fail; each
    contract's verdict in ``expected`` is then that of its other tests.
    """
    seen = verdicts(path)
    assert set(seen) == set(expected), (
        f"contracts run but not pinned: {sorted(set(seen) - set(expected))}; "
        f"pinned but not run: {sorted(set(expected) - set(seen))}"
    )
    if failed is not None:
        failed_now = set(failed_checks(path))
        assert failed_now == set(failed), (
            f"failed but not expected to: {sorted(failed_now - set(failed))}; "
            f"expected to fail but did not: {sorted(set(failed) - failed_now)}"
        )
        for key in failed:
            counts = seen[key.split("[", 1)[0]]
            counts["failed"] -= 1
            if not counts["failed"]:
                del counts["failed"]
    wrong = {}
    for contract, want in expected.items():
        got = seen[contract]
        if isinstance(want, str):
            # Every test of a contract may be among ``failed``: nothing is left to share the verdict.
            agrees = set(got) == {want} or (failed is not None and not got)
        else:
            agrees = got == want
        if not agrees:
            wrong[contract] = (want, got)
    assert not wrong, "verdicts differ (expected, seen): " + "; ".join(f"{c}: {w}" for c, w in sorted(wrong.items()))
    _pinned(expected, failed or ())


def assert_tests(path: Path, expected: Mapping[str, str]) -> None:
    """Some tests of a run pinned by key (``contract[case]``, or ``contract``): each has that verdict.

    For a run whose other tests are left to other assertions; ``assert_verdicts`` pins a whole run.
    """
    seen = {run.key: run.verdict for run in contract_runs(path)}
    wrong = {key: (want, seen.get(key, "not run")) for key, want in expected.items() if seen.get(key) != want}
    assert not wrong, "verdicts differ (expected, seen): " + "; ".join(f"{k}: {w}" for k, w in sorted(wrong.items()))
    by_contract: dict[str, dict[str, int]] = {}
    for key, verdict in expected.items():
        counts = by_contract.setdefault(contract_of(key), {})
        counts[verdict] = counts.get(verdict, 0) + 1
    _pinned(by_contract, ())


def of_features(expected: dict[str, str | dict[str, int]], *features: str) -> dict[str, str | dict[str, int]]:
    """The verdicts of ``expected`` for the contracts of ``features`` only (a run with ``-m feature``)."""
    return {contract: want for contract, want in expected.items() if contract.split(".", 1)[0] in features}


class _FailedChecks(dict[str, str]):
    """A test that reads a failure's text by its key pins that check failed: the key is there only if it failed."""

    def __getitem__(self, key: str) -> str:
        message = super().__getitem__(key)
        _pinned({}, {key})
        return message


def failed_checks(path: Path) -> dict[str, str]:
    """``contract[case]`` (or ``contract``) -> the whole failure text, for each failed test.

    Reading an entry (``failed[key]``) pins that check failed, as ``assert_verdicts`` does.
    """
    return _FailedChecks({run.key: run.message for run in contract_runs(path) if run.verdict == "failed"})


def junit_results(path: Path) -> dict[str, tuple[str, str]]:
    """Test name (with parameters) -> (outcome, message) from a JUnit XML file."""
    import xml.etree.ElementTree as ET

    results = {}
    for case in ET.parse(path).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        results[case.get("name")] = (outcome, message)
    return results


def failures(path: Path) -> dict[str, str]:
    return {
        name: message for name, (outcome, message) in junit_results(path).items() if outcome in ("failure", "error")
    }


def failure_reports(path: Path) -> dict[str, str]:
    """Test name -> the full failure report (the element text), for messages longer than the message attribute keeps."""
    import xml.etree.ElementTree as ET

    return {
        case.get("name"): child.text or child.get("message", "")
        for case in ET.parse(path).iter("testcase")
        for child in case
        if child.tag in ("failure", "error")
    }


# ---- what a proof pins: declared, and held to its declaration ----------------
#
# Each proof names the contracts it pins *failed* against a fault (a proxy, a
# hostile server, a flag on a real server) and *healthy* (passed or undecided)
# on a healthy server:
#
#     @pytest.mark.pins(failed={"sdk.lists_model", ...}, healthy=PLAIN_VERDICTS)
#
# Each takes contract ids, ``contract[case]`` keys, or an expected-verdict
# dict: its failed contracts for ``failed``, its passed or undecided ones
# (none of their tests failed) for ``healthy``. tests/unit/test_proofs_cover_the_catalogue.py walks
# the catalogue with these declarations, so a contract's proofs are found by its
# id. A declaration cannot lie: tests/conftest.py checks at each proof's
# teardown that the contracts it pinned failed (assert_verdicts,
# failed_checks' entries) are exactly those it declares failed, and that each
# contract it declares healthy was pinned passed or undecided, none of its
# tests failed, in one of its pinned runs (a proof may run a healthy server and
# then a fault, and show both).

PINS_MARKER = "pins"
HEALTHY = ("passed", "undecided")


def contract_of(key: str) -> str:
    return key.split("[", 1)[0]


def healthy_in(expected: Mapping[str, str | Mapping[str, int]]) -> set[str]:
    """The contracts an expected-verdict dict pins passed or undecided, none of their tests failed."""
    return {
        contract
        for contract, want in expected.items()
        if (want in HEALTHY if isinstance(want, str) else "failed" not in want and any(v in want for v in HEALTHY))
    }


def failed_in(expected: Mapping[str, str | Mapping[str, int]]) -> set[str]:
    """The contracts an expected-verdict dict pins failed, some of their tests or all."""
    return {
        contract
        for contract, want in expected.items()
        if (want == "failed" if isinstance(want, str) else "failed" in want)
    }


@dataclass
class Pins:
    failed: set[str] = field(default_factory=set)
    healthy: set[str] = field(default_factory=set)


def declared_pins(item: Any) -> Pins:
    """What a test item's ``pins`` markers (its own, its module's) declare."""
    pins = Pins()
    for mark in item.iter_markers(PINS_MARKER):
        unknown = set(mark.kwargs) - {"failed", "healthy"} or mark.args
        if unknown:
            raise TypeError(f"{item.nodeid}: pins takes failed= and healthy= only, got {unknown}")
        failed, healthy = mark.kwargs.get("failed", ()), mark.kwargs.get("healthy", ())
        pins.failed |= failed_in(failed) if isinstance(failed, Mapping) else {contract_of(key) for key in failed}
        pins.healthy |= healthy_in(healthy) if isinstance(healthy, Mapping) else {contract_of(k) for k in healthy}
    return pins


# What the running test has pinned so far; None outside a test (tests/conftest.py sets it around each test).
_running: Pins | None = None


def start_pinning() -> None:
    global _running
    _running = Pins()


def stop_pinning() -> Pins:
    global _running
    pinned, _running = _running or Pins(), None
    return pinned


def _pinned(expected: Mapping[str, str | Mapping[str, int]], failed: Iterable[str]) -> None:
    if _running is None:
        return
    failed_now = {contract_of(key) for key in failed} | failed_in(expected)
    _running.failed |= failed_now
    _running.healthy |= healthy_in(expected) - failed_now  # a run pins a contract healthy if none of its tests failed


def disagreements(declared: Pins, pinned: Pins) -> list[str]:
    """How what a test pinned differs from what it declares (empty: they agree)."""
    problems = []
    if undeclared := pinned.failed - declared.failed:
        problems.append(f"pinned failed but not declared in pins(failed=...): {sorted(undeclared)}")
    if unpinned := declared.failed - pinned.failed:
        problems.append(f"declared in pins(failed=...) but never pinned failed: {sorted(unpinned)}")
    if unpinned := declared.healthy - pinned.healthy:
        problems.append(f"declared in pins(healthy=...) but never pinned passed or undecided: {sorted(unpinned)}")
    return problems
