"""A forced tool_choice answered without a call: a failure, unless the answer was cut inside one.

Under a forced choice (a named function, or ``required``) the server must
answer with a call. An answer cut at its token limit before the call closed
may hold no call item yet, and then its text shows how far the call got. So
an answer with no call is undecided only when it was cut and its visible
text may still be the start of a call of the forced function(s), as vLLM
writes one: in the tool parser's envelope (fact ``tool_call_envelopes``),
as the named function's bare JSON arguments, or as the JSON list of calls
``required`` asks for. Any other text (a message answering the question, a
gateway that turned the choice into ``none``) fails, as does an answer that
was not cut; an answer with no text at all says nothing, and stays undecided
when cut. The agent_loops suite judges its Responses and Messages loops by it
(its ``uncalled`` fixture); the chat answers are judged by ``protocol/cut_calls.py``'s ``judge_cut_call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_vllm_conformance.protocol.cut_calls import Envelope, envelope_problem, parameters_of
from pytest_vllm_conformance.protocol.json_prefix import prefix_problem


def _required_schema(names: Sequence[str]) -> dict[str, Any]:
    """The list ``tool_choice: required`` constrains the answer to (vllm/parser/abstract_parser.py, at v0.32.0:
    ``list[FunctionDefinition]``, each ``{"name": ..., "parameters": ...}``)."""
    call = {
        "type": "object",
        "properties": {"name": {"enum": list(names)}, "parameters": True},
        "required": ["name", "parameters"],
        "additionalProperties": False,
    }
    return {"type": "array", "items": call}


def call_text_problem(text: str, names: Sequence[str], envelopes: Sequence[Envelope] | None) -> str | None:
    """None when ``text`` may be the start of a call of one of ``names``; else why it cannot be one."""
    stripped = text.strip()
    if not stripped:
        return None
    if stripped.startswith("{") and any(prefix_problem(text, parameters_of(name)) is None for name in names):
        return None
    if stripped.startswith("[") and prefix_problem(text, _required_schema(names)) is None:
        return None
    if envelopes and envelope_problem(text, names, envelopes) is None:
        return None
    return f"its text {text[:120]!r} is no call of {list(names)} (nor the start of one)"


def judge_uncalled(
    text: str,
    cut: bool,
    names: Sequence[str],
    envelopes: Sequence[Envelope] | None,
    what: str,
    only: Any,
    limit: str = "max_output_tokens",
) -> str:
    """An answer to a forced choice that holds no call: the reason it is undecided (cut at ``limit`` inside a call,
    or cut with no text), else AssertionError naming what came instead (``only``: its items or blocks)."""
    problem = call_text_problem(text, names, envelopes)
    assert cut and problem is None, (
        f"{what}: a forced tool_choice answered with no call, only {only}"
        + (f": {problem}" if problem else f", and it was not cut at {limit}")
        + " (a forced call that never came)"
    )
    shown = f"its text {text[:120]!r} may be the start of a call" if text.strip() else "with no text"
    return f"{what}: cut at {limit} before a whole call of {list(names)}, {shown} (only {only})"
