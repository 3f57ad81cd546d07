"""SIGTERM on a server the plugin owns: in-flight streams end as promised, new requests are refused, it goes in time.

Managed mode only (``--vllm-serve``): a server given by URL is not the run's
to stop. The drain ends the run's server, so these checks run after every
other test (the feature's ``stops_server``); under pytest-xdist, whose other
workers may still need the server, they are undecided, named. What the
deployment promises is ``lifecycle.drain_seconds`` (its ``--shutdown-timeout``);
undeclared, the release's default, which on 0.28-0.32 aborts what is in
flight. docs/lifecycle.md says what vLLM does, by release.
"""

import pytest

from pytest_vllm_conformance import contract, undecided

from . import drain


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
