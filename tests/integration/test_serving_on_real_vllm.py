"""The serving suite on real servers: a server against itself passes; one sequence at a time against the
default fails throughput and occupancy with the figures; 300 ms held in front of each request fails latency
and the report puts it on the ingress; an engine paused behind a healthy API server fails progress; a compiled
start against an eager one names the phase that grew. Short workloads (32 prompt and 64 output tokens, 32
requests a round): ratios and verdicts measured in one run, never an absolute time of this machine.

The proof against a saved run is opt-in (``make test-serving`` runs every proof here): three suite runs on
one server for a feature the first two proofs already exercise, which the 20-minute CI budget keeps out
(docs/testing.md)."""

import json
import os
import re
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from fixtures import cpu_share
from fixtures.fault_proxy import Delay, FaultProxy, Stretch
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from tests.conftest import requires_vllm, run_suites
from tests.support.processes import engine_core

pytestmark = [requires_vllm, pytest.mark.servers("plain", "one_seq")]
# The saved-run proof: opt-in (make test-serving), as the docstring says.
opt_in = pytest.mark.serving_proof

SERVING_PROFILE = """
profile: 1
name: serving-test
serving:
  concurrency: 8
  # Long enough that the eight requests overlap at the engine even on two busy cores.
  output_tokens: 64
  # One look of five round pairs, the fewest that decide, not the default eight: one sequence at a time measures
  # about 0.2 in every pair, and its rounds are slow.
  rounds: 5
  # A round of eight (the concurrency) and two warm-up requests: one sequence at a time serves a round in about
  # eight times its baseline's time, and the default 16 and 8 cost CI a minute more for the same verdicts.
  requests: 8
  warm_up_requests: 2
  slo: {SLO}
"""
# No goodput objective declared: capacity is not claimed here (its proofs: test_capacity_on_real_vllm.py).
NO_GOODPUT = {"serving.capacity_not_worse": "not claimed"}
# No objective: the latency contract judges nothing, so it is undecided, never passed.
NO_SLO = "{}"
# Generous: a healthy tiny model on two busy cores answers far sooner; the latency proof uses the fault's 300 ms.
GENEROUS_SLO = "{ttft_p50_seconds: 10, ttft_p99_seconds: 30, itl_p99_seconds: 5}"
PASSING = {
    "serving.load_success": "passed",
    "serving.latency_within_slo": "passed",
    "serving.occupancy": "passed",
    "serving.throughput_not_worse": "passed",
    "serving.latency_not_worse": "passed",
    "serving.progress_while_healthy": "passed",
}


# One request at a time: time to first token is then the server's prefill alone, so what the ingress holds is not
# lost in queueing (at concurrency 8 a delayed arrival also unloads the server: the two blur). Short answers: the
# proof judges first tokens only (occupancy, which needs long requests for a gauge sample to catch one running, is
# the two proofs above's). Two round pairs: 300 ms held is far outside the noise.
ONE_AT_A_TIME = """
profile: 1
name: serving-latency
serving: {concurrency: 1, requests: 8, warm_up_requests: 2, output_tokens: 32, rounds: 2, slo: {ttft_p50_seconds: 0.25}}
"""


def undecided_reasons(junit):
    """Contract id -> why it was undecided, for each undecided test."""
    return {run.key: run.message for run in contract_runs(junit) if run.verdict == "undecided"}


def _serving(pytester, url, *args, slo=NO_SLO, profile=SERVING_PROFILE):
    result = run_suites(pytester, "-m", "serving", *args, url=url, profile=profile.replace("{SLO}", slo))
    return result, pytester.path / "junit.xml"


# The gate's defaults (16 requests of 32 output tokens a round, up to five looks of eight round pairs) and
# generous objectives: the profile a user who declares only the concurrency gets, and what bench/serving_power.py
# measures.
DEFAULTS = """
profile: 1
name: serving-defaults
serving: {concurrency: 8, slo: {SLO}}
"""


@contextmanager
def held(*shares):
    """Each (server, share of one core; None: no cap) held so for the block, beside this process, ahead of other
    work on the machine (fixtures/cpu_share.py): both sides of a comparison alike, so they differ only in share."""
    why = cpu_share.available()
    if why:
        pytest.skip(f"the CPU-share proofs cannot run here: {why}")
    with cpu_share.measured_apart([(server.process.pid, share) for server, share in shares]):
        yield


