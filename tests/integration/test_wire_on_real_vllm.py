"""vLLM 0.32's deliberate deviations from OpenAI's shapes are reported by default, and fail under strict.

The plain server's answers carry an integer error.code, explicit nulls and
extension fields (prompt_token_ids, kv_transfer_params, reasoning, ...), and
it refuses a streamed top_logprobs over its maximum with 200 and an error event:
contract data for 0.32, so the wire suite passes and says what it saw, in
the JUnit properties and the report's figures. A profile with
``wire.strict_openai: true`` fails each shape contract on them instead.
"""

import pytest

from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.integration.test_suites_on_real_vllm import WIRE_PLAIN
from tests.support.profiles import PLAIN_PROFILE

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain")]

STRICT_PROFILE = PLAIN_PROFILE + "wire:\n  strict_openai: true\n"


@pytest.mark.pins(healthy=WIRE_PLAIN)
def test_deviations_are_reported_not_failed(pytester, plain_server):
    report = pytester.path / "report.yaml"
    result = run_suites(pytester, "-m", "wire", f"--vllm-report={report}", url=plain_server.url, profile=PLAIN_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, WIRE_PLAIN)
    assert result.ret == 0
    reported = {run.key: run.properties.get("vllm_wire_report", "") for run in contract_runs(junit)}
    assert "error.code: vLLM sends integer" in reported["wire.error_shape[/v1/chat/completions unknown model]"]
    chat = reported["wire.chat_shape[/v1/chat/completions plain]"]
    for words in (
        "choices.*.message.annotations: vLLM sends null",
        "choices.*.message.reasoning: vLLM extension",
        "prompt_token_ids: vLLM extension",
        "kv_transfer_params: vLLM extension",
    ):
        assert words in chat, chat
    assert "choices.*.logprobs.refusal: vLLM omits it" in reported["wire.chat_shape[/v1/chat/completions logprobs]"]
    assert "data.*.max_model_len: vLLM extension" in reported["wire.models_shape"]
    # vLLM checks logprobs once the stream has started: reported, with the clients it breaks.
    top = reported["wire.stream_errors_before_streaming[/v1/chat/completions top_logprobs over the maximum]"]
    assert "vLLM 0.32.0 sends 200 and an error event" in top
    assert "the OpenAI SDKs raise on an error status" in top
    responses = reported["wire.responses_shape[/v1/responses plain]"]
    for words in ("error: vLLM omits it", "output.*.content.*.logprobs: vLLM sends null", "kv_transfer_params: vLLM"):
        assert words in responses, responses
    assert "response.usage: vLLM sends null" in reported["wire.responses_stream_shape[/v1/responses stream]"]
    # max_output_tokens reached: OpenAI ends with response.incomplete, vLLM with response.completed.
    terminal = reported["wire.responses_stream_framing[/v1/responses stream]"]
    assert (
        "response.completed ends a response whose status is 'incomplete'; OpenAI sends response.incomplete" in terminal
    )
    route = reported["wire.error_status_map[unknown route (GET /v1/no-such-route-wire-probe)]"]
    assert 'answers FastAPI\'s {"detail": ...}: clients that read error.message get nothing' in route
    assert "error.code: vLLM sends integer" in report.with_suffix(".md").read_text()


SHAPES = ("completion", "completion_stream", "chat", "chat_stream")
# The plain server under strict_openai: every shape contract fails on vLLM's deviations.
STRICT_VERDICTS = {
    **WIRE_PLAIN,
    **{f"wire.{shape}_shape": {"failed": WIRE_PLAIN[f"wire.{shape}_shape"]["passed"]} for shape in SHAPES},
    "wire.models_shape": "failed",
    "wire.error_shape": "failed",
    "wire.stream_errors_before_streaming": {"failed": 1, "passed": 3},
    "wire.error_status_map": {"failed": 6},
    "wire.responses_shape": "failed",
    "wire.responses_stream_shape": "failed",
    "wire.responses_stream_framing": "failed",
}


@pytest.mark.pins(failed=STRICT_VERDICTS)
def test_strict_openai_fails_every_shape_on_them(pytester, plain_server):
    run_suites(pytester, "-m", "wire", url=plain_server.url, profile=STRICT_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, STRICT_VERDICTS)
    error = failed_checks(junit)["wire.error_shape[/v1/chat/completions unknown model]"]
    assert "error.code: vLLM sends integer" in error
    assert "[wire.strict_openai is true (profile plain)]" in error
    assert "POST /v1/chat/completions" in error
