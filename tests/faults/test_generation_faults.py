"""The generation-controls suites FAIL, naming the control that was ignored, when a real server drops one.

The fault proxy in front of the hermes-parser server (fixtures/server_specs.py
"generation") removes or corrupts exactly one control; the contract that
depends on it must fail, the others still pass. In front of the server
whose model pads its JSON until max_tokens ("padding"), where those answers
are undecided, a dropped constraint still fails: what the model generates
then starts no answer that meets it.
"""

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse, RewriteStream, StripJsonField
from fixtures.fault_proxy.stream_rules import PAST_THE_CAP_BYTES
from fixtures.verdicts import assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import GENERATION, TOOL_CALLS_WITH_PARSER

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("generation")]

GENERATION_PATHS = r"/v1/(chat/)?completions"


@pytest.fixture
def generation_server(served):
    return served("generation")


def run_through(pytester, server, rule, marker, *more_rules):
    with FaultProxy(server.url, rules=[rule, *more_rules]) as proxy:
        run_suites(pytester, "-m", marker, url=proxy.url, profile=GENERATION_PROFILE)
        assert all(proxy.hits), f"a fault was never injected: {proxy.hits}"
    return pytester.path / "junit.xml"


@pytest.mark.pins(
    failed={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        "structured_outputs.legacy_fields_not_silently_dropped",
    }
)
def test_a_dropped_response_format_fails_the_constraint(pytester, generation_server):
    junit = run_through(pytester, generation_server, StripJsonField(field="response_format"), "structured_outputs")
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"passed": 5, "failed": 3},
            "structured_outputs.invalid_constraint_refused": {"passed": 2, "failed": 2},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
        },
    )
    failed = failed_checks(junit)
    message = failed["structured_outputs.constraint_enforced[response_format json_schema on completions]"]
    assert "response_format json_schema on completions was not applied" in message
    assert (
        "served with 200 as if unconstrained"
        in failed["structured_outputs.invalid_constraint_refused[a $ref to a missing $defs entry]"]
    )


@pytest.mark.pins(
    failed={
        "tool_calls.named_function_called",
        "tool_calls.required_function_called",
        "tool_calls.stream_reassembles_to_the_same_calls",
        "tool_calls.cut_call_ends_length",
    }
)
def test_dropped_tools_fail_every_call(pytester, generation_server):
    junit = run_through(pytester, generation_server, StripJsonField(field="tools"), "tool_calls")
    assert_verdicts(
        junit,
        GENERATION.verdicts(
            "tool_calls",
            failed=(
                "tool_calls.named_function_called",
                "tool_calls.required_function_called",
                "tool_calls.stream_reassembles_to_the_same_calls",
                "tool_calls.cut_call_ends_length",
            ),
        ),
    )
    assert "was not served" in failed_checks(junit)["tool_calls.named_function_called"]


@pytest.mark.pins(
    failed={
        "tool_calls.named_function_called",
        "tool_calls.required_function_called",
        "tool_calls.stream_reassembles_to_the_same_calls",
    }
)
def test_corrupted_arguments_fail_the_calls(pytester, generation_server):
    corrupt = RewriteJsonResponse(json_path="choices.*.message.tool_calls.*.function.arguments", value="{not json")
    junit = run_through(pytester, generation_server, corrupt, "tool_calls")
    assert_verdicts(
        junit,
        GENERATION.verdicts(
            "tool_calls",
            failed=(
                "tool_calls.named_function_called",
                "tool_calls.required_function_called",
                "tool_calls.stream_reassembles_to_the_same_calls",
            ),
        ),
    )
    message = failed_checks(junit)["tool_calls.required_function_called"]
    assert "arguments '{not json' are not JSON" in message


@pytest.mark.pins(failed={"tool_calls.stream_reassembles_to_the_same_calls"})
def test_reordered_tool_call_deltas_fail_the_stream_only(pytester, generation_server):
    swap = RewriteStream(path="/v1/chat/completions", edit="swap_tool_call_fragments")
    junit = run_through(pytester, generation_server, swap, "tool_calls")
    assert_verdicts(
        junit, GENERATION.verdicts("tool_calls", failed=("tool_calls.stream_reassembles_to_the_same_calls",))
    )
    message = failed_checks(junit)["tool_calls.stream_reassembles_to_the_same_calls"]
    assert "the streamed tool-call deltas reassemble to other calls" in message


