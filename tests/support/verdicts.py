"""Reading a run's JUnit file by contract id, and pinning each contract's verdict."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

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


def of_features(expected: dict[str, str | dict[str, int]], *features: str) -> dict[str, str | dict[str, int]]:
    """The verdicts of ``expected`` for the contracts of ``features`` only (a run with ``-m feature``)."""
    return {contract: want for contract, want in expected.items() if contract.split(".", 1)[0] in features}


def failed_checks(path: Path) -> dict[str, str]:
    """``contract[case]`` (or ``contract``) -> the whole failure text, for each failed test."""
    return {run.key: run.message for run in contract_runs(path) if run.verdict == "failed"}


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
