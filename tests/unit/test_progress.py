"""A phase long enough to look hung says where it is: the embedded server's start, a serving measurement."""

from __future__ import annotations

import sys

import pytest

from pytest_vllm_conformance.connection.discovery import ModelCard, ServerFacts
from pytest_vllm_conformance.connection.launcher import VllmServer
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.plugin.progress import Progress
from suites.serving import rounds, serving_run
from suites.serving.loadgen import RequestTiming, Round


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_phase_speaks_once_it_has_been_quiet_for_ten_seconds_then_every_ten():
    clock, lines = Clock(), []
    tick = Progress(lines.append, lambda line: line.replace("sk-secret", "***"), clock=clock).phase("the start")
    for now, status in ((1, "a"), (9.9, "b"), (10, "c"), (15, "d"), (20.5, "e with sk-secret")):
        clock.now = now
        tick(status)
    assert lines == [
        "vllm-conformance: the start: c (10 s so far)",
        "vllm-conformance: the start: e with *** (20 s so far)",
    ]


def test_a_status_given_as_a_callable_is_built_only_when_a_line_is_due():
    clock, lines, built = Clock(), [], []

    def status() -> str:
        built.append(clock.now)
        return "reading the log"

    tick = Progress(lines.append, clock=clock).phase("the start")
    for now in (0.5, 1, 5, 10, 10.5, 20):
        clock.now = now
        tick(status)
    assert built == [10, 20]
    assert lines == [
        "vllm-conformance: the start: reading the log (10 s so far)",
        "vllm-conformance: the start: reading the log (20 s so far)",
    ]


def test_the_line_reaches_the_terminal_from_inside_a_captured_test(pytester):
    pytester.makepyfile(
        """
        from pytest_vllm_conformance.plugin.progress import Progress, terminal_writer

        def test_long(request):
            print("captured, not shown")
            Progress(terminal_writer(request.config), every=0.0).phase("the measurement")("3 rounds")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*vllm-conformance: the measurement: 3 rounds (0 s so far)*"])
    assert "captured, not shown" not in result.stdout.str()


def test_a_starting_server_is_described_by_its_log_s_last_line_with_the_key_masked(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "print('Loading weights took 0.1 s, key', os.environ['VLLM_API_KEY'], flush=True)\n"
        "time.sleep(30)\n"
    )
    fake.chmod(0o755)
    said: list[str] = []
    asked: list[object] = []
    server = VllmServer(
        tmp_path / "m", python=fake, api_key=Secret("sk-started-key"), startup_timeout=2.0, log_path=tmp_path / "s.log"
    )
    with pytest.raises(Exception, match="not healthy after 2 s"):
        server.start(asked.append)
    # The status is built only when a line is due: each poll hands over how to say it, not what it says.
    assert asked and all(callable(status) for status in asked)
    said = [status() for status in asked[-2:]]  # type: ignore[operator]
    assert all(line.startswith("starting vllm serve") for line in said)
    assert "Loading weights took 0.1 s, key ***" in said[-1]
    assert not any("sk-started-key" in line for line in said)


def test_a_serving_run_says_how_far_it_is():
    timing = RequestTiming(started=0.0, ended=2.0, completion_tokens=32)
    run = rounds.ServingRun(target=[Round((timing,), 0.0, 2.5)] * 3, baseline=[Round((timing,), 0.0, 2.0)] * 2)
    assert run.so_far() == "3 round(s) on the target, 2 on the baseline, 12 s of load"


def test_a_workload_longer_than_the_server_s_context_is_refused_with_the_server_s_number():
    facts = ServerFacts("http://127.0.0.1:9", "0.32.0", (ModelCard("tiny", 512),), "tiny")
    values = {"prompt_tokens": 480, "output_tokens": 64, "concurrency": 2, "requests": 4}
    with pytest.raises(rounds.NoPrompt) as refused:
        serving_run.plan(None, facts, values, None)  # type: ignore[arg-type]
    assert str(refused.value) == (
        "serving.prompt_tokens 480 and output_tokens 64 need 544 tokens of context, and http://127.0.0.1:9 serves "
        "tiny with max_model_len 512 (its /v1/models): lower them in the profile"
    )


def test_the_clock_of_a_phase_starts_when_it_is_asked_for():
    # The serving phase is asked for when the measurement starts, not at session start.
    clock, lines = Clock(), []
    progress = Progress(lines.append, clock=clock)
    clock.now = 100.0
    tick = progress.phase("late")
    clock.now = 105.0
    tick("x")
    assert lines == []
