"""A server the plugin owns: its start timed to readiness; on SIGTERM, in-flight streams end as promised, new
requests are refused, it goes in time.

Managed mode only (``--vllm-serve``): a server given by URL is not the run's
to time or stop. The start's clocks (process and endpoint readiness, first
token) are read by the launcher as it starts the server: their checks only
judge that record, first in this module, so before the drain, and on xdist
workers too. The drain ends the run's server, so the feature runs after
every other test (its ``stops_server``); under pytest-xdist, whose other
workers may still need the server, the drain's checks are undecided, named.
What the deployment promises is ``lifecycle.drain_seconds`` (its
``--shutdown-timeout``); undeclared, the release's default, which on
0.28-0.32 aborts what is in flight. docs/lifecycle.md says what vLLM does,
by release.
"""

import pytest

from pytest_vllm_conformance import contract, each, undecided
from pytest_vllm_conformance.catalogue.cases import Named

from . import drain, readiness

# ---- the start, as the launcher timed it (read only: these run before the drain, and need nothing of it) ----


@pytest.fixture
def start_clocks(start, vllm_start_clocks):
    clocks = readiness.clocks_of(start, vllm_start_clocks)
    if clocks is None:
        undecided(readiness.NOT_TIMED)
    return clocks


# First of the module: a comparison only, before the clocks' own checks and the drain.
@contract("lifecycle.start_not_slower_than_baseline")
@each("case", readiness.start_clocks)
def test_start_not_slower_than_baseline(case, vllm_start_clocks, vllm_offline_expect, vllm_record, vllm_evidence):
    clocks = readiness.clocks_of(Named(case.start), vllm_start_clocks)
    if clocks is None:
        undecided(readiness.NOT_TIMED)
    seconds = getattr(clocks, case.clock)
    baseline = vllm_offline_expect.baseline
    before, why_not = readiness.baseline_clock(baseline.data.get("observed") if baseline else None, case)
    growth = vllm_offline_expect.declared("lifecycle", "max_start_growth")
    vllm_record("figures", readiness.comparison_line(case, seconds, before, growth.value, growth.basis))
    if seconds is None:
        undecided(readiness.not_read(clocks, case.clock))
    if before is None:
        undecided(why_not)
    if growth.value is None:
        undecided(readiness.NO_TOLERANCE)
    problem = readiness.slower(seconds, before, growth.value)
    assert problem is None, f"the {case.start} start's {readiness.CLOCKS[case.clock]} {problem} ({growth.basis})"
    vllm_evidence.judged(1, "clock compared with the baseline's")


@contract("lifecycle.start_clocks_read")
@each("start", readiness.starts)
def test_start_clocks_read(start, start_clocks, vllm_record, vllm_evidence):
    for name, seconds in start_clocks.read().items():
        vllm_record(f"{start}_start_{name}_seconds", f"{seconds:.2f}")
    vllm_record("figures", f"{start} start, {start_clocks.line()}")
    faults = readiness.faults(start_clocks)
    assert not faults, "the start did not reach readiness: " + "; ".join(faults)
    unread = readiness.unread(start_clocks)
    if unread:
        undecided("; ".join(unread))
    vllm_evidence.judged(len(start_clocks.read()), "clocks of the start", missing="no clock of the start was read")


@contract("lifecycle.ready_within_objective")
@each("start", readiness.starts)
def test_ready_within_objective(start, start_clocks, vllm_offline_expect, vllm_record, vllm_evidence):
    objective = vllm_offline_expect.declared("lifecycle", "ready_within_seconds")
    vllm_record("figures", f"objective {objective.value:g} s; {start} start, {start_clocks.line()}")
    if start_clocks.endpoint_ready is None and "endpoint_ready" in start_clocks.unread:
        undecided(f"endpoint readiness was not read: {start_clocks.unread['endpoint_ready']}")
    missed = readiness.objective_missed(start_clocks, objective.value, objective.basis)
    assert missed is None, missed
    vllm_evidence.judged(1, "start timed to endpoint readiness")


# ---- SIGTERM with streams in flight ----


@pytest.fixture(scope="module")
def drained(vllm_managed_server, vllm_client, vllm_facts, vllm_expect, vllm_exclusive, vllm_progress):
    if vllm_managed_server is None:
        undecided(drain.NOT_OWNED)
    plan = drain.plan_for(vllm_expect, vllm_facts)
    with vllm_exclusive():
        try:
            return vllm_client.run(
                lambda client: drain.measure(client, vllm_managed_server, plan, vllm_progress.phase("the drain"))
            )
        except drain.DrainNotMeasured as exc:
            pytest.fail(f"the drain could not be measured: {exc}", pytrace=False)


@contract("lifecycle.in_flight_drained")
def test_in_flight_drained(drained, vllm_expect, vllm_record, vllm_evidence):
    # Undeclared, the release's default is what is judged: the report says so, and which flag drains instead.
    note = f"; {drain.abort_note(drained, vllm_expect)}" if drained.plan.drain_seconds == 0 else ""
    vllm_record("figures", drained.summary() + note)
    vllm_evidence.judged(len(drained.in_flight()), "streams in flight at SIGTERM", missing=drain.NONE_IN_FLIGHT)
    problems = drain.in_flight_problems(drained)
    assert not problems, drain.say(problems, drained.plan, vllm_expect)


@contract("lifecycle.new_requests_refused")
def test_new_requests_refused(drained, vllm_record, vllm_evidence):
    vllm_record("figures", f"requests sent after SIGTERM: {drain.outcomes(drained)}")
    judged = drain.judged_knocks(drained)
    vllm_evidence.judged(len(judged), "requests sent past the grace", missing="no request was sent past the grace")
    problems = drain.knock_problems(drained)
    assert not problems, f"{len(problems)} of {len(judged)} requests sent after SIGTERM: " + "; ".join(problems[:5])


@contract("lifecycle.health_not_ok_while_draining")
def test_health_not_ok_while_draining(drained, vllm_record, vllm_evidence):
    vllm_record("figures", f"/health after SIGTERM: {drain.health_outcomes(drained)}")
    judged = [probe for probe in drained.health if probe.sent > drained.plan.signal_grace_seconds]
    vllm_evidence.judged(len(judged), "/health probes past the grace", missing="no /health probe after the grace")
    problems = drain.health_problems(drained)
    assert not problems, "; ".join(problems)


@contract("lifecycle.exits_within_drain")
def test_exits_within_drain(drained, vllm_evidence):
    problem = drain.exit_problem(drained)
    assert problem is None, problem
    vllm_evidence.judged(1, "exits")
