"""The server's start-up log holds nothing the profile fails on; the rest is reported.

Reads ``--vllm-log FILE`` (any vLLM log; no server needed) or the log of the
server the plugin started. One test per kind of finding (the V1 model-runner
fallback, legacy RoPE rewrites, the scale-out-disabled notice, unknown
``VLLM_*`` variables, deprecated entrypoints and flags): a kind listed in
``startup_log.fail_on`` fails, quoting each line with its number; any other
kind passes, and its lines are recorded as JUnit properties
(``vllm_startup_log_<kind>``).

The start-up phases (weights load, compilation, profiling with KV-cache
allocation and warm-up, ready) are recorded with their durations
(``vllm_startup_phase_<name>_seconds``); with ``--vllm-baseline-log FILE``
the phase that grew beyond the stated tolerance is named; a phase the
baseline shows and the target's log does not (a reworded line) was not
compared, so the comparison is undecided, naming it. No test here sends a
request: each records the log lines or phases it judged as its evidence.
"""

import pytest

from pytest_vllm_conformance import contract, each, undecided

from .log_reading import (
    LOG_ORIGIN,
    LogUnreadable,
    grown,
    log_clocks,
    not_compared,
    read_startup_log,
    startup_log_findings,
    startup_phases,
)

NO_LOG = "no vLLM log given (--vllm-log=FILE, or the server the plugin starts with --vllm-serve)"


@pytest.fixture(scope="module")
def startup_log(vllm_log_path, vllm_offline_expect):
    """The server's log (--vllm-log, else the embedded server's), scanned once for start-up findings."""
    if vllm_log_path is None:
        pytest.fail(NO_LOG, pytrace=False)
    try:
        return read_startup_log(vllm_log_path, vllm_offline_expect)
    except LogUnreadable as exc:
        pytest.fail(str(exc), pytrace=False)


@contract("startup_log.declared_findings_absent")
@each("finding", startup_log_findings)
def test_declared_findings_absent(finding, startup_log, vllm_offline_expect, vllm_record, vllm_evidence):
    # No HTTP here: what was judged is the log's lines, each matched against the finding's patterns.
    vllm_evidence.judged(startup_log.total_lines, "log lines", missing="the log has no line to read")
    fail_on = vllm_offline_expect.declared("startup_log", "fail_on")
    lines = startup_log.lines(finding)
    for line in lines:
        vllm_record(f"startup_log_{finding}", line.quote(startup_log.path))
    if lines and finding.kind in fail_on.value:
        pytest.fail(
            f"{finding}: {finding.meaning}, and startup_log.fail_on lists it ({fail_on.basis}):\n"
            f"{startup_log.quote(finding)}",
            pytrace=False,
        )


@contract("startup_log.start_reached_ready")
def test_start_reached_ready(startup_log, vllm_offline_expect, vllm_record, vllm_evidence):
    seen = startup_phases(startup_log.path, vllm_offline_expect.release.startup_log_phases)
    vllm_evidence.judged(len(seen.seconds), "start-up phases", missing="the log shows no start-up phase")
    for name, seconds in seen.seconds.items():
        vllm_record(f"startup_phase_{name}_seconds", f"{seconds:.2f}")
    vllm_record("figures", seen.line())
    assert "ready" in seen.seconds, f"the log shows no start reaching the point where it listens: {seen.line()}"


@contract("startup_log.phases_not_slower")
def test_phases_not_slower(startup_log, vllm_settings, vllm_offline_expect, vllm_record, vllm_evidence):
    fact = vllm_offline_expect.release.startup_log_phases
    target = startup_phases(startup_log.path, fact)
    try:
        baseline = startup_phases(vllm_settings.baseline_log, fact)
    except LogUnreadable as exc:
        pytest.fail(f"--vllm-baseline-log: {exc}", pytrace=False)
    vllm_record("figures", f"{target.line()}; baseline {baseline.line()}")
    assert "ready" in baseline.seconds, f"the baseline log shows no complete start to compare with: {baseline.line()}"
    growth = vllm_offline_expect.declared("startup_log", "max_phase_growth")
    seconds = vllm_offline_expect.declared("startup_log", "min_phase_growth_seconds")
    grew = grown(target, baseline, max_growth=growth.value, min_seconds=seconds.value)
    assert not grew, (
        f"start-up phases grew beyond {growth.value:.0%} and {seconds.value:g} s ({growth.basis}): {'; '.join(grew)}"
    )
    # Only after the growth: a phase that grew is a finding whatever else the target's log lacks.
    unjudged = not_compared(target, baseline)
    if unjudged:
        undecided("; ".join(unjudged))
    vllm_evidence.judged(len(target.seconds), "start-up phases compared with the baseline's")


@contract("startup_log.ready_within_objective")
def test_ready_within_objective(startup_log, vllm_offline_expect, vllm_record, vllm_evidence):
    clocks = log_clocks(startup_log.path, vllm_offline_expect.release.startup_log_clocks)
    objective = vllm_offline_expect.declared("lifecycle", "ready_within_seconds")
    for name, seconds in clocks.seconds.items():
        vllm_record(f"log_start_{name}_seconds", f"{seconds:.0f}")
    vllm_record("figures", f"objective {objective.value:g} s; {clocks.line()}")
    ready = clocks.seconds.get("endpoint_ready")
    assert ready is not None, f"the log shows no start reaching endpoint readiness: {clocks.line()}"
    assert ready <= objective.value, (
        f"endpoint readiness {ready:.0f} s {LOG_ORIGIN}, past lifecycle.ready_within_seconds {objective.value:g} s "
        f"({objective.basis}); {clocks.line()}"
    )
    vllm_evidence.judged(len(clocks.seconds), "start clocks the log shows")