@pytest.mark.pins(
    failed={
        "structured_outputs.constraint_enforced",
        "structured_outputs.legacy_fields_not_silently_dropped",
        *TOOL_CALLS_WITH_PARSER,
    }
)
def test_an_answer_cut_at_the_byte_cap_fails_every_check_that_reads_it(pytester, generation_server):
    """Every 200 answer grows past the run's byte cap (a JSON field or a stream event of padding after the real
    content): the client cuts it, and no check may read the cut body as if whole. Before, tool_choice none
    passed on it ("no tool call" in an answer never read). The refusals (400) keep their size and still pass."""
    padding = "x" * PAST_THE_CAP_BYTES
    rules = [
        RewriteJsonResponse(("padding",), padding, statuses=(200,), path=GENERATION_PATHS),
        RewriteStream(edit="pad_past_cap", path=GENERATION_PATHS),
    ]
    with FaultProxy(generation_server.url, rules=rules) as proxy:
        run_suites(pytester, "-m", "structured_outputs or tool_calls", url=proxy.url, profile=GENERATION_PROFILE)
    assert proxy.hits[0] > 0 and proxy.hits[1] > 0, "the answers were never padded"
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"failed": 8},
            "structured_outputs.invalid_constraint_refused": {"passed": 4},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
            **GENERATION.verdicts("tool_calls", failed=TOOL_CALLS_WITH_PARSER),
        },
    )
    failed = failed_checks(junit)
    for check in (
        "tool_calls.none_calls_nothing",
        "structured_outputs.constraint_enforced[structured_outputs choice on completions streamed]",
        "tool_calls.stream_reassembles_to_the_same_calls",
        "structured_outputs.legacy_fields_not_silently_dropped[guided_regex]",
    ):
        assert (
            "bytes in" in failed[check]
            and "the body passed the byte cap, so the answer cannot be read whole" in (failed[check])
        ), failed[check]


@pytest.mark.pins(
    failed={
        "tool_calls.named_function_called",
        "tool_calls.required_function_called",
        "tool_calls.stream_reassembles_to_the_same_calls",
    }
)
def test_tool_call_arguments_sent_as_an_object_fail_the_shape(pytester, generation_server):
    # A relay that decodes the arguments: OpenAI's clients expect the JSON text, a string.
    decoded = RewriteJsonResponse(
        json_path="choices.*.message.tool_calls.*.function.arguments", value={"unit": "kelvin"}
    )
    junit = run_through(pytester, generation_server, decoded, "tool_calls")
    assert_verdicts(
        junit,
        GENERATION.verdicts(
            "tool_calls",
            failed=(
                "tool_calls.named_function_called",
                "tool_calls.required_function_called",
                "tool_calls.stream_reassembles_to_the_same_calls",
            ),
        ),
    )
    message = failed_checks(junit)["tool_calls.required_function_called"]
    assert "tool_choice 'required': not OpenAI's chat completion shape" in message
    assert '$.choices[0].message.tool_calls[0].function.arguments: expected string, got {"unit": "kelvin"}' in message


@pytest.mark.pins(failed={"tool_calls.stream_reassembles_to_the_same_calls"})
def test_a_streamed_tool_call_without_its_index_fails_the_shape(pytester, generation_server):
    unindexed = RewriteStream(path="/v1/chat/completions", edit="drop_tool_call_index")
    junit = run_through(pytester, generation_server, unindexed, "tool_calls")
    assert_verdicts(
        junit, GENERATION.verdicts("tool_calls", failed=("tool_calls.stream_reassembles_to_the_same_calls",))
    )
    message = failed_checks(junit)["tool_calls.stream_reassembles_to_the_same_calls"]
    assert "not OpenAI's chat chunk shape" in message
    assert ".delta.tool_calls[0].index: expected the field (required by OpenAI), got no such field" in message


@pytest.mark.pins(failed={"tool_calls.stream_reassembles_to_the_same_calls"})
def test_a_streamed_tool_call_whose_first_fragment_lost_its_id_fails_the_shape(pytester, generation_server):
    # Every chunk still passes the chunk schema (a fragment needs only its index); the call as a client assembles
    # it has no id. Only the streamed test runs: the fault touches nothing else.
    anonymous = RewriteStream(path="/v1/chat/completions", edit="drop_first_tool_call_id")
    with FaultProxy(generation_server.url, rules=[anonymous]) as proxy:
        run_suites(pytester, "-m", "tool_calls", "-k", "stream", url=proxy.url, profile=GENERATION_PROFILE)
        assert proxy.hits == [1]
    junit = pytester.path / "junit.xml"
    contract = "tool_calls.stream_reassembles_to_the_same_calls"
    assert_verdicts(junit, {contract: "failed"})
    message = failed_checks(junit)[contract]
    assert (
        ".delta.tool_calls[0].id: expected the field (required by OpenAI of a call, so of its first fragment), "
        "got no such field"
    ) in message, message
    assert ".type:" not in message and ".function.name:" not in message, message


