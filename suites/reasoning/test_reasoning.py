"""Reasoning: with the declared reasoning parser, the reasoning comes back where the version documents it.

Claimed by the profile's ``generation.reasoning_parser`` (the server's
``--reasoning-parser NAME``). A greedy chat answer, to a question and after a
tool result, carries its reasoning in the field the version documents (fact
``reasoning_output_field``), never under a former name nor inside
``content``, streamed or not (parsers have leaked on one path only,
vllm#46042, and after tool results, #39885); the streamed deltas reassemble
to the unstreamed answer; a history's reasoning under the current and a
former name is accepted or refused as documented and never left out of the
prompt silently (``/tokenize``'s rendering); Responses and Anthropic messages
return it as reasoning items and thinking blocks where served, equal to the
chat answer's reasoning (undecided when the chat answer has none).
"""

import pytest

from pytest_vllm_conformance import contract, each, undecided

from .answers import (
    Asker,
    chat_cases,
    field_problems,
    markers_in_reasoning,
    reassembly_problems,
)
from .history import history_cases, history_problems
from .responses_and_messages import route_cases, route_problems


@pytest.fixture(scope="module")
def asker(vllm_client, vllm_facts, vllm_expect):
    return Asker.of(vllm_client, vllm_facts.model, vllm_expect)


@pytest.fixture(scope="module")
def chat_reasoning(asker):
    """The unstreamed chat answer's reasoning, which the other routes' must equal."""
    return asker(streamed=False).reasoning.get(asker.documented, "")


@contract("reasoning.reasoning_in_its_field")
@each("case", chat_cases)
def test_reasoning_in_its_field(case, asker, vllm_evidence):
    answer = asker(streamed=case.streamed, after_tool=case.after_tool)
    reference = asker(streamed=False, after_tool=case.after_tool) if case.streamed else None
    problems = field_problems(answer, asker.documented, asker.markers, reference)
    assert not problems, f"{case}: " + "; ".join(problems) + f" ({answer.describe()})"
    # A streamed case asks twice: the unstreamed answer is its reference, not a second answer judged.
    vllm_evidence.judged(1, "answers")


@contract("reasoning.stream_reassembles_to_the_same_answer")
def test_stream_reassembles_to_the_same_answer(asker, vllm_record, vllm_evidence):
    streamed = asker(streamed=True)
    left_in = markers_in_reasoning(streamed, asker.documented, asker.markers)
    if left_in:
        vllm_record("reasoning_markers_streamed", f"{left_in} in the streamed reasoning, compared without them")
    problems = reassembly_problems(streamed, asker(streamed=False), asker.documented, asker.markers)
    assert not problems, "; ".join(problems)
    vllm_evidence.judged(1, "streams compared with the unstreamed answer")


@contract("reasoning.history_rendered_as_documented")
@each("case", history_cases)
def test_history_rendered_as_documented(case, vllm_client, vllm_facts, vllm_record, vllm_evidence):
    problems, note = history_problems(vllm_client, vllm_facts.model, case)
    if note:
        vllm_record("reasoning_history", note)
    assert not problems, f"{case}: " + "; ".join(problems)
    vllm_evidence.judged(1, "histories")


@contract("reasoning.routes_return_reasoning_blocks")
@each("case", route_cases)
def test_routes_return_reasoning_blocks(
    case, vllm_client, vllm_facts, vllm_expect, asker, chat_reasoning, vllm_evidence
):
    if not chat_reasoning:
        undecided(f"{case}: the chat answer to the same question has no reasoning in {asker.documented!r} to compare")
    shape = vllm_expect.release.reasoning_route_shapes[case.name]
    problems = route_problems(vllm_client, vllm_facts.model, case, shape, asker.markers, chat_reasoning)
    assert not problems, f"{case}: " + "; ".join(problems)
    vllm_evidence.judged(1, "reasoning blocks compared with the chat answer's")
