"""The drain's judges on recorded drains, its stream sizing, its order in a run, and a stopped server's stop."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from pytest_vllm_conformance.connection.client import OpenStream
from pytest_vllm_conformance.connection.launcher import VllmServer
from suites.lifecycle import drain

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
    assert [line.split("::")[0].rsplit("/", 1)[-1] for line in tests[-4:]] == ["test_lifecycle.py"] * 4
    assert not any("test_lifecycle.py" in line for line in tests[:-4])
