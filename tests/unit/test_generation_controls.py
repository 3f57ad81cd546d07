"""Reading generation answers (whole and streamed) and judging them against a constraint, without a server."""

import json
from pathlib import Path

import httpx
import pytest

from pytest_vllm_conformance.catalogue.release_facts import padding_note
from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.observed.generation_defaults import completions_max_tokens
from pytest_vllm_conformance.protocol.answer_controls import HELD
from pytest_vllm_conformance.protocol.answer_reader import Answer, ToolCall, Unreadable, read_answer
from pytest_vllm_conformance.protocol.cut_calls import argument_problem, judge_cut_call
from pytest_vllm_conformance.protocol.json_prefix import prefix_problem
from pytest_vllm_conformance.protocol.tools import WEATHER
from suites.structured_outputs.constraints import (
    CONSTRAINTS,
    OBJECT_SCHEMA,
    ConstraintCase,
    constraint_cases,
    invalid_constraints,
)
from suites.tool_calls.call_answers import shape_problems

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "wire_samples"


def response(body: str) -> Response:
    return Response("POST", "/v1/chat/completions", 200, httpx.Headers(), body.encode(), len(body), False, 0.01)


def sse(*events) -> str:
    return "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"


def chunk(delta, finish_reason=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def test_streamed_tool_call_fragments_reassemble_by_index():
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "get_time"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"zone": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"utc"}'}}]}),
        chunk({}, "tool_calls"),
    )
    answer = read_answer(response(body), streamed=True)
    assert answer.tool_calls == [ToolCall("get_time", '{"zone": "utc"}')]
    assert answer.finish_reasons == ["tool_calls"]


def test_a_stream_that_finishes_twice_keeps_both_reasons():
    body = sse(chunk({"content": "ab"}), chunk({"content": "a"}, "stop"), chunk({}, "stop"))
    answer = read_answer(response(body), streamed=True)
    assert (answer.text, answer.finish_reasons) == ("aba", ["stop", "stop"])