@pytest.mark.servers("plain", "plain_twin")
@pytest.mark.pins(healthy=PASSING)
def test_a_server_against_an_identical_one_passes_every_serving_contract(pytester, served):
    plain, twin = served.together("plain", "plain_twin")
    with held((plain, 1.0), (twin, 1.0)):
        result, junit = _serving(
            pytester, plain.url, f"--vllm-baseline-url={twin.url}", slo=GENEROUS_SLO, profile=DEFAULTS
        )
    assert_verdicts(junit, {**PASSING, **NO_GOODPUT})
    assert result.ret == 0


@pytest.mark.servers("plain", "plain_twin")
@pytest.mark.pins(failed={"serving.throughput_not_worse", "serving.latency_not_worse"})
def test_a_server_given_three_quarters_of_its_baselines_cpu_fails_throughput_and_latency(pytester, served):
    """About a quarter slower (0.72-0.77 over 40 pairs, 2026-12-06): the first look or two decide it."""
    plain, twin = served.together("plain", "plain_twin")
    with held((plain, 0.75), (twin, 1.0)):
        _, junit = _serving(
            pytester,
            plain.url,
            f"--vllm-baseline-url={twin.url}",
            "-k",
            "not_worse",
            slo=GENEROUS_SLO,
            profile=DEFAULTS,
        )
    compared = {"serving.throughput_not_worse": "passed", "serving.latency_not_worse": "passed"}
    assert_verdicts(junit, {**compared, **NO_GOODPUT}, failed=set(compared))
    failed = failed_checks(junit)
    ratio = re.search(
        r"output rate \(median of a round\), target/baseline ([0-9.]+)", failed["serving.throughput_not_worse"]
    )
    assert ratio and float(ratio.group(1)) < 0.85, failed["serving.throughput_not_worse"]
    assert "time per output token" in failed["serving.latency_not_worse"], failed["serving.latency_not_worse"]


# A second proof of what the CPU share proves failing (make test-extended): 25 s of CI.
@pytest.mark.extended_proof
@pytest.mark.servers("plain", "plain_twin")
@pytest.mark.pins(failed={"serving.throughput_not_worse", "serving.latency_not_worse"})
def test_a_relay_stretching_the_targets_streams_by_half_fails_throughput_and_latency(pytester, served):
    """The slowdown an ingress adds on the client's side: each chunk leaves 1.5 times as long after the answer
    began as it came, the baseline behind the same relay code unstretched."""
    plain, twin = served.together("plain", "plain_twin")
    rule = Stretch(factor=1.5, path="/v1/completions")
    with FaultProxy(plain.url, rules=[rule]) as stretched, FaultProxy(twin.url) as relayed:
        with held((plain, 1.0), (twin, 1.0)):
            _, junit = _serving(
                pytester,
                stretched.url,
                f"--vllm-baseline-url={relayed.url}",
                "-k",
                "not_worse",
                slo=GENEROUS_SLO,
                profile=DEFAULTS,
            )
        assert stretched.hits[0] > 0
    compared = {"serving.throughput_not_worse": "passed", "serving.latency_not_worse": "passed"}
    assert_verdicts(junit, {**compared, **NO_GOODPUT}, failed=set(compared))
    ratio = re.search(r"target/baseline ([0-9.]+)", failed_checks(junit)["serving.throughput_not_worse"])
    assert ratio and float(ratio.group(1)) < 0.8, failed_checks(junit)["serving.throughput_not_worse"]


# A second queueing fault (make test-extended: a server start of its own). Prompts of 256 tokens: with the default
# 32, sixteen prompts a round are 512 tokens, and a budget of 16 a step cost the target 5 % of its output rate
# (2026-12-06, undecided); with 256 they are 4096 tokens, 256 steps of prefill a round where plain takes a few:
# output rate 0.465 of plain's, time to first token 0.178 (24 round pairs, 2026-12-06).
LONG_PROMPTS = """
profile: 1
name: serving-long-prompts
serving: {concurrency: 8, prompt_tokens: 256, slo: {SLO}}
"""


