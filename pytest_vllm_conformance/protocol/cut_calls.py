"""A forced tool call, judged by what was generated: its parsed calls against the functions' parameters, its raw
text against the tool parser's envelope, and a call cut by max_tokens.

The tool-call suite's forced choices and the agent loops' chat tool loop
judge their calls here. A model may pad a call's arguments with the
whitespace JSON allows until ``max_tokens`` (fact ``json_whitespace_control``):
such an answer is undecided when every character so far is consistent with a
call of the forced function(s), never a failure; a character that breaks the
call fails it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_vllm_conformance import undecided
from pytest_vllm_conformance.protocol.answer_controls import HELD, Judgement
from pytest_vllm_conformance.protocol.answer_reader import Answer, ToolCall
from pytest_vllm_conformance.protocol.json_prefix import prefix_problem, schema_problem
from pytest_vllm_conformance.protocol.tools import TOOLS


def parameters_of(name: str | None, tools: tuple[dict[str, Any], ...] = TOOLS) -> dict[str, Any] | None:
    for tool in tools:
        if tool["function"]["name"] == name:
            return tool["function"]["parameters"]
    return None


def argument_problem(call: ToolCall, tools: tuple[dict[str, Any], ...] = TOOLS) -> str | None:
    """Why ``call``'s arguments are not JSON valid against its function's parameters, or None."""
    arguments, problem = call.arguments_object()
    if problem:
        return problem
    schema = parameters_of(call.name, tools)
    if schema is None:
        return f"{call.name!r} is not a declared function"
    problem = schema_problem(schema, arguments)
    return f"{call.name}'s arguments {call.arguments!r} {problem}" if problem else None


Envelope = Mapping[str, str]  # begin (with {name}) and end of a call's generated text, from fact tool_call_envelopes


def envelope_problem(
    text: str, names: Sequence[str], envelopes: Sequence[Envelope], tools: tuple[dict[str, Any], ...] = TOOLS
) -> str | None:
    """Why ``text`` cannot become a call of one of ``names`` in one of the envelopes, or None."""
    for name in names:
        for envelope in envelopes:
            begin = envelope["begin"].replace("{name}", name)
            if begin.startswith(text):
                return None
            if text.startswith(begin):  # the name settles which envelope: at most one begins the text
                problem = prefix_problem(text[len(begin) :], parameters_of(name, tools), then=envelope["end"])
                return f"{name}'s arguments {problem}" if problem else None
    begins = " or ".join(repr(envelope["begin"].replace("{name}", name)) for name in names for envelope in envelopes)
    return f"{text[:120]!r} does not start a call ({begins})"


def judge_cut_call(
    answer: Answer,
    names: Sequence[str],
    parser: str,
    envelopes: Sequence[Envelope] | None,
    tools: tuple[dict[str, Any], ...] = TOOLS,
) -> Judgement:
    """A forced call's answer cut by max_tokens: HELD when every character is consistent with a call of one of
    ``names`` (strict functions), a problem when one is not, undecided when nothing says (no envelope for ``parser``).

    Calls parsed whole must be valid; a streamed answer's last call may stop inside its arguments.
    """
    calls = list(answer.tool_calls)
    partial = calls.pop() if answer.streamed and calls else None
    for call in calls:
        problem = argument_problem(call, tools) if call.name in names else f"the call names {call.name!r}"
        if problem:
            return Judgement(problem=problem)
    if partial is not None:
        if partial.name not in names:
            return Judgement(problem=f"the call names {partial.name!r}, not one of {list(names)}")
        problem = prefix_problem(partial.arguments or "", parameters_of(partial.name, tools))
        return Judgement(problem=f"{partial.name}'s arguments {problem}") if problem else HELD
    if not answer.text:
        return HELD
    if envelopes is None:
        return Judgement(undecided=f"the contract data has no tool-call envelope for the {parser} parser")
    problem = envelope_problem(answer.text, names, envelopes, tools)
    return Judgement(problem=problem) if problem else HELD


def skip_if_cut(answer: Answer, what: str, names: Sequence[str], cut_call, padding: str) -> None:
    """A forced call cut by max_tokens: failed if a character breaks the call, else undecided."""
    if not answer.cut:
        return
    judged = cut_call(answer, names)
    assert judged.problem is None, f"{what}: cut by max_tokens, and not a call of {names}: {judged.problem}"
    why = judged.undecided or f"every character consistent with a call of {names} ({padding})"
    undecided(f"{what}: cut by max_tokens before the call closed, {why}: {answer.describe()}")
