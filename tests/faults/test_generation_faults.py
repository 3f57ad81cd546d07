"""The generation-controls suites FAIL, naming the control that was ignored, when a real server drops one.

The fault proxy in front of the hermes-parser server (fixtures/server_specs.py
"generation") removes or corrupts exactly one control; the contract that
depends on it must fail, the others still pass. In front of the server
whose model pads its JSON until max_tokens ("padding"), where those answers
are undecided, a dropped constraint still fails: what the model generates
then starts no answer that meets it.
"""

from typing import NamedTuple

import pytest

from fixtures.fault_proxy import FaultProxy, RewriteJsonResponse, RewriteStream, StripJsonField
from fixtures.fault_proxy.stream_rules import PAST_THE_CAP_BYTES
from fixtures.verdicts import assert_failures_say, assert_verdicts, failed_checks
from tests.conftest import requires_vllm, run_suites, run_through_proxy
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import GENERATION, TOOL_CALLS_WITH_PARSER

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("generation")]

GENERATION_PATHS = r"/v1/(chat/)?completions"
CHAT = "/v1/chat/completions"
ARGUMENTS = "choices.*.message.tool_calls.*.function.arguments"
CONSTRAINT = "structured_outputs.constraint_enforced"
REFUSAL = "structured_outputs.invalid_constraint_refused"
LEGACY = "structured_outputs.legacy_fields_not_silently_dropped"
NAMED, REQUIRED = "tool_calls.named_function_called", "tool_calls.required_function_called"
STREAM, CUT = "tool_calls.stream_reassembles_to_the_same_calls", "tool_calls.cut_call_ends_length"
CALLS = (NAMED, REQUIRED, STREAM)
MISSING_DEFS = f"{REFUSAL}[a $ref to a missing $defs entry]"
PAST_THE_CAP = ("bytes in", "the body passed the byte cap, so the answer cannot be read whole")


@pytest.fixture
def generation_server(served):
    return served("generation")


class Fault(NamedTuple):
    rules: list
    marker: str  # the suites run (-m)
    verdicts: dict  # the run's whole verdict table: what the fault fails, and what it leaves
    words: dict  # failed test -> the words its failure must hold (one phrase, or each of several)
    server: str = "generation"


def _tool_calls_failing(*failed: str) -> dict:
    return GENERATION.verdicts("tool_calls", failed=failed)


FAULTS = {
    "a dropped response_format fails the constraint": Fault(
        [StripJsonField(field="response_format")],
        "structured_outputs",
        {CONSTRAINT: {"passed": 5, "failed": 3}, REFUSAL: {"passed": 2, "failed": 2}, LEGACY: {"failed": 4}},
        {
            f"{CONSTRAINT}[response_format json_schema on completions]": (
                "response_format json_schema on completions was not applied"
            ),
            MISSING_DEFS: "served with 200 as if unconstrained",
        },
    ),
    "dropped tools fail every call": Fault(
        [StripJsonField(field="tools")], "tool_calls", _tool_calls_failing(*CALLS, CUT), {NAMED: "was not served"}
    ),
    "corrupted arguments fail the calls": Fault(
        [RewriteJsonResponse(json_path=ARGUMENTS, value="{not json")],
        "tool_calls",
        _tool_calls_failing(*CALLS),
        {REQUIRED: "arguments '{not json' are not JSON"},
    ),
    "reordered tool-call deltas fail the stream only": Fault(
        [RewriteStream(path=CHAT, edit="swap_tool_call_fragments")],
        "tool_calls",
        _tool_calls_failing(STREAM),
        {STREAM: "the streamed tool-call deltas reassemble to other calls"},
    ),
    # Every 200 answer grows past the run's byte cap (a JSON field or a stream event of padding after the real
    # content): the client cuts it, and no check may read the cut body as if whole. Before, tool_choice none
    # passed on it ("no tool call" in an answer never read). The refusals (400) keep their size and still pass.
    "an answer cut at the byte cap fails every check that reads it": Fault(
        [
            RewriteJsonResponse(("padding",), "x" * PAST_THE_CAP_BYTES, statuses=(200,), path=GENERATION_PATHS),
            RewriteStream(edit="pad_past_cap", path=GENERATION_PATHS),
        ],
        "structured_outputs or tool_calls",
        {
            CONSTRAINT: {"failed": 8},
            REFUSAL: {"passed": 4},
            LEGACY: {"failed": 4},
            **_tool_calls_failing(*TOOL_CALLS_WITH_PARSER),
        },
        {
            "tool_calls.none_calls_nothing": PAST_THE_CAP,
            f"{CONSTRAINT}[structured_outputs choice on completions streamed]": PAST_THE_CAP,
            STREAM: PAST_THE_CAP,
            f"{LEGACY}[guided_regex]": PAST_THE_CAP,
        },
    ),
    # A relay that decodes the arguments: OpenAI's clients expect the JSON text, a string.
    "tool-call arguments sent as an object fail the shape": Fault(
        [RewriteJsonResponse(json_path=ARGUMENTS, value={"unit": "kelvin"})],
        "tool_calls",
        _tool_calls_failing(*CALLS),
        {
            REQUIRED: (
                "tool_choice 'required': not OpenAI's chat completion shape",
                '$.choices[0].message.tool_calls[0].function.arguments: expected string, got {"unit": "kelvin"}',
            )
        },
    ),
    "a streamed tool call without its index fails the shape": Fault(
        [RewriteStream(path=CHAT, edit="drop_tool_call_index")],
        "tool_calls",
        _tool_calls_failing(STREAM),
        {
            STREAM: (
                "not OpenAI's chat chunk shape",
                ".delta.tool_calls[0].index: expected the field (required by OpenAI), got no such field",
            )
        },
    ),
    # Calls dropped from whole and streamed answers alike: equal streams of nothing are no pass.
    "answers without any tool call compare nothing and fail": Fault(
        [
            RewriteJsonResponse(json_path="choices.*.message.tool_calls", value=[]),
            RewriteStream(path=CHAT, edit="drop_tool_calls"),
        ],
        "tool_calls",
        _tool_calls_failing(*CALLS),
        {STREAM: "nothing to compare: a named tool_choice gave no tool call"},
    ),
    "a refusal that does not name the problem fails": Fault(
        [RewriteJsonResponse(json_path="error.message", value="Bad Request")],
        "structured_outputs",
        {CONSTRAINT: {"passed": 8}, REFUSAL: {"failed": 4}, LEGACY: {"failed": 4}},
        {
            MISSING_DEFS: (
                "expected 400 with a message naming the problem, in the words of one of the version's",
                "'does not exist' (auto); 'Cannot find field $defs' (xgrammar)",
            )
        },
    ),
    # In front of the padding model's server. Without tool_choice vLLM picks auto: the model writes text, which
    # starts no call.
    "a dropped tool_choice fails where the model pads": Fault(
        [StripJsonField(field="tool_choice")],
        "tool_calls",
        _tool_calls_failing(*CALLS, CUT),
        {
            NAMED: (
                "a named tool_choice: cut by max_tokens, and not a call of ['get_weather']",
                "does not start a call ('<tool_call>",
            ),
            CUT: "the text cut at max_tokens 4 is no forced call",
        },
        server="padding",
    ),
}


