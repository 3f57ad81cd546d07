"""A pass carries what it judged; a check that judged nothing is undecided by the harness's own rule.

Stand-in contract tests in pytester runs: no suite can pass over nothing,
whatever it forgets, and undecided is its own outcome in the terminal, the
report, JUnit and the strict gate.
"""

from __future__ import annotations

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy, Respond
from fixtures.hostile_server import HostileServer
from fixtures.verdicts import contract_runs
from pytest_vllm_conformance.reporting.evidence import Evidence

QUIET = ("-p", "no:cacheprovider", "--junitxml=junit.xml", "--vllm-report=r.yaml")

STAND_INS = """
    from pytest_vllm_conformance import contract, undecided

    @contract("discovery.max_model_len_published")
    def test_forgot_its_evidence():
        assert 1 + 1 == 2

    @contract("discovery.version_parses")
    def test_judged_nothing(vllm_evidence):
        vllm_evidence.judged(0, "objectives", missing="no latency objective declared")

    @contract("discovery.core_routes_served")
    def test_judged_two(vllm_evidence):
        vllm_evidence.judged(2, "objectives")
        vllm_evidence.judged(128, "requests")

    @contract("auth.open_server_declared")
    def test_could_not_decide(vllm_evidence):
        vllm_evidence.judged(3, "requests")
        undecided("the interval is too wide to decide")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_stand_ins=STAND_INS)
    return pytester.runpytest(*QUIET, *args)


def test_a_pass_over_nothing_is_undecided_naming_what_was_missing(pytester, clean_env):
    result = run(pytester)
    assert result.parseoutcomes() == {"passed": 1, "undecided": 3}
    runs = {run.contract: run for run in contract_runs(pytester.path / "junit.xml")}
    assert {contract: run.verdict for contract, run in runs.items()} == {
        "discovery.max_model_len_published": "undecided",
        "discovery.version_parses": "undecided",
        "discovery.core_routes_served": "passed",
        "auth.open_server_declared": "undecided",
    }
    assert "it received no answer and recorded no evidence" in runs["discovery.max_model_len_published"].message
    assert runs["discovery.version_parses"].message == "undecided: no latency objective declared"
    assert runs["discovery.core_routes_served"].properties["vllm_evidence"] == "judged: 2 objectives, 128 requests"
    assert runs["auth.open_server_declared"].message == "undecided: the interval is too wide to decide"
    result.stdout.fnmatch_lines(
        [
            "*discovery*partial*1 of 3 checked: 1 passed, 2 undecided",
            "UNDECIDED test_stand_ins.py::test_judged_nothing: no latency objective declared",
        ]
    )


def test_the_report_counts_undecided_and_carries_each_contracts_evidence(pytester, clean_env):
    run(pytester)
    report = yaml.safe_load((pytester.path / "r.yaml").read_text())
    discovery = report["features"]["discovery"]
    assert discovery["result"] == "partial"
    assert discovery["counts"]["undecided"] == 2
    assert [entry["contract"] for entry in discovery["undecided"]] == [
        "discovery.max_model_len_published",
        "discovery.version_parses",
    ]
    assert discovery["evidence"] == [
        {"contract": "discovery.core_routes_served", "passed": 1, "judged": "2 objectives, 128 requests"}
    ]
    tests = {entry["contract"]: entry for entry in report["tests"]}
    assert tests["discovery.core_routes_served"]["evidence"] == "judged: 2 objectives, 128 requests"
    markdown = (pytester.path / "r.md").read_text()
    assert "**Undecided**" in markdown
    assert "`discovery.core_routes_served` (1 passed): judged 2 objectives, 128 requests" in markdown


def test_the_strict_gate_fails_a_claimed_feature_with_an_undecided_contract(pytester, clean_env):
    result = run(pytester, "--vllm-gate=strict")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["--vllm-gate=strict: partial feature(s) fail the run: discovery (1 of 3 checked), *"])


def test_answers_a_check_received_are_its_evidence_when_it_records_none(pytester, clean_env):
    pytester.makepyfile(
        """
        from pytest_vllm_conformance import contract

        @contract("discovery.max_model_len_published")
        def test_asks(vllm_client):
            assert vllm_client.get("/v1/models").status == 200
            assert vllm_client.get("/v1/models").status == 200
        """
    )
    models = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 512}]}
    rules = [
        Respond(status=200, body_json={}, path="/health"),
        Respond(status=200, body_json=models, path="/v1/models"),
        Respond(status=200, body_json={"version": "0.32.0"}, path="/version"),
    ]
    with HostileServer() as hostile, FaultProxy(hostile.url, rules=rules) as server:
        result = pytester.runpytest(*QUIET, f"--vllm-url={server.url}")
    result.assert_outcomes(passed=1)
    (only,) = contract_runs(pytester.path / "junit.xml")
    assert only.properties["vllm_evidence"] == "judged: 2 answers"


def test_evidence_takes_counts_only():
    evidence = Evidence()
    with pytest.raises(TypeError, match="judged\\(\\) takes a count of requests"):
        evidence.judged(-1, "requests")
    with pytest.raises(TypeError):
        evidence.judged(True, "requests")  # type: ignore[arg-type]
    evidence.judged(1, "requests")
    evidence.judged(1, "scored positions")
    assert evidence.line() == "judged: 1 request, 1 scored position"
    assert evidence.lacking() is None
