"""serving.capacity_not_worse on real servers: plain against plain_twin (a second server, plain's flags and two
features no completion reaches) keeps up with as many requests a second and passes; plain behind a relay that admits
one request at a time (the engine could batch them) fails, the capacity interval wholly below its boundary.

Both run the capacity contract alone (``-k capacity``) on a small budget, at the gate's default workload (32 prompt
and 16 output tokens). The door is judged at an objective a healthy tiny server meets with room (ROOMY); the
identical pair at a tighter one (TIGHT), whose knee our client can reach. ``max_slowdown: 0.5`` (boundary 0.707):
identical servers on two cores shared with other work measured capacity ratios from 0.70 to 1.41 from run to run
(2026-12-06, by hand; docs/serving.md), too wide for the default floor's boundary (0.894); the door of one request
cost 0.55 of the capacity or more, and failed each time.
"""

import re

import pytest

from fixtures import cpu_share
from fixtures.fault_proxy import AdmitAtMost, FaultProxy
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites

pytestmark = [requires_vllm, pytest.mark.servers("plain", "plain_twin")]

PROFILE = """
profile: 1
name: serving-capacity
serving:
  concurrency: 8
  max_slowdown: 0.5
  capacity_seconds: {BUDGET}
  goodput: {GOODPUT}
"""
# An objective a healthy tiny server meets with room, at rates a door of one request cannot reach.
ROOMY = "{ttft_seconds: 1.0, tpot_seconds: 0.1, share: 0.9}"
# A tighter one, whose knee lies within what our client can offer on two cores. With ROOMY, two identical servers
# on a quiet machine kept up past 130-210 requests a second, where the client reached its 96 in flight, and every
# search ended undecided naming the client (2 of 2, and 64 output tokens 2 of 2); with TIGHT, 6 of 8 passed and 2
# were undecided at the boundary, none failed (2026-12-06, this machine kind, quiet).
TIGHT = "{ttft_seconds: 0.25, tpot_seconds: 0.03, share: 0.9}"
# Seconds of trials per side: identical servers need their knees bracketed closely; the door decides in a few trials.
CLOSE, FAR = 20, 10
CAPACITY = "serving.capacity_not_worse"


def _capacity(pytester, target, baseline, budget, servers, goodput=ROOMY):
    """The capacity contract alone, the servers and this process ahead of other work on the machine (as the
    serving proofs: fixtures/cpu_share.py), where a cpu cgroup can be set."""
    profile = PROFILE.replace("{BUDGET}", str(budget)).replace("{GOODPUT}", goodput)
    args = ("-m", "serving", "-k", "capacity", f"--vllm-baseline-url={baseline}")
    if cpu_share.available() is not None:  # no cgroups here: the run as it is
        run_suites(pytester, *args, url=target, profile=profile)
    else:
        with cpu_share.measured_apart([(server.process.pid, None) for server in servers]):
            run_suites(pytester, *args, url=target, profile=profile)
    return pytester.path / "junit.xml"


def _interval(message: str) -> tuple[float, float]:
    found = re.search(r"capacity ratio target/baseline [0-9.]+, interval \[([0-9.]+), ([0-9.inf]+)\]", message)
    assert found, message
    return float(found.group(1)), float(found.group(2))


# Opt-in (make test-serving): at the tight objective a quarter of the runs still end undecided (TIGHT), which a pin
# of "passed" in CI cannot carry; the door's failure below is CI's capacity proof.
@pytest.mark.serving_proof
@pytest.mark.pins(healthy={CAPACITY})
def test_a_server_against_a_second_of_its_flags_keeps_up_with_as_many_requests(pytester, served):
    plain, twin = served.together("plain", "plain_twin")
    junit = _capacity(pytester, plain.url, twin.url, CLOSE, (plain, twin), goodput=TIGHT)
    assert_verdicts(junit, {CAPACITY: "passed"})
    figures = next(run.properties for run in contract_runs(junit) if run.key == CAPACITY)["vllm_figures"]
    low, _ = _interval(figures)
    assert low > 0.707, figures
    assert "warm-up apart: first request alone" in figures, figures  # the warm-up reported, never in a trial


@pytest.mark.pins(failed={CAPACITY})
def test_a_relay_admitting_one_request_at_a_time_fails_capacity_with_its_interval(pytester, served):
    plain, twin = served.together("plain", "plain_twin")
    door = AdmitAtMost(requests=1, path="/v1/completions")
    with FaultProxy(plain.url, rules=[door]) as held:
        junit = _capacity(pytester, held.url, twin.url, FAR, (plain, twin))
        assert held.hit_count(door) > 0  # requests really waited at the door
    assert_verdicts(junit, {CAPACITY: "passed"}, failed={CAPACITY})
    message = failed_checks(junit)[CAPACITY]
    low, high = _interval(message)
    assert high < 0.707, message