def _marks(fault: Fault) -> list:
    servers = [pytest.mark.servers(fault.server)] if fault.server != "generation" else []
    return [*servers, pytest.mark.pins(failed=fault.verdicts)]


@pytest.mark.parametrize("fault", [pytest.param(name, marks=_marks(f), id=name) for name, f in FAULTS.items()])
def test_a_fault_fails_exactly_the_contracts_that_depend_on_it(pytester, served, fault):
    rules, marker, expected, words, server = FAULTS[fault]
    junit = run_through_proxy(pytester, served(server).url, rules, "-m", marker, profile=GENERATION_PROFILE)
    assert_verdicts(junit, expected)
    assert_failures_say(junit, words)


@pytest.mark.pins(failed={STREAM})
def test_a_streamed_tool_call_whose_first_fragment_lost_its_id_fails_the_shape(pytester, generation_server):
    # Every chunk still passes the chunk schema (a fragment needs only its index); the call as a client assembles
    # it has no id. Only the streamed test runs: the fault touches nothing else.
    anonymous = RewriteStream(path=CHAT, edit="drop_first_tool_call_id")
    with FaultProxy(generation_server.url, rules=[anonymous]) as proxy:
        run_suites(pytester, "-m", "tool_calls", "-k", "stream", url=proxy.url, profile=GENERATION_PROFILE)
        assert proxy.hits == [1]
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {STREAM: "failed"})
    message = failed_checks(junit)[STREAM]
    assert (
        ".delta.tool_calls[0].id: expected the field (required by OpenAI of a call, so of its first fragment), "
        "got no such field"
    ) in message, message
    assert ".type:" not in message and ".function.name:" not in message, message


# In front of the padding model's server: its cut answers are undecided, but one whose constraint
# never reached vLLM starts no answer that meets it.
DROPPED_CONSTRAINTS = {
    "response_format": {
        CONSTRAINT: {"failed": 3, "passed": 4, "undecided": 1},
        REFUSAL: {"failed": 2, "passed": 2},
        LEGACY: {"failed": 4},
    },
    "structured_outputs": {
        CONSTRAINT: {"failed": 5, "undecided": 3},
        REFUSAL: {"failed": 2, "passed": 2},
        LEGACY: {"failed": 4},
    },
}


# A second proof of contracts CI proves failing elsewhere (make test-extended): 21 s of CI.
@pytest.mark.extended_proof
@pytest.mark.parametrize("dropped", sorted(DROPPED_CONSTRAINTS))
@pytest.mark.servers("padding")
@pytest.mark.pins(failed={CONSTRAINT, REFUSAL, LEGACY})
def test_a_dropped_constraint_fails_where_the_model_pads(pytester, served, dropped):
    rules = [StripJsonField(field=dropped)]
    junit = run_through_proxy(
        pytester, served("padding").url, rules, "-m", "structured_outputs", profile=GENERATION_PROFILE
    )
    assert_verdicts(junit, DROPPED_CONSTRAINTS[dropped])
    case = "json_schema on completions" if dropped == "response_format" else "json on completions"
    said = (
        f"{dropped} {case} was not applied",
        "cannot become JSON that meets the schema",
        "cannot start a JSON value",
    )
    assert_failures_say(junit, {f"{CONSTRAINT}[{dropped} {case}]": said})