@pytest.mark.extended_proof
@pytest.mark.servers("plain", "small_batch")
@pytest.mark.pins(failed={"serving.throughput_not_worse", "serving.latency_not_worse"})
def test_a_step_of_sixteen_tokens_fails_throughput_and_latency_on_long_prompts(pytester, served):
    """--max-num-batched-tokens 16: chunked prefill spreads each round's prompts over many more engine steps, so
    first tokens come late and the output rate falls, while each step still runs all eight sequences."""
    plain, small = served.together("plain", "small_batch")
    with held((small, 1.0), (plain, 1.0)):
        _, junit = _serving(
            pytester,
            small.url,
            f"--vllm-baseline-url={plain.url}",
            "-k",
            "not_worse",
            slo=GENEROUS_SLO,
            profile=LONG_PROMPTS,
        )
    compared = {"serving.throughput_not_worse": "passed", "serving.latency_not_worse": "passed"}
    assert_verdicts(junit, {**compared, **NO_GOODPUT}, failed=set(compared))


ONE_SEQ_FAILS = {"serving.throughput_not_worse", "serving.occupancy", "serving.latency_not_worse"}


@pytest.mark.pins(failed=ONE_SEQ_FAILS)
def test_one_sequence_at_a_time_fails_throughput_occupancy_and_latency_with_the_figures(pytester, served):
    """Each request waits for the seven ahead of it: a tenth of the baseline's time to first token."""
    plain, one_seq = served.together("plain", "one_seq")
    with held((one_seq, None), (plain, None)):
        _, junit = _serving(pytester, one_seq.url, f"--vllm-baseline-url={plain.url}")
    # No objective declared: the latency figures are reported, and nothing is judged against them.
    expected = {**PASSING, "serving.latency_within_slo": "undecided"}
    assert_verdicts(junit, {**expected, **NO_GOODPUT}, failed=ONE_SEQ_FAILS)
    assert "no latency objective declared" in undecided_reasons(junit)["serving.latency_within_slo"]
    failed = failed_checks(junit)
    assert "running 1 of 8" in failed["serving.occupancy"], failed["serving.occupancy"]
    ratio = re.search(r"target/baseline ([0-9.]+)", failed["serving.throughput_not_worse"])
    assert ratio and float(ratio.group(1)) < 0.8, failed["serving.throughput_not_worse"]


@pytest.mark.pins(failed={"serving.latency_within_slo"})
def test_an_ingress_holding_each_request_300_ms_fails_latency_and_is_named(pytester, served):
    plain = served("plain")
    with FaultProxy(plain.url, rules=[Delay(seconds=0.3, path="/v1/completions")]) as ingress:
        _, junit = _serving(
            pytester, plain.url, f"--vllm-ingress-url={ingress.url}", "-k", "not occupancy", profile=ONE_AT_A_TIME
        )
    expected = {**PASSING, "serving.throughput_not_worse": "not claimed", "serving.latency_not_worse": "not claimed"}
    del expected["serving.occupancy"]
    assert_verdicts(junit, {**expected, **NO_GOODPUT}, failed={"serving.latency_within_slo"})
    message = failed_checks(junit)["serving.latency_within_slo"]
    added = re.search(r"the ingress adds ([0-9.]+) ms to TTFT p50", message)
    assert added and float(added.group(1)) >= 250, message


# Throughput alone is judged against a saved run: a short workload, four at a time (occupancy is not the point),
# its warm-up two rounds of four so the batch shapes the rounds use are served once before (16 output tokens
# and four warm-up requests: a saved round at half the speed of the next, a doctored 2x undecided).
SAVED_RUN = """
profile: 1
name: serving-saved
serving: {concurrency: 4, requests: 32, warm_up_requests: 8, output_tokens: 32}
"""
THROUGHPUT = ("-k", "throughput or load_success")


def _doctored_twice_as_fast(saved: Path, into: Path) -> Path:
    """The saving with every request (and round) taking half its time: a claim of twice the throughput."""
    data = json.loads(saved.read_text())
    for measured in data["rounds"]:
        measured["seconds"] /= 2
        for request in measured["requests"]:
            for key in ("started", "ended"):
                request[key] /= 2
            request["token_times"] = [t / 2 for t in request["token_times"]]
    into.write_text(json.dumps(data))
    return into


