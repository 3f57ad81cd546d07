"""The drain's judges on recorded drains, its stream sizing, its order in a run, and a stopped server's stop; the
start's clocks as the launcher reads them, and their checks on a stood-in record."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from pytest_vllm_conformance.connection.client import OpenStream
from pytest_vllm_conformance.connection.launcher import StartClocks, VllmServer
from suites.lifecycle import drain, readiness

PLAN = drain.Plan(
    model="m", drain_seconds=10, exit_margin_seconds=15, refusal_seconds=5, signal_grace_seconds=1, max_model_len=512
)


def _body(tokens: int, finish: str | None = "length", done: bool = True, error: bool = False) -> bytes:
    events = [{"choices": [{"index": 0, "text": "a", "finish_reason": None}]}]
    if error:
        events.append({"error": {"message": "aborted", "code": 500}})
    events.append({"choices": [{"index": 0, "text": "", "finish_reason": finish}]})
    events.append({"choices": [], "usage": {"completion_tokens": tokens}})
    body = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def _stream(ended: float | None, body: bytes, broken: str | None = None) -> drain.InFlight:
    stream = OpenStream("POST", "/v1/completions", started=0.0, status=200, first_chunk_at=1.0, ended_at=ended)
    stream.body, stream.broken = body, broken
    return drain.InFlight(stream, asked_tokens=100)


def _drain(plan: drain.Plan = PLAN, *streams: drain.InFlight) -> drain.Drain:
    return drain.Drain(plan, tokens_per_second=100.0, signalled=2.0, streams=list(streams))


def test_a_stream_that_ends_whole_within_the_drain_keeps_it():
    drained = _drain(PLAN, _stream(6.0, _body(100)))
    assert drain.stream_end(drained, drained.streams[0]).whole
    assert drain.in_flight_problems(drained) == []


def test_each_way_a_stream_is_not_whole_is_named():
    drained = _drain(
        PLAN,
        _stream(3.0, _body(40, finish="abort")),
        _stream(3.0, _body(40, finish=None, done=False), broken="RemoteProtocolError: peer closed connection"),
        _stream(3.0, _body(100, error=True)),
        _stream(3.0, _body(100, done=False)),
        _stream(20.0, _body(100)),
    )
    problems = drain.in_flight_problems(drained)
    assert len(problems) == 5
    assert "finish_reason abort" in problems[0]
    assert "cut: RemoteProtocolError" in problems[1]
    assert "an error event" in problems[2]
    assert "[DONE]" in problems[3]
    assert "past the drain of 10 s" in problems[4]
    assert drain.aborted(drained) == 4


def test_a_stream_over_before_the_signal_is_not_judged():
    drained = _drain(PLAN, _stream(1.5, _body(40, finish="abort")))
    assert drained.in_flight() == []
    assert drain.in_flight_problems(drained) == []


def test_without_a_promised_drain_an_abort_keeps_the_contract_but_a_hanging_stream_does_not():
    plan = drain.Plan(model="m", drain_seconds=0, exit_margin_seconds=15, refusal_seconds=5, signal_grace_seconds=1)
    assert drain.in_flight_problems(_drain(plan, _stream(3.0, _body(40, finish="abort")))) == []
    hanging = _drain(plan, _stream(None, b""))
    hanging.streams[0].left_open, hanging.streams[0].stream.last_chunk_at, hanging.watched_seconds = True, 2.1, 16.0
    assert drain.in_flight_problems(hanging) == [
        "stream 1: still open 16.0 s after SIGTERM, neither finished nor closed (its last byte at 0.1 s)"
    ]


def test_new_requests_refused_retryably_or_at_the_door_pass_and_hung_or_served_ones_fail():
    drained = _drain()
    drained.knocks = [
        drain.Knock(0.0, 0.01, status=500),  # sent with the signal: within its grace, not judged
        drain.Knock(1.1, 0.01, status=503),
        drain.Knock(1.15, 0.01, failure="POST /v1/completions: ConnectError: All connection attempts failed"),
        drain.Knock(1.2, 5.0, failure="no complete answer within 5 s", hung=True),
        drain.Knock(1.7, 0.3, status=200),
        drain.Knock(2.2, 0.01, status=500),
    ]
    problems = drain.knock_problems(drained)
    assert [p.split(":")[0] for p in problems] == [
        "sent 1.2 s after SIGTERM",
        "sent 1.7 s after SIGTERM",
        "sent 2.2 s after SIGTERM",
    ]
    assert "hung" in problems[0] and "answered 200" in problems[1] and "not a refusal" in problems[2]
    assert drain.outcomes(drained) == "500 x2, 503 x1, connection refused x1, hung x1, 200 x1"


def test_health_is_judged_after_its_grace_only():
    drained = _drain()
    drained.health = [drain.Probe(0.1, 200), drain.Probe(0.9, 200), drain.Probe(1.5, None, "Connection refused")]
    assert drain.health_problems(drained) == []
    drained.health.append(drain.Probe(2.0, 200))
    assert drain.health_problems(drained)[0].startswith("/health answered 200 1 time(s) from 2.0 to 2.0 s")
    assert drain.health_outcomes(drained) == "200 x3, connection refused x1 (200 until 2.0 s after SIGTERM)"


def test_the_exit_is_judged_on_the_whole_group():
    drained = _drain()
    drained.exited_after, drained.tree_gone_after, drained.watched_seconds = 4.0, 4.5, 4.5
    assert drain.exit_problem(drained) is None
    drained.tree_gone_after, drained.watched_seconds = None, 30.0
    assert "its main process exited after 4.0 s, but its group still ran at 30.0 s" in str(drain.exit_problem(drained))
    drained.exited_after = None
    assert "still running 30.0 s after SIGTERM" in str(drain.exit_problem(drained))


def test_streams_are_sized_to_outlast_the_signal_within_the_context():
    # A third of a 10 s drain at 100 tokens a second; a short drain still gets two seconds.
    assert drain.stream_tokens(PLAN, 100.0) == int(100 * 10 / 3)
    short = drain.Plan(model="m", drain_seconds=0, exit_margin_seconds=1, refusal_seconds=1, signal_grace_seconds=1)
    assert drain.stream_tokens(short, 100.0) == 200
    assert drain.stream_tokens(PLAN, 100_000.0) == 512 - 16


def test_a_server_stopped_by_its_own_sigterm_is_stopped_again_harmlessly_with_its_group(tmp_path):
    # What the drain leaves at session end: the main process gone, a child of its group maybe still there.
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "signal.signal(signal.SIGTERM, lambda *a: os._exit(0))\n"
        "time.sleep(60)\n"
    )
    fake.chmod(0o755)
    server = VllmServer(tmp_path / "m", python=fake, log_path=tmp_path / "serve.log").launch()
    time.sleep(1.0)
    server.terminate_main()
    deadline = time.monotonic() + 10
    while server.exit_code() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.exit_code() == 0
    assert server.tree_alive()  # the child outlived it
    process = server.process
    assert process is not None
    server.stop()
    assert not _group_alive(process)
    server.stop()  # twice: nothing left to do


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    import os

    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_drain_runs_after_every_other_test_whatever_the_files_order(pytester):
    from tests.conftest import SUITES

    # test_lifecycle.py given first: its tests still come last, since they stop the server.
    files = [
        str(SUITES / name)
        for name in ("lifecycle/test_lifecycle.py", "discovery/test_discovery.py", "wire/test_wire.py")
    ]
    result = pytester.runpytest_subprocess(*files, "--collect-only", "-q", "-p", "no:cacheprovider")
    tests = [line for line in result.stdout.lines if "::test_" in line]
    assert len(tests) > 8
    assert [line.split("::")[0].rsplit("/", 1)[-1] for line in tests[-7:]] == ["test_lifecycle.py"] * 7
    assert not any("test_lifecycle.py" in line for line in tests[:-7])
    # The start's clocks, read from the launcher's record (against a baseline's first), come before the drain that
    # stops the server. (Without a target to read the cases from, each has the one case "none".)
    assert [line.split("::")[1].split("[")[0] for line in tests[-7:-4]] == [
        "test_start_not_slower_than_baseline",
        "test_start_clocks_read",
        "test_ready_within_objective",
    ]


# ---- the start's clocks ------------------------------------------------------------------------------------------

# Stands in for vllm serve: healthy at once, its model listed LISTED_AFTER seconds later, its first token answered
# with the status COMPLETION_STATUS.
FAKE_VLLM = """#!{python}
import http.server, json, os, sys, time
port = int(sys.argv[sys.argv.index('--port') + 1])
name = sys.argv[sys.argv.index('--served-model-name') + 1]
begun = time.monotonic()
class Server(http.server.BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status); self.send_header('Content-Length', str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        listed = time.monotonic() - begun > float(os.environ['LISTED_AFTER'])
        self.answer(200, {{'data': [{{'id': name}}] if listed else []}} if self.path == '/v1/models' else {{}})
    def do_POST(self):
        self.rfile.read(int(self.headers['Content-Length']))
        self.answer(int(os.environ['COMPLETION_STATUS']), {{'choices': [{{'text': 'a'}}]}})
    def log_message(self, *args):
        pass
http.server.HTTPServer(('127.0.0.1', port), Server).serve_forever()
"""


def _started(tmp_path, monkeypatch, listed_after: float, completion_status: int) -> StartClocks:
    fake = tmp_path / "python"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("LISTED_AFTER", str(listed_after))
    monkeypatch.setenv("COMPLETION_STATUS", str(completion_status))
    server = VllmServer(tmp_path / "m", python=fake, startup_timeout=30.0, log_path=tmp_path / "serve.log")
    try:
        server.start(readiness=True)
    finally:
        server.stop()
    assert server.clocks is not None
    return server.clocks


def test_the_launcher_times_health_then_the_listed_model_then_a_first_token(tmp_path, monkeypatch):
    clocks = _started(tmp_path, monkeypatch, listed_after=0.5, completion_status=200)
    assert (clocks.faults, clocks.unread) == ({}, {})
    assert list(clocks.read()) == ["process_ready", "endpoint_ready", "first_token"]
    assert clocks.process_ready is not None and clocks.endpoint_ready is not None and clocks.first_token is not None
    assert clocks.process_ready <= clocks.endpoint_ready <= clocks.first_token
    assert "endpoint ready (/v1/models lists the model) " in clocks.line()
    assert StartClocks.from_dict(clocks.to_dict()) == clocks  # as xdist workers receive it


def test_a_failed_first_token_is_the_server_s_fault_and_a_refused_one_is_unread(tmp_path, monkeypatch):
    failed = _started(tmp_path, monkeypatch, listed_after=0.0, completion_status=500)
    assert failed.first_token is None and "answered 500" in failed.faults["first_token"]
    assert readiness.faults(failed) == [f"first token: {failed.faults['first_token']}"]
    refused = _started(tmp_path, monkeypatch, listed_after=0.0, completion_status=404)
    assert refused.faults == {} and "was refused (404)" in refused.unread["first_token"]


def test_the_objective_is_kept_at_or_under_its_seconds_and_missed_with_every_clock_named():
    clocks = StartClocks(process_ready=20.0, endpoint_ready=20.5, first_token=21.0)
    assert readiness.objective_missed(clocks, 20.5, "declared") is None
    missed = readiness.objective_missed(clocks, 20.0, "declared")
    assert missed is not None and "took 20.50 s" in missed and "first token 21.00 s" in missed
    never = StartClocks(process_ready=20.0, faults={"endpoint_ready": "never listed"})
    assert "was never reached" in (readiness.objective_missed(never, 600, "declared") or "")


# Stands in for the server the plugin would start (--vllm-serve): its clocks as the launcher would have read them.
FAKE_TIMED_SERVER = """
from pathlib import Path

from pytest_vllm_conformance.plugin import hooks
from pytest_vllm_conformance.connection.discovery import ModelCard, ServerFacts
from pytest_vllm_conformance.connection.connect import ServerConnection
from pytest_vllm_conformance.connection.launcher import StartClocks


class TimedServer:
    log_path = Path({log!r})
    clocks = StartClocks(**{clocks!r})

    def stop(self):
        pass

    def remove_own_log(self):
        pass


def pytest_configure(config):
    facts = ServerFacts("http://127.0.0.1:9", "0.32.0", (ModelCard("m", 512),), "m")
    earlier = tuple(StartClocks(**clocks) for clocks in {earlier!r})
    hooks.establish = lambda settings, known_routes=None, **how: ServerConnection(
        facts, facts.url, TimedServer(), earlier_starts=earlier
    )
"""
CLOCKS_CHECKS = ("lifecycle.start_clocks_read", "lifecycle.ready_within_objective")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
@pytest.mark.pins(failed=set(CLOCKS_CHECKS))
def test_a_start_past_its_objective_or_without_a_first_token_fails_by_id(pytester, workers):
    from fixtures.verdicts import assert_verdicts, failed_checks

    clocks = {"process_ready": 21.0, "endpoint_ready": 21.25, "faults": {"first_token": "answered 500: 'boom'"}}
    junit = _clocks_run(pytester, clocks, "lifecycle:\n  ready_within_seconds: 0.001\n", *workers)
    assert_verdicts(junit, dict.fromkeys(CLOCKS_CHECKS, "failed"))
    failed = failed_checks(junit)
    objective = failed["lifecycle.ready_within_objective[first]"]
    assert "took 21.25 s, past lifecycle.ready_within_seconds 0.001 s" in objective
    assert "first token: answered 500: 'boom'" in failed["lifecycle.start_clocks_read[first]"]
    assert "vllm_first_start_endpoint_ready_seconds" in junit.read_text()


@pytest.mark.pins(failed={"lifecycle.ready_within_objective"}, healthy={"lifecycle.start_clocks_read"})
def test_a_second_start_is_reported_apart_from_the_first(pytester):
    # --vllm-serve-second-start: the first start timed and stopped, the run's server the second (warm caches).
    first = {"process_ready": 40.0, "endpoint_ready": 40.25, "first_token": 41.0}
    second = {"process_ready": 20.0, "endpoint_ready": 20.25, "first_token": 20.5}
    junit = _clocks_run(
        pytester, second, "lifecycle:\n  ready_within_seconds: 30\n", "--vllm-serve-second-start", earlier=(first,)
    )
    from fixtures.verdicts import assert_tests, failed_checks

    assert_tests(
        junit,
        {
            "lifecycle.start_clocks_read[first]": "passed",
            "lifecycle.start_clocks_read[second]": "passed",
            "lifecycle.ready_within_objective[second]": "passed",
        },
    )
    assert (
        "took 40.25 s, past lifecycle.ready_within_seconds 30 s"
        in failed_checks(junit)["lifecycle.ready_within_objective[first]"]
    )
    text = junit.read_text()
    assert re.search(r"vllm_first_start_endpoint_ready_seconds\W+40\.25", text)
    assert re.search(r"vllm_second_start_endpoint_ready_seconds\W+20\.25", text)


def test_the_first_of_two_starts_is_timed_stopped_and_its_log_removed(tmp_path, monkeypatch):
    from pytest_vllm_conformance.connection import connect
    from pytest_vllm_conformance.connection.settings import Settings

    fake = tmp_path / "python"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("LISTED_AFTER", "0")
    monkeypatch.setenv("COMPLETION_STATUS", "200")
    kept = tmp_path / "logs" / "serve.log"
    settings = Settings(serve=tmp_path / "m", serve_python=fake, serve_timeout=30.0, serve_log=kept)
    clocks = connect._first_start(settings, None)
    assert list(clocks.read()) == ["process_ready", "endpoint_ready", "first_token"]
    assert (tmp_path / "logs" / "serve.first.log").is_file() and not kept.exists()  # the tested server's log is apart


def _clocks_run(pytester, clocks: dict, profile: str, *args: str, earlier: tuple[dict, ...] = ()):
    from tests.conftest import SUITES

    log = pytester.path / "serve.log"
    log.write_text("")
    pytester.makepyfile(fake_timed=FAKE_TIMED_SERVER.format(log=str(log), clocks=clocks, earlier=earlier))
    (pytester.path / "profile.yaml").write_text(f"profile: 1\nname: timed\n{profile}")
    junit = pytester.path / "junit.xml"
    pytester.runpytest_subprocess(
        str(SUITES / "lifecycle" / "test_lifecycle.py"),
        "-k",
        "start_clocks or ready_within",
        "-p",
        "fake_timed",
        f"--vllm-serve={pytester.path}",  # a folder that is there (the stand-in serves nothing from it)
        f"--vllm-profile={pytester.path / 'profile.yaml'}",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *args,
        timeout=300,
    )
    return junit


def test_a_clock_is_held_to_the_baseline_s_times_one_plus_the_declared_growth():
    case = readiness.StartClock("first", "endpoint_ready")
    assert readiness.slower(30.0, 20.0, 0.5) is None
    problem = readiness.slower(31.0, 20.0, 0.5)
    assert problem == (
        "took 31.00 s, the baseline's 20.00 s (1.6 times): past 1 + lifecycle.max_start_growth = 1.5 times it (30.00 s)"
    )
    assert readiness.baseline_clock({"start_clocks": {"first": {"endpoint_ready": 20}}}, case) == (20.0, "")
    missing, why = readiness.baseline_clock({"start_clocks": {"first": {}}}, case)
    assert missing is None and "has no endpoint ready" in why
    none, why = readiness.baseline_clock({}, case)
    assert none is None and "holds no start clocks" in why and "--vllm-serve" in why
    assert "no max growth declared" in readiness.comparison_line(case, 31.0, 20.0, None, "not declared")
