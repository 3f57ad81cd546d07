"""The serving profiles and expectations the server tests run the suites with."""

from __future__ import annotations

import json

from fixtures.server_specs import WATERMARK_KEY as WATERMARK_KEY  # the watermark server's key

PLAIN_PROFILE = """
profile: 1
name: plain
endpoint:
  scale_out: disabled
  auth: none
  prompt_embeds: disabled
  prompt_embeds_hidden_size: 128
  validation_error_max_bytes: 32768
context:
  max_model_len: 512
generation:
  legacy_fields: ignored_ok
"""

# The generation server's profile: its tool-call parser. Legacy guided_* fields keep
# the default (refused), which vLLM 0.32 fails: it answers them 200 and ignores them.
GENERATION_PROFILE = """
profile: 1
name: generation
generation:
  tool_call_parser: hermes
"""

# The reasoning server's profile: its reasoning parser.
REASONING_PROFILE = """
profile: 1
name: reasoning
generation:
  reasoning_parser: deepseek_r1
"""

# The reasoning contracts on the reasoning server: four chat cases (a question and after a tool result, plain and
# streamed), the two history field names of 0.28-0.32, Responses and Anthropic messages plain and streamed.
REASONING_PASSED = {
    "reasoning.reasoning_in_its_field": {"passed": 4},
    "reasoning.stream_reassembles_to_the_same_answer": "passed",
    "reasoning.history_rendered_as_documented": {"passed": 2},
    "reasoning.routes_return_reasoning_blocks": {"passed": 4},
}

# The tool_calls contracts a declared tool-call parser claims.
TOOL_CALLS_WITH_PARSER = tuple(
    f"tool_calls.{name}"
    for name in (
        "named_function_called",
        "required_function_called",
        "none_calls_nothing",
        "stream_reassembles_to_the_same_calls",
        "cut_call_ends_length",
    )
)


def tool_call_verdicts(*failed: str, undecided: tuple[str, ...] = ()) -> dict[str, str]:
    """A run of the tool_calls suite with a parser declared: the contracts named in ``failed`` fail, those in
    ``undecided`` are undecided, the rest pass."""

    def verdict(contract: str) -> str:
        return "failed" if contract in failed else "undecided" if contract in undecided else "passed"

    return {
        **{contract: verdict(contract) for contract in TOOL_CALLS_WITH_PARSER},
        "tool_calls.forced_choice_refused_without_parser": "not claimed",
    }


# vLLM 0.32 leaves these routes outside its guarded prefixes; this profile
# accepts them as public so that the fault tests can show one more leak.
GATED_PROFILE = """
profile: 1
name: gated
endpoint:
  scale_out: enabled
  auth: required
  prompt_embeds: enabled
  validation_error_max_bytes: 32768
  public_routes: [/health, /ping, /version, /load, /metrics, /openapi.json, /docs, /docs/oauth2-redirect,
                  /redoc, /tokenize, /detokenize, /invocations, /generative_scoring, /scale_elastic_ep,
                  /is_scaling_elastic_ep, /kv_event_sources]
generation:
  legacy_fields: ignored_ok
"""


WATERMARK_KEY_ENV = "CONFORMANCE_TEST_WATERMARK_KEY"
# The generation APIs a watermarking server of ours serves (scale-out on), as the suite names them.
WATERMARK_APIS = (
    "completions (POST /v1/completions)",
    "chat completions (POST /v1/chat/completions)",
    "responses (POST /v1/responses)",
    "SageMaker invocations (POST /invocations)",
    "token generate (POST /inference/v1/generate)",
    "batch chat completions (POST /v1/chat/completions/batch)",
    "Anthropic messages (POST /v1/messages)",
)
WATERMARK_PROFILE = f"""
profile: 1
name: watermarked
endpoint:
  scale_out: enabled
watermark:
  required: true
  algorithm: gumbel
  context_width: 4
  key_env: {WATERMARK_KEY_ENV}
"""


def watermark_ingress_rules():
    """A watermark ingress: the opt-out removed on every generation path.

    In front of the server it is also a server that ignores the opt-out, as
    vLLM is without the watermark's middleware: vLLM never sees the field."""
    from fixtures.fault_proxy import StripJsonField

    return [
        StripJsonField(
            "watermarking",
            path=r"/v1/(chat/)?completions(/batch)?|/v1/responses|/v1/messages|/invocations|/cohere/v2/chat",
        ),
        StripJsonField("watermarking", within=("sampling_params",), path="/inference/v1/generate"),
    ]


# The agent_loops suite (suites/agent_loops/test_agent_loops.py): the contracts that need a tool-call parser,
# and the rest.
AGENT_LOOPS_WITH_PARSER = (
    "agent_loops.responses_stream_call_is_the_answer",
    "agent_loops.chat_tool_loop_round_trips",
    "agent_loops.responses_tool_loop_round_trips",
    "agent_loops.responses_tool_choice_forms",
    "agent_loops.messages_tool_use_round_trips",
    "agent_loops.responses_custom_tool_round_trips",
    "agent_loops.responses_stream_custom_call_is_the_answer",
)
AGENT_LOOPS_ALWAYS = (
    "agent_loops.responses_stream_is_the_answer",
    "agent_loops.messages_answer_shape",
    "agent_loops.messages_stream_is_the_answer",
    "agent_loops.messages_errors_in_anthropic_envelope",
    "agent_loops.responses_previous_response_continues",
    "agent_loops.responses_request_shapes",
    "agent_loops.responses_item_status_consistent",
    "agent_loops.responses_custom_tool_formats",
)


def agent_loop_verdicts(*failed: str, parser: bool = True) -> dict[str, str]:
    """A run of the agent_loops suite: the contracts named in ``failed`` fail, the rest pass; without a parser
    declared, the tool contracts are not claimed."""

    def verdict(contract: str) -> str:
        if contract in AGENT_LOOPS_WITH_PARSER and not parser:
            return "not claimed"
        return "failed" if contract in failed else "passed"

    return {contract: verdict(contract) for contract in (*AGENT_LOOPS_ALWAYS, *AGENT_LOOPS_WITH_PARSER)}


def hiding(profile: str, *routes: str) -> str:
    """``profile`` declaring ``routes`` hidden by the ingress on purpose (``ingress.hidden_routes``)."""
    return profile + "ingress:\n  hidden_routes: [" + ", ".join(json.dumps(route) for route in routes) + "]\n"
