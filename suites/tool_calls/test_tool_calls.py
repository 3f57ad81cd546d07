"""Tool calls: a forced choice comes back as a parsed call, streamed or not, or is refused without a parser.

Claimed by the profile's ``generation.tool_call_parser`` (the server's
``--enable-auto-tool-choice --tool-call-parser NAME``); without one, a forced
tool_choice must be refused. The functions are ``strict`` where their schema
is the contract: OpenAI guarantees arguments only then, and vLLM 0.31+
constrains only then (fact ``tool_arguments_constrained_without_strict``).
A forced call cut by max_tokens (a model padding its arguments with
whitespace) whose every character is consistent with the call is undecided
(a skip), never a failure. Every answer must have OpenAI's chat shape, its
tool calls typed as clients parse them, a streamed call's first fragment
carrying its id, ``type: function`` and name as the unstreamed call does.
"""

from functools import partial

import pytest

from pytest_vllm_conformance import contract, fact_fixture, undecided
from pytest_vllm_conformance.catalogue.release_facts import padding_note
from pytest_vllm_conformance.protocol.cut_calls import argument_problem, judge_cut_call, skip_if_cut
from pytest_vllm_conformance.protocol.error_envelope import error_message
from pytest_vllm_conformance.protocol.schemas import deviations_from
from pytest_vllm_conformance.protocol.tools import CHAT, TOOLS, WEATHER, named, tool_request

from .call_answers import CUT_MAX_TOKENS, assert_one_valid_call, served_call, without_strict

finish_reasons = fact_fixture("tool_call_finish_reasons")


@pytest.fixture(scope="module")
def cut_call(vllm_expect):
    """``cut_call(answer, names)``: the Judgement of a forced call's answer cut by max_tokens."""
    parser = vllm_expect.declared("generation", "tool_call_parser").value
    envelopes = vllm_expect.fact("tool_call_envelopes").get(parser)
    return lambda answer, names: judge_cut_call(answer, names, parser, envelopes)


@pytest.fixture(scope="module")
def padding(vllm_expect):
    return padding_note(vllm_expect.release.json_whitespace_control, vllm_expect.version_label, tool_calls=True)


@pytest.fixture(scope="module")
def call(vllm_client, vllm_facts, vllm_expect):
    """``call(tool_choice, stream=False, **extra)``: the answer, asserted served and in OpenAI's chat shape."""
    return partial(served_call, vllm_client, vllm_facts.model, deviations_from(vllm_expect.fact("wire_deviations")))


@contract("tool_calls.named_function_called")
def test_named_function_called(call, finish_reasons, cut_call, padding, vllm_record, vllm_expect, vllm_evidence):
    answer = call(named("get_weather"))
    assert_one_valid_call(answer, "a named tool_choice", finish_reasons["named"], ["get_weather"], cut_call, padding)
    loose = call(named("get_weather"), tools=(without_strict(WEATHER),))
    unstrict = [argument_problem(found, (WEATHER,)) for found in loose.tool_calls]
    constrained = vllm_expect.release.tool_arguments_constrained_without_strict
    if loose.cut:
        verdict = "undecided (cut by max_tokens before the call closed)"
    else:
        verdict = "valid" if loose.tool_calls and not any(unstrict) else f"not valid ({unstrict or 'no call'})"
    vllm_record("tool_arguments_without_strict", verdict)
    vllm_record(
        "figures",
        f"without strict, the arguments came back {verdict} (the version constrains them: {constrained}; "
        "OpenAI promises nothing there)",
    )
    # Two answers came; the call judged is the strict one (the other is reported, never judged).
    vllm_evidence.judged(1, "tool calls")


@contract("tool_calls.required_function_called")
def test_required_function_called(call, finish_reasons, cut_call, padding, vllm_evidence):
    answer = call("required", parallel_tool_calls=False)
    names = [tool["function"]["name"] for tool in TOOLS]
    assert_one_valid_call(answer, "tool_choice required", finish_reasons["required"], names, cut_call, padding)
    vllm_evidence.judged(1, "tool calls")


@contract("tool_calls.none_calls_nothing")
def test_none_calls_nothing(call):
    answer = call("none", max_tokens=16)
    assert not answer.tool_calls, f"tool_choice none still called a tool: {answer.describe()}"


@contract("tool_calls.stream_reassembles_to_the_same_calls")
def test_stream_reassembles_to_the_same_calls(call, cut_call, padding, vllm_evidence):
    whole = call(named("get_weather"))
    streamed = call(named("get_weather"), stream=True)
    assert len(streamed.finish_reasons) == 1, f"the stream finished {streamed.finish_reasons}: {streamed.describe()}"
    for answer, what in ((whole, "the named call unstreamed"), (streamed, "the named call streamed")):
        skip_if_cut(answer, what, ["get_weather"], cut_call, padding)
    assert whole.tool_calls, (
        f"nothing to compare: a named tool_choice gave no tool call ({whole.describe()}; {streamed.describe()})"
    )
    shapes = [[(c.name, c.arguments_object()[0]) for c in answer.tool_calls] for answer in (whole, streamed)]
    assert shapes[0] == shapes[1], (
        f"the streamed tool-call deltas reassemble to other calls than the same greedy request unstreamed: "
        f"{streamed.describe()} against {whole.describe()}"
    )
    vllm_evidence.judged(len(whole.tool_calls), "tool calls compared streamed and whole")


@contract("tool_calls.cut_call_ends_length")
def test_cut_call_ends_length(call, cut_call):
    answer = call(named("get_weather"), max_tokens=CUT_MAX_TOKENS)
    assert answer.finish_reason == "length", (
        f"a call cut at max_tokens {CUT_MAX_TOKENS} ended with {answer.finish_reason!r}, not length: "
        f"{answer.describe()}"
    )
    assert not answer.tool_calls, f"a call cut at max_tokens {CUT_MAX_TOKENS} was parsed anyway: {answer.describe()}"
    # No parsed call is the contract only if a call was being written: text that starts none is no forced call.
    judged = cut_call(answer, ["get_weather"])
    assert judged.problem is None, f"the text cut at max_tokens {CUT_MAX_TOKENS} is no forced call: {judged.problem}"
    if judged.undecided:
        undecided(f"whether the text cut at max_tokens {CUT_MAX_TOKENS} starts a call: {judged.undecided}")


@contract("tool_calls.forced_choice_refused_without_parser")
def test_forced_choice_refused_without_parser(vllm_client, vllm_facts, vllm_expect, vllm_evidence):
    refusal = vllm_expect.release.tool_choice_without_parser
    for tool_choice in ("required", named("get_weather")):
        response = vllm_client.post(CHAT, tool_request(vllm_facts.model, tool_choice, max_tokens=8))
        message = error_message(response) or ""
        assert response.status == refusal["status"] and refusal["message"] in message, (
            f"tool_choice {tool_choice!r} without a tool-call parser was not refused with {refusal['status']} "
            f"naming --tool-call-parser: {response.describe()} {response.text[:300]!r}"
        )
    vllm_evidence.judged(2, "forced tool choices refused")
