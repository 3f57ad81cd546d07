"""A burst past the declared queue bound is refused fast with 503, not queued without end.

Opt-in: the burst loads the server, so it runs only where the profile
declares admission control (``admission: {max_queued_requests: N}``, the
server's ``--max-num-queued-reqs``); elsewhere every test is not claimed.
The burst is N + 7 long completions sent at once; vLLM 0.29+ refuses the
ones past N before any work starts, with its ErrorResponse.
"""

import pytest

from pytest_vllm_conformance import NOT_CLAIMED, contract
from pytest_vllm_conformance.admission import Burst, percentile
from pytest_vllm_conformance.metrics import ExpositionError, parse


@pytest.fixture(scope="module")
def bound(vllm_expect):
    bound = vllm_expect.declared("admission", "max_queued_requests")
    if bound.value is None:
        pytest.skip(f"{NOT_CLAIMED}: the profile declares no admission section (opt-in: the burst loads the server)")
    return bound


@pytest.fixture(scope="module")
def rejection(vllm_expect):
    return vllm_expect.fact("admission_rejection")


def _rejections_counted(client, expect):
    """The version's rejection counter now, or None (no such counter, or no readable /metrics)."""
    counter = expect.fact("admission_rejection_counter")
    page = client.get(expect.fact("metrics_path"))
    try:
        return parse(page.text).counter_total(counter) if counter and page.status == 200 else None
    except ExpositionError:
        return None


@pytest.fixture(scope="module")
def burst(bound, rejection, vllm_client, vllm_facts, vllm_expect):
    size = vllm_expect.declared("admission", "burst_requests", default=bound.value + 7).value
    request = vllm_expect.fact("admission_burst_request")
    call = ("POST", request["path"], {"json_body": {"model": vllm_facts.model, **request["body"]}})
    # A first generation is slow (warm-up); one tiny request first keeps the burst's arrivals close together.
    warm_up = vllm_expect.fact("tiny_completion")
    vllm_client.post(warm_up["path"], {"model": vllm_facts.model, **warm_up["body"]})
    counted_before = _rejections_counted(vllm_client, vllm_expect)
    outcomes = vllm_client.concurrently([call] * size)
    return Burst(tuple(outcomes), rejection["status"], counted_before)


@contract("admission.burst_bounded")
def test_burst_past_the_bound_is_refused(burst, bound, request):
    request.node.user_properties.append(("vllm_admission_burst", burst.summary()))
    assert not burst.unanswered and not burst.other, f"{burst.summary()}: expected only served and refused"
    assert burst.rejected, (
        f"{burst.summary()} with max_queued_requests {bound}: none refused, so the server queues without bound "
        "(is --max-num-queued-reqs set?)"
    )
    assert len(burst.served) <= bound.value, f"{burst.summary()}: more served than max_queued_requests {bound}"


@contract("admission.rejection_fast")
def test_refusals_are_fast(burst, vllm_expect, request):
    seconds = burst.rejection_seconds()
    if not seconds:
        pytest.skip("could not run: the burst had no refusal to time (see test_burst_past_the_bound_is_refused)")
    p50, p99, slowest = percentile(seconds, 50), percentile(seconds, 99), max(seconds)
    # JUnit properties (user_properties: record_property's, without its xunit2 warning).
    request.node.user_properties.append(("vllm_admission_rejection_p50_seconds", f"{p50:.3f}"))
    request.node.user_properties.append(("vllm_admission_rejection_p99_seconds", f"{p99:.3f}"))
    limit = vllm_expect.declared("admission", "max_rejection_seconds", default=2.0)
    assert slowest <= limit.value, (
        f"the slowest of {len(seconds)} refusals took {slowest:.3f} s, over the bound of {limit.value:g} s "
        f"({limit.basis}) (p50 {p50:.3f} s, p99 {p99:.3f} s): refusals wait instead of being answered at once"
    )


@contract("admission.rejection_error_response")
def test_refusal_is_an_error_response(burst, rejection, vllm_expect):
    if not burst.rejected:
        pytest.skip("could not run: the burst had no refusal (see test_burst_past_the_bound_is_refused)")
    expected = (rejection["error_type"], None, rejection["status"])
    for response in burst.rejected:
        error = (response.json_or_none() or {}).get("error")
        assert isinstance(error, dict), (
            f"a refusal is not an ErrorResponse: {response.describe()} {response.text[:200]!r}"
        )
        seen = (error.get("type"), error.get("param"), error.get("code"))
        assert seen == expected and error.get("message") in rejection["messages"], (
            f"a refusal should be {vllm_expect.version_label}'s ErrorResponse (type, param, code) {expected} "
            f"with one of its admission messages, got {seen} {error.get('message')!r}"
        )


@contract("admission.rejections_counted")
def test_refusals_are_counted(burst, vllm_client, vllm_expect):
    after = _rejections_counted(vllm_client, vllm_expect)
    counter = vllm_expect.fact("admission_rejection_counter")
    assert burst.counted_before is not None and after is not None, f"/metrics has no {counter} to count refusals with"
    grown = after - burst.counted_before
    assert grown == len(burst.rejected), f"{counter} grew by {grown:g} over {burst.summary()}"


@contract("admission.capacity_released")
def test_capacity_is_released_after_the_burst(burst, bound, vllm_client, vllm_facts, vllm_expect):
    if bound.value == 0:
        pytest.skip(f"{NOT_CLAIMED}: max_queued_requests {bound} refuses every request")
    request = vllm_expect.fact("tiny_completion")
    response = vllm_client.post(request["path"], {"model": vllm_facts.model, **request["body"]})
    assert response.status == 200, f"after the burst a single request should be served: {response.describe()}"