@pytest.mark.pins(
    failed={
        "tool_calls.named_function_called",
        "tool_calls.required_function_called",
        "tool_calls.stream_reassembles_to_the_same_calls",
    }
)
def test_answers_without_any_tool_call_compare_nothing_and_fail(pytester, generation_server):
    # Calls dropped from whole and streamed answers alike: equal streams of nothing are no pass.
    no_calls = RewriteJsonResponse(json_path="choices.*.message.tool_calls", value=[])
    text_only = RewriteStream(path="/v1/chat/completions", edit="drop_tool_calls")
    junit = run_through(pytester, generation_server, no_calls, "tool_calls", text_only)
    assert_verdicts(
        junit,
        GENERATION.verdicts(
            "tool_calls",
            failed=(
                "tool_calls.named_function_called",
                "tool_calls.required_function_called",
                "tool_calls.stream_reassembles_to_the_same_calls",
            ),
        ),
    )
    message = failed_checks(junit)["tool_calls.stream_reassembles_to_the_same_calls"]
    assert "nothing to compare: a named tool_choice gave no tool call" in message


@pytest.mark.pins(
    failed={"structured_outputs.invalid_constraint_refused", "structured_outputs.legacy_fields_not_silently_dropped"}
)
def test_a_refusal_that_does_not_name_the_problem_fails(pytester, generation_server):
    vague = RewriteJsonResponse(json_path="error.message", value="Bad Request")
    junit = run_through(pytester, generation_server, vague, "structured_outputs")
    assert_verdicts(
        junit,
        {
            "structured_outputs.constraint_enforced": {"passed": 8},
            "structured_outputs.invalid_constraint_refused": {"failed": 4},
            "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
        },
    )
    message = failed_checks(junit)["structured_outputs.invalid_constraint_refused[a $ref to a missing $defs entry]"]
    assert "expected 400 with a message naming the problem, in the words of one of the version's" in message
    assert "'does not exist' (auto); 'Cannot find field $defs' (xgrammar)" in message


# In front of the padding model's server: its cut answers are undecided, but one whose constraint
# never reached vLLM starts no answer that meets it.
DROPPED_CONSTRAINTS = {
    "response_format": {
        "structured_outputs.constraint_enforced": {"failed": 3, "passed": 4, "undecided": 1},
        "structured_outputs.invalid_constraint_refused": {"failed": 2, "passed": 2},
        "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
    },
    "structured_outputs": {
        "structured_outputs.constraint_enforced": {"failed": 5, "undecided": 3},
        "structured_outputs.invalid_constraint_refused": {"failed": 2, "passed": 2},
        "structured_outputs.legacy_fields_not_silently_dropped": {"failed": 4},
    },
}


# A second proof of contracts CI proves failing elsewhere (make test-extended): 21 s of CI.
@pytest.mark.extended_proof
@pytest.mark.parametrize("dropped", sorted(DROPPED_CONSTRAINTS))
@pytest.mark.servers("padding")
@pytest.mark.pins(
    failed={
        "structured_outputs.constraint_enforced",
        "structured_outputs.invalid_constraint_refused",
        "structured_outputs.legacy_fields_not_silently_dropped",
    }
)
def test_a_dropped_constraint_fails_where_the_model_pads(pytester, served, dropped):
    junit = run_through(pytester, served("padding"), StripJsonField(field=dropped), "structured_outputs")
    assert_verdicts(junit, DROPPED_CONSTRAINTS[dropped])
    failed = failed_checks(junit)
    case = "json_schema on completions" if dropped == "response_format" else "json on completions"
    message = failed[f"structured_outputs.constraint_enforced[{dropped} {case}]"]
    assert f"{dropped} {case} was not applied" in message
    assert "cannot become JSON that meets the schema" in message and "cannot start a JSON value" in message


@pytest.mark.servers("padding")
@pytest.mark.pins(
    failed={
        "tool_calls.named_function_called",
        "tool_calls.required_function_called",
        "tool_calls.stream_reassembles_to_the_same_calls",
        "tool_calls.cut_call_ends_length",
    }
)
def test_a_dropped_tool_choice_fails_where_the_model_pads(pytester, served):
    # Without tool_choice vLLM picks auto: the model writes text, which starts no call.
    junit = run_through(pytester, served("padding"), StripJsonField(field="tool_choice"), "tool_calls")
    assert_verdicts(
        junit,
        GENERATION.verdicts(
            "tool_calls",
            failed=(
                "tool_calls.named_function_called",
                "tool_calls.required_function_called",
                "tool_calls.stream_reassembles_to_the_same_calls",
                "tool_calls.cut_call_ends_length",
            ),
        ),
    )
    failed = failed_checks(junit)
    assert (
        "a named tool_choice: cut by max_tokens, and not a call of ['get_weather']"
        in failed["tool_calls.named_function_called"]
    )
    assert "does not start a call ('<tool_call>" in failed["tool_calls.named_function_called"]
    assert "the text cut at max_tokens 4 is no forced call" in failed["tool_calls.cut_call_ends_length"]