def test_a_whole_completion_reads_its_text_and_calls():
    body = {"choices": [{"index": 0, "text": "quokka", "finish_reason": "stop"}]}
    assert read_answer(response(json.dumps(body)), streamed=False).text == "quokka"
    chat = {"choices": [{"message": {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": "1"}}]}}]}
    assert read_answer(response(json.dumps(chat)), streamed=False).tool_calls == [ToolCall("f", "1")]


@pytest.mark.parametrize(
    ("body", "streamed", "says"),
    [
        (sse(), True, "no streamed event carries choice 0"),
        (sse({"choices": [], "usage": {"completion_tokens": 1}}), True, "no streamed event carries choice 0"),
        (json.dumps({"choices": []}), False, "the answer carries no choice"),
        ("{}", False, "the answer carries no choice"),
    ],
)
def test_an_answer_without_choice_0_is_unreadable_not_empty(body, streamed, says):
    with pytest.raises(Unreadable, match=says):
        read_answer(response(body), streamed=streamed)


@pytest.mark.parametrize("streamed", [True, False])
def test_a_truncated_body_is_never_read_as_if_whole(streamed):
    whole = sse(chunk({"content": "ab"}, "stop")) if streamed else json.dumps({"choices": [{"text": "ab"}]})
    cut = Response("POST", "/v1/completions", 200, httpx.Headers(), whole.encode(), 2 * len(whole), True, 0.01)
    with pytest.raises(Unreadable, match="truncated at .* bytes .*: the body passed the byte cap"):
        read_answer(cut, streamed=streamed)


def test_constraints_judge_answers_and_tell_a_cut_answer_from_an_ignored_one():
    schema = CONSTRAINTS[("response_format", "json_schema")]
    assert schema.judge('{"answer": "alpha", "confirmed": true}', cut=False) == HELD
    assert "breaks the schema at answer" in schema.judge('{"answer": "gamma", "confirmed": true}', cut=False).problem
    # Padded until max_tokens: every character consistent with the schema, so undecided, not failed.
    padded = schema.judge('{  \n   \n"answer":\n "beta"\n   ,\n    "confirmed"\t\r\n   \n   \n ', cut=True)
    assert padded.problem is None and padded.undecided.startswith("cut by max_tokens before the constraint closed")
    # The same text not cut is a broken answer; a cut one that leaves the schema is one too.
    assert "is not JSON" in schema.judge('{"answer": "beta"', cut=False).problem
    assert "'g' does not start any of ['alpha', 'beta']" in schema.judge('{"answer": "g', cut=True).problem
    assert "cannot start a JSON value" in schema.judge("random words", cut=True).problem
    choice = CONSTRAINTS[("structured_outputs", "choice")]
    assert choice.judge("quokka", cut=False) == HELD and choice.judge("zebra cro", cut=True).undecided
    assert "does not start any of" in choice.judge("zebu", cut=True).problem
    regex = CONSTRAINTS[("structured_outputs", "regex")]
    assert regex.judge("aab-12", cut=False) == HELD
    assert regex.judge("aab-123", cut=False).problem
    assert "ran past the fixed-length" in regex.judge("aab-1", cut=True).problem


@pytest.mark.parametrize(
    ("text", "schema", "problem"),
    [
        ('{"answer": "alpha", "confirmed": tr', OBJECT_SCHEMA, None),
        ('{"answer": "al\\u0070ha", "conf', OBJECT_SCHEMA, None),
        ('{"answer": "alpha"}', OBJECT_SCHEMA, "the object closes without the required ['confirmed']"),
        ('{"answer": "alpha", "confirmed": true,', OBJECT_SCHEMA, "a ',' after the last property the schema allows"),
        ('{"x', OBJECT_SCHEMA, "'x' does not start any of ['answer', 'confirmed']"),
        ('{"answer": 1', OBJECT_SCHEMA, 'a number where the schema allows only ["alpha", "beta"]'),
        ('{"answer": "alpha", "confirmed": 1}', OBJECT_SCHEMA, "a number where the schema allows boolean"),
        ('{"answer": "alpha" "confirmed"', OBJECT_SCHEMA, "'\"' where ',' or '}' must follow a property"),
        ('{"answer": "alpha", "confirmed": true} and more', OBJECT_SCHEMA, "text after the JSON value"),
        ("[1, 2.5, -3e", {"type": "array", "items": {"type": "number"}}, None),
        ("[1, 2.5]", {"type": "array", "items": {"type": "integer"}}, "2.5 where the schema allows an integer"),
        ("85359113786238663", {"type": "object"}, "a number where the schema allows object"),
        ("nulx", True, "'nulx' does not start null"),
        ('{"a": "\x01', True, "the control character"),
    ],
)
def test_a_prefix_is_judged_character_by_character(text, schema, problem):
    found = prefix_problem(text, schema)
    assert found is None if problem is None else problem in found, found


def test_a_prefix_may_be_followed_by_a_literal():
    unit = WEATHER["function"]["parameters"]
    assert prefix_problem('{"unit": "kelvin"}}</tool', unit, then="}</tool_call>") is None
    assert "'}</tool_call>' must follow the JSON value" in prefix_problem(
        '{"unit": "kelvin"}}<x', unit, then="}</tool_call>"
    )


def test_tool_arguments_are_judged_against_the_named_function():
    assert argument_problem(ToolCall("get_time", '{"zone": "cet"}')) is None
    assert "are not JSON" in argument_problem(ToolCall("get_time", "{not json"))
    assert "breaks the schema" in argument_problem(ToolCall("get_time", "85359113786238663"))
    assert "not a declared function" in argument_problem(ToolCall("get_date", "{}"))


class _StreamingCompletions:
    """Streams a bare completion of ``tokens`` one-token chunks (then usage), as vLLM does with include_usage, and
    honours ``enough`` as the bounded client does; records how many chunks it was made to send."""

    def __init__(self, tokens):
        self.tokens, self.sent = tokens, 0

    def post(self, path, body, enough=None):
        assert body["stream"] and body["ignore_eos"] and "max_tokens" not in body
        events = [
            {"choices": [{"index": 0, "text": "x", "finish_reason": "length" if i == self.tokens - 1 else None}]}
            for i in range(self.tokens)
        ]
        events.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": self.tokens}})
        sent = ""
        for event in events:
            sent += f"data: {json.dumps(event)}\n\n"
            self.sent += 1
            if enough is not None and enough(sent.encode()):
                return Response("POST", path, 200, httpx.Headers(), sent.encode(), len(sent), True, 0.01)
        sent += "data: [DONE]\n\n"
        return Response("POST", path, 200, httpx.Headers(), sent.encode(), len(sent), False, 0.01)


@pytest.mark.parametrize(("default", "observed", "sent"), [(16, 16, 17), (5, 5, 6), (4096, "more than 16", 16)])
def test_the_bare_completion_reads_16_tokens_at_most(default, observed, sent):
    server = _StreamingCompletions(default)
    assert completions_max_tokens(server, "m") == observed
    assert server.sent == sent  # a longer default is hung up on after 16 tokens


HERMES = [
    {"begin": '<tool_call>\n{"name": "{name}", "arguments": ', "end": "}\n</tool_call>"},
    {"begin": '<tool_call>{"name": "{name}", "arguments": ', "end": "}</tool_call>"},
]


def cut(text="", calls=(), streamed=False):
    return Answer(text, ["length"], list(calls), streamed)


def test_a_cut_call_is_judged_by_what_was_generated():
    names = ["get_weather"]
    # A whole answer: its raw text against the parser's envelope and the function's parameters.
    padded = '<tool_call>{"name": "get_weather", "arguments": {"unit"  :\n \n   \n   \n'
    assert judge_cut_call(cut(padded), names, "hermes", HERMES) == HELD
    assert judge_cut_call(cut("<tool_c"), names, "hermes", HERMES) == HELD
    wrong_value = judge_cut_call(
        cut('<tool_call>{"name": "get_weather", "arguments": {"unit": "f'), names, "hermes", HERMES
    )
    assert "get_weather's arguments at character 10" in wrong_value.problem
    assert "does not start a call" in judge_cut_call(cut("The weather is"), names, "hermes", HERMES).problem
    other = judge_cut_call(cut('<tool_call>{"name": "get_time", "arguments": {'), names, "hermes", HERMES)
    assert "does not start a call" in other.problem
    # Streamed: the last call may stop inside its arguments; the ones before it must be whole.
    assert (
        judge_cut_call(cut(calls=[ToolCall("get_weather", '{"unit"  :\n ')], streamed=True), names, "hermes", HERMES)
        == HELD
    )
    broken = cut(calls=[ToolCall("get_weather", '{"zone"')], streamed=True)
    assert "'z' does not start any of ['unit']" in judge_cut_call(broken, names, "hermes", HERMES).problem
    assert (
        "names 'get_time'"
        in judge_cut_call(cut(calls=[ToolCall("get_time", "{")], streamed=True), names, "hermes", HERMES).problem
    )
    # A parser the contract data has no envelope for: the raw text cannot be judged.
    unknown = judge_cut_call(cut("[TOOL_CALLS]"), names, "mistral", None)
    assert unknown.undecided == "the contract data has no tool-call envelope for the mistral parser"


def _context(version):
    from packaging.version import Version

    from pytest_vllm_conformance.catalogue import contracts
    from pytest_vllm_conformance.catalogue.cases import CaseContext
    from pytest_vllm_conformance.catalogue.expectations import Expectations

    return CaseContext(None, Expectations(contracts.load(), Version(version), None), None)


def test_a_refusal_in_any_backends_words_names_the_problem():
    (missing_ref,) = [case for case in invalid_constraints(_context("0.32.0")) if "$defs" in case.name]
    auto = "Grammar error: Pointer '/$defs/missing' does not exist"
    xgrammar = (
        "Failed to transform json schema into a grammar: [05:14:14] <path>:4950: Cannot find field $defs in #/$defs/x"
    )
    assert (missing_ref.worded_by(auto), missing_ref.worded_by(xgrammar)) == ("auto", "xgrammar")
    assert (
        missing_ref.worded_by("Failed to transform json schema into a regex: Invalid reference path: $defs")
        == "outlines"
    )
    assert missing_ref.worded_by("Bad Request") is None
    assert "'Cannot find field $defs' (xgrammar)" in missing_ref.wordings()


def test_no_version_lets_a_request_forbid_free_whitespace_and_the_skip_says_what_does():
    ctx = _context("0.32.0")
    assert all(not case.no_free_whitespace for case in constraint_cases(ctx))
    note = padding_note(ctx.expect.fact("json_whitespace_control"), ctx.expect.version_label)
    assert note.startswith("the model pads with the whitespace the constraint allows; vLLM 0.32.0 lets no request")
    assert '"disable_any_whitespace": true' in note
    # Where a version has such fields, the json cases send them.
    case = ConstraintCase(CONSTRAINTS[("structured_outputs", "json")], "completions", False, {"no_ws": True})
    assert case.request("m")[1]["structured_outputs"] == {"json": OBJECT_SCHEMA, "no_ws": True}


def test_tool_call_answers_are_judged_in_openais_chat_shape():
    from pytest_vllm_conformance.protocol.schemas import deviations_from

    deviations = deviations_from(_context("0.32.0").expect.fact("wire_deviations"))
    whole = json.loads((SAMPLES / "chat_tool_call.json").read_text())
    assert shape_problems(response(json.dumps(whole)), streamed=False, deviations=deviations) == []
    whole["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"unit": "kelvin"}
    assert shape_problems(response(json.dumps(whole)), streamed=False, deviations=deviations) == [
        '$.choices[0].message.tool_calls[0].function.arguments: expected string, got {"unit": "kelvin"}'
    ]
    streamed = (SAMPLES / "chat_tool_call_stream.sse").read_text()
    assert shape_problems(response(streamed), streamed=True, deviations=deviations) == []
    dropped = streamed.replace('"type":"function","index":0,', '"type":"function",')
    assert shape_problems(response(dropped), streamed=True, deviations=deviations) == [
        "event 2 $.choices[0].delta.tool_calls[0].index: expected the field (required by OpenAI), got no such field"
    ]


def test_a_streamed_calls_first_fragment_must_carry_its_id_type_and_name():
    from pytest_vllm_conformance.protocol.schemas import deviations_from

    deviations = deviations_from(_context("0.32.0").expect.fact("wire_deviations"))
    streamed = (SAMPLES / "chat_tool_call_stream.sse").read_text()
    first = '{"id":"chatcmpl-tool-a20bfb163079da95","type":"function","index":0,"function":{"name":"get_weather"}}'
    assert first in streamed
    # Each per-chunk schema allows a fragment of an index alone: only the first fragment of a call is held to more.
    anonymous = streamed.replace(first, '{"index":0,"function":{"name":"get_weather"}}')
    assert shape_problems(response(anonymous), streamed=True, deviations=deviations) == [
        "event 2 $.choices[0].delta.tool_calls[0].id: expected the field (required by OpenAI of a call, "
        "so of its first fragment), got no such field",
        "event 2 $.choices[0].delta.tool_calls[0].type: expected the field (required by OpenAI of a call, "
        "so of its first fragment), got no such field",
    ]
    retyped = streamed.replace(
        '"type":"function","index":0,"function":{"name":"get_weather"}', '"type":"tool","index":0'
    )
    assert shape_problems(response(retyped), streamed=True, deviations=deviations) == [
        'event 2 $.choices[0].delta.tool_calls[0].type: expected the constant "function", got "tool"',
        "event 2 $.choices[0].delta.tool_calls[0].function.name: expected the field (required by OpenAI of a "
        "call, so of its first fragment), got no such field",
    ]
