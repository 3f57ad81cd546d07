"""Reasoning: with the declared reasoning parser, the reasoning comes back where the version documents it.

Claimed by the profile's ``generation.reasoning_parser`` (the server's
``--reasoning-parser NAME``). A greedy chat answer carries its reasoning in
the field the version documents (fact ``reasoning_output_field``), never
under a former name nor inside ``content``, streamed or not (a parser that
leaks on one path only, vllm#46042); the streamed deltas reassemble to the
unstreamed answer; a history's reasoning under the current and a former name
is accepted or refused as documented and never left out of the prompt
silently (``/tokenize``'s rendering); Responses and Anthropic messages
return it as reasoning items and thinking blocks where served.
"""

import pytest

from pytest_vllm_conformance import contract, each
from pytest_vllm_conformance.features.reasoning.answers import ask, chat_cases, field_problems, reassembly_problems
from pytest_vllm_conformance.features.reasoning.history import history_cases, history_problems
from pytest_vllm_conformance.features.reasoning.routes import route_cases, route_problems


@pytest.fixture(scope="module")
def reasoning(vllm_client, vllm_facts, vllm_expect):
    """``reasoning(streamed)``: the greedy answer, its reasoning read under every name; the fields and markers."""
    output = vllm_expect.fact("reasoning_output_field")
    names = [output["field"], *output["former"]]
    parser = vllm_expect.declared("generation", "reasoning_parser").value
    markers = vllm_expect.fact("reasoning_parser_markers").get(parser, [])
    return lambda streamed: ask(vllm_client, vllm_facts.model, names, streamed=streamed), output["field"], markers


@contract("reasoning.reasoning_in_its_field")
@each("case", chat_cases)
def test_reasoning_in_its_field(case, reasoning):
    answer_to, documented, markers = reasoning
    answer = answer_to(case.streamed)
    reference = answer_to(False) if case.streamed else None
    problems = field_problems(answer, documented, markers, reference)
    assert not problems, f"{case}: " + "; ".join(problems) + f" ({answer.describe()})"


@contract("reasoning.stream_reassembles_to_the_same_answer")
def test_stream_reassembles_to_the_same_answer(reasoning):
    answer_to, documented, _ = reasoning
    problems = reassembly_problems(answer_to(True), answer_to(False), documented)
    assert not problems, "; ".join(problems)


@contract("reasoning.history_rendered_as_documented")
@each("case", history_cases)
def test_history_rendered_as_documented(case, vllm_client, vllm_facts, vllm_record):
    problems, note = history_problems(vllm_client, vllm_facts.model, case)
    if note:
        vllm_record("reasoning_history", note)
    assert not problems, f"{case}: " + "; ".join(problems)


@contract("reasoning.routes_return_reasoning_blocks")
@each("case", route_cases)
def test_routes_return_reasoning_blocks(case, vllm_client, vllm_facts, vllm_expect, reasoning):
    shape = vllm_expect.fact("reasoning_route_shapes")[case.name]
    problems = route_problems(vllm_client, vllm_facts.model, case, shape, reasoning[2])
    assert not problems, f"{case}: " + "; ".join(problems)