@opt_in
@pytest.mark.pins(failed={"serving.throughput_not_worse"}, healthy={"serving.load_success"})
def test_a_saved_run_is_a_baseline_itself_passes_and_a_file_claiming_twice_the_throughput_fails(pytester, served):
    plain = served("plain")
    saved = pytester.path / "saved-perf.json"
    _, junit = _serving(pytester, plain.url, *THROUGHPUT, f"--vllm-perf-save={saved}", profile=SAVED_RUN)
    assert_verdicts(junit, {"serving.load_success": "passed", "serving.throughput_not_worse": "not claimed"})
    assert json.loads(saved.read_text())["workload"]["concurrency"] == 4

    _, junit = _serving(pytester, plain.url, *THROUGHPUT, f"--vllm-perf-baseline-file={saved}", profile=SAVED_RUN)
    # Passed, or undecided where the machine's load moved between the saving and now (seen on a loaded
    # 2-core box: 0.715 [0.623, 1.294]); never failed.
    assert verdicts(junit)["serving.load_success"] == {"passed": 1}
    assert verdicts(junit)["serving.throughput_not_worse"] in ({"passed": 1}, {"undecided": 1}), failed_checks(junit)

    doctored = _doctored_twice_as_fast(saved, pytester.path / "doctored-perf.json")
    _, junit = _serving(pytester, plain.url, *THROUGHPUT, f"--vllm-perf-baseline-file={doctored}", profile=SAVED_RUN)
    assert_verdicts(
        junit,
        {"serving.load_success": "passed", "serving.throughput_not_worse": "passed"},
        failed={"serving.throughput_not_worse"},
    )
    message = failed_checks(junit)["serving.throughput_not_worse"]
    ratio = re.search(r"target/baseline ([0-9.]+)", message)
    assert ratio and float(ratio.group(1)) < 0.8, message
    assert "the saved run" in message and "doctored-perf.json" in message, message


PAUSED = """
profile: 1
name: serving-paused
serving: {concurrency: 1, progress_within_seconds: 5}
"""
# A plugin of the suites' run: the engine stops as the progress check starts, the run's start behind it.
PAUSE_WHEN_PROGRESS_STARTS = """
import os, signal

def pytest_runtest_call(item):
    if "progress_while_healthy" in item.nodeid:
        os.kill({pid}, signal.SIGSTOP)
"""


@pytest.mark.servers("plain")
@pytest.mark.pins(failed={"serving.progress_while_healthy"})
def test_an_engine_paused_behind_a_healthy_api_server_fails_progress_while_healthy(pytester, served):
    """In CI (about 9 s on a warm plain server): a stopped process cannot answer, so the verdict does not
    depend on the machine's speed; SIGCONT in a finally, so plain serves the tests after it. Stopped when the
    check starts, after discovery's one token: an engine hung before the run is discovery.ready_generates's."""
    plain = served("plain")
    assert plain.process is not None
    engine = engine_core(plain.process.pid)
    pytester.makepyfile(pause_engine=PAUSE_WHEN_PROGRESS_STARTS.format(pid=engine))
    try:
        _, junit = _serving(pytester, plain.url, "-k", "progress", "-p", "pause_engine", profile=PAUSED)
    finally:
        os.kill(engine, signal.SIGCONT)
    assert_verdicts(junit, {"serving.progress_while_healthy": "passed"}, failed={"serving.progress_while_healthy"})
    message = failed_checks(junit)["serving.progress_while_healthy"]
    assert "/health answered 200, but a request got no first token within 5" in message, message
    assert "a hung engine behind a healthy API server" in message, message


STARTUP = """
profile: 1
name: startup-phases
"""


@pytest.mark.servers("plain", "compiled")
@pytest.mark.pins(failed={"startup_log.phases_not_slower"})
def test_a_compiled_start_against_an_eager_baseline_names_the_phase_that_grew(pytester, served):
    """Two real starts' logs, no request: torch.compile grows engine_init about tenfold (22.8 s against 1.8 s on
    an idle 2-core box); the comparison names it with both figures."""
    plain, compiled = served.together("plain", "compiled")
    assert plain.log_path is not None and compiled.log_path is not None
    result = run_suites(
        pytester,
        "-m",
        "startup_log",
        f"--vllm-log={compiled.log_path}",
        f"--vllm-baseline-log={plain.log_path}",
        url=compiled.url,
        profile=STARTUP,
    )
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    assert set(failed) == {"startup_log.phases_not_slower"}, result.stdout.str()[-3000:]
    assert verdicts(junit)["startup_log.start_reached_ready"] == {"passed": 1}
    message = failed["startup_log.phases_not_slower"]
    assert re.search(r"engine_init took [0-9.]+ s, the baseline's [0-9.]+ s", message), message
