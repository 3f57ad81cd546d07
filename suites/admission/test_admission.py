"""Requests within the declared queue bound are served; a burst past it is refused fast with 503.

Opt-in: the burst loads the server, so it runs only where the profile
declares admission control (``admission: {max_queued_requests: N}``, the
server's ``--max-num-queued-reqs``). vLLM bounds unfinished requests,
running or waiting, so the bound is filled first: N long streamed requests
are held until each has streamed its first token, then ``burst_requests``
more go out at once, then the held ones are hung up on. All N must have
been admitted and every request of the burst refused, before any work,
with vLLM's ErrorResponse. Nothing else may talk to the server meanwhile:
under pytest-xdist the other workers wait (``vllm_exclusive``).
"""

import pytest

from pytest_vllm_conformance import contract, fact_fixture
from pytest_vllm_conformance.protocol.error_envelope import error
from pytest_vllm_conformance.protocol.sample_stats import percentile

from . import queue_burst

CAPACITY_WITHIN = 10.0


@pytest.fixture(scope="module")
def bound(vllm_expect):
    return vllm_expect.declared("admission", "max_queued_requests")


rejection = fact_fixture("admission_rejection")


@pytest.fixture(scope="module")
def burst(bound, rejection, vllm_client, vllm_facts, vllm_expect, vllm_exclusive):
    with vllm_exclusive():
        try:
            return queue_burst.burst_past_the_bound(
                vllm_client, vllm_facts, vllm_expect, bound.value, rejection["status"]
            )
        except queue_burst.BoundNotHeld as void:
            pytest.skip(f"could not run: {void}")


@contract("admission.burst_bounded")
def test_burst_bounded(burst, bound, vllm_record, vllm_evidence):
    vllm_record("admission_burst", burst.summary())
    vllm_evidence.judged(len(burst.answered), "burst answers", missing=f"the burst got no answer: {burst.summary()}")
    refused_within = burst.held_refused
    assert not refused_within, (
        f"with max_queued_requests {bound}, {len(refused_within)} of the {len(burst.held)} requests within the "
        f"bound were not admitted: {[(h.status, h.detail[:120]) for h in refused_within]} "
        "(is --max-num-queued-reqs lower than declared?)"
    )
    assert not burst.unanswered and not burst.other, f"{burst.summary()}: expected only refusals"
    assert not burst.served, (
        f"{burst.summary()}: with the bound of {bound} filled, {len(burst.served)} more were served, so the server "
        "queues past its bound (is --max-num-queued-reqs set, and to the declared value?)"
    )


@contract("admission.rejection_fast")
def test_rejection_fast(burst, vllm_expect, vllm_record, vllm_evidence):
    seconds = burst.rejection_seconds()
    if not seconds:
        pytest.skip("could not run: the burst had no refusal to time (see admission.burst_bounded)")
    vllm_evidence.judged(len(seconds), "timed refusals")
    p50, p99, slowest = percentile(seconds, 50), percentile(seconds, 99), max(seconds)
    vllm_record("admission_rejection_p50_seconds", f"{p50:.3f}")
    vllm_record("admission_rejection_p99_seconds", f"{p99:.3f}")
    limit = vllm_expect.declared("admission", "max_rejection_seconds")
    tries = "".join(f"{s:.3f} s, " for s in burst.slower_tries)
    assert min((slowest, *burst.slower_tries)) <= limit.value, (
        f"the slowest of {len(seconds)} refusals took {tries}{slowest:.3f} s in {len(burst.slower_tries) + 1} "
        f"burst(s), over the bound of {limit.value:g} s ({limit.basis}) (p50 {p50:.3f} s, p99 {p99:.3f} s): "
        "refusals wait instead of being answered at once"
    )


@contract("admission.rejection_error_response")
def test_rejection_error_response(burst, rejection, vllm_expect, vllm_evidence):
    if not burst.rejected:
        pytest.skip("could not run: the burst had no refusal (see admission.burst_bounded)")
    vllm_evidence.judged(len(burst.rejected), "refusals")
    expected = (rejection["error_type"], None, rejection["status"])
    for response in burst.rejected:
        refused = error(response)
        assert refused, f"a refusal is not an ErrorResponse: {response.describe()} {response.text[:200]!r}"
        seen = (refused.get("type"), refused.get("param"), refused.get("code"))
        assert seen == expected and refused.get("message") in rejection["messages"], (
            f"a refusal should be {vllm_expect.version_label}'s ErrorResponse (type, param, code) {expected} "
            f"with one of its admission messages, got {seen} {refused.get('message')!r}"
        )


@contract("admission.rejections_counted")
def test_rejections_counted(burst, vllm_client, vllm_expect, vllm_evidence):
    counter = vllm_expect.release.admission_rejection_counter
    after = queue_burst.metric_total(vllm_client, vllm_expect, counter)
    assert burst.counted_before is not None and after is not None, f"/metrics has no {counter} to count refusals with"
    grown = after - burst.counted_before
    refused = len(burst.rejected) + len(burst.held_refused)
    assert grown == refused, f"{counter} grew by {grown:g} over {refused} refusals: {burst.summary()}"
    vllm_evidence.judged(refused, "counted refusals", missing=f"the burst had no refusal to count: {burst.summary()}")


@contract("admission.capacity_released")
def test_capacity_released(burst, vllm_client, vllm_facts, vllm_expect):
    request = vllm_expect.release.tiny_completion
    body = {"model": vllm_facts.model, **request["body"]}
    response = vllm_client.run(
        lambda client: queue_burst.wait_until_served(client, request["path"], body, CAPACITY_WITHIN)
    )
    assert response.status == 200, (
        f"{CAPACITY_WITHIN:g} s after the burst, a single request is still not served: {response.describe()} "
        "(refused or hung-up requests keep their slots)"
    )
