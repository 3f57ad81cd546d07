"""The rendering corpus in the capture and the diff: token text, dates, and the first differing position."""

import copy
import datetime
import json

import httpx
import pytest

from pytest_vllm_conformance.connection.client import Response
from pytest_vllm_conformance.observed.diff import differences
from pytest_vllm_conformance.observed.rendering import render_corpus
from pytest_vllm_conformance.observed.rendering_corpus import CONVERSATIONS
from pytest_vllm_conformance.observed.rendering_drift import changes, first_difference
from pytest_vllm_conformance.observed.token_text import date_spans, date_texts, token_bytes, tokens_text
from pytest_vllm_conformance.protocol import sse
from suites.rendering.chat_path import Compared, refusal_compared
from suites.token_accounting import usage as accounting
from suites.token_accounting.usage import Usage, usage_problems
from tests.unit.sample_observation import observation


def rendering(**conversations):
    return {"corpus": 1, "dates": "", "conversations": conversations}


def rendered(tokens, dates=()):
    return {"status": 200, "ids": [hash(t) % 1000 for t in tokens], "tokens": list(tokens), "dates": list(dates)}


def test_token_strings_read_as_text_in_either_alphabet():
    assert token_bytes("ĠhelloĊ") == b" hello\n"
    assert token_bytes("▁hello") == b" hello" and token_bytes("<0x0A>") == b"\n"
    assert tokens_text(["<|im_start|>", "user", "Ċ", "caf", "Ã©"]) == "<|im_start|>user\ncafé"


def test_the_corpus_covers_what_templates_branch_on():
    bodies = CONVERSATIONS.values()
    assert any(body.get("continue_final_message") for body in bodies)
    assert any(body.get("add_generation_prompt") is False and not body.get("continue_final_message") for body in bodies)
    assert any(body.get("tools") for body in bodies) and any(body.get("chat_template_kwargs") for body in bodies)
    messages = [message for body in bodies for message in body["messages"]]
    assert {"system", "user", "assistant", "tool"} <= {m["role"] for m in messages}
    assert any(m.get("tool_calls") for m in messages) and any(m.get("reasoning") for m in messages)


def test_a_date_the_template_wrote_is_found_and_compares_equal_on_another_day():
    def today(day, tokens):
        dates = date_texts(datetime.datetime(2024, 7, day, tzinfo=datetime.UTC))
        return rendered(tokens, date_spans(tokens, dates))

    yesterday = today(26, ["<|start|>", "Today", "Ġ", "26", "ĠJul", "Ġ2024", "Ċ", "hi"])
    later = today(27, ["<|start|>", "Today", "Ġ", "27", "ĠJul", "Ġ2024", "Ċ", "hi"])
    assert yesterday["dates"] == [(3, 6)]
    assert changes(rendering(a=yesterday), rendering(a=later)) == []
    other_text = today(27, ["<|start|>", "Today", "Ġ", "27", "ĠJul", "Ġ2024", "Ċ", "yo"])
    (change,) = changes(rendering(a=yesterday), rendering(a=other_text))
    assert change.why.startswith('first difference at token 5: "<date>\\nhi" (end) -> "<date>\\nyo" (end)')


def test_a_doubled_bos_shows_the_first_difference_as_text_on_both_sides():
    once = rendered(["<|begin_of_text|>", "<|im_start|>", "user", "Ċ", "hi"])
    twice = rendered(["<|begin_of_text|>", "<|begin_of_text|>", "<|im_start|>", "user", "Ċ", "hi"])
    (change,) = changes(rendering(**{"system prompt": once}), rendering(**{"system prompt": twice}))
    assert change.id == "rendering changed: system prompt" and change.matters
    assert change.why.startswith(
        'first difference at token 1: "<|begin_of_text|><|im_start|>user\\nhi" (end) -> '
        '"<|begin_of_text|><|begin_of_text|><|im_start|>user\\nhi" (end)'
    )
    assert (change.before, change.after) == ("5 tokens", "6 tokens")


def test_a_refusal_where_there_was_a_rendering_matters_and_two_refusals_compare_equal():
    refused = {"status": 400, "refused": "template error"}
    (change,) = changes(rendering(a=rendered(["x"])), rendering(a=refused))
    assert change.id == "rendering of a: rendered -> refused 400" and change.matters
    assert "now refuses this conversation (template error)" in change.why
    assert changes(rendering(a=refused), rendering(a=dict(refused))) == []


def test_ids_are_shown_where_the_version_returns_no_token_strings():
    before, after = {"status": 200, "ids": [1, 2, 3]}, {"status": 200, "ids": [1, 2, 4]}
    (change,) = changes(rendering(a=before), rendering(a=after))
    assert change.why.startswith("first difference at token 2: [1, 2, 3] -> [1, 2, 4]")
    assert first_difference([1, 2], [1, 2, 3]) == 2 and first_difference([1], [1]) is None


def test_the_profile_diff_fails_a_changed_rendering_and_an_older_capture_is_not_compared():
    target = observation()
    conversation = target["rendering"]["conversations"]["system prompt"]
    conversation["ids"] = [0, *conversation["ids"]]
    conversation["tokens"] = ["<|endoftext|>", *conversation["tokens"]]
    (found,) = differences(observation(), target)
    assert found.id == "rendering changed: system prompt" and found.matters
    assert found.why.startswith(
        'first difference at token 0: "<|im_start|>system\\nhi<|im_end|><|im_start|>user" -> '
        '"<|endoftext|><|im_start|>system\\nhi<|im_end|><|im_start|>"'
    )
    older = observation()
    older["rendering"]["corpus"] = 0
    (other_corpus,) = differences(older, observation())
    assert other_corpus.id == "rendering corpus changed" and other_corpus.verdict == "undecided"
    assert not other_corpus.matters and "no conversation was compared" in other_corpus.why
    (blind,) = differences(observation(rendering=None), observation())
    assert blind.id == "rendering not compared" and blind.matters
    assert differences(observation(rendering=None), observation(), ignore=["rendering"]) == []


def _response(path, status, body):
    text = json.dumps(body).encode()
    return Response("POST", path, status, httpx.Headers(), text, len(text), False, 0.0)


class _Tokenizer:
    """Answers /tokenize as vLLM does: a rendering, a template's refusal, or a gateway's 403."""

    def __init__(self, status_for_tools=400, blocked=False):
        self.status_for_tools, self.blocked = status_for_tools, blocked

    def post(self, path, json_body=None, **kw):
        if self.blocked:
            return _response(path, 403, {"detail": "Forbidden"})
        if any(m.get("tool_calls") for m in json_body["messages"]):
            return _response(path, self.status_for_tools, {"error": {"message": "template error", "code": 400}})
        return _response(path, 200, {"tokens": [1, 2], "token_strs": ["<|im_start|>", "hi"], "count": 2})


def test_a_refused_conversation_is_recorded_with_its_status_and_a_blocked_tokenize_is_unobserved():
    unobserved = {}
    corpus = render_corpus(_Tokenizer(), "m", unobserved)
    assert corpus is not None and unobserved == {}
    assert corpus["conversations"]["tool call and result"] == {"status": 400, "refused": "template error"}
    assert corpus["conversations"]["non-ASCII"] == {
        "status": 200,
        "ids": [1, 2],
        "tokens": ["<|im_start|>", "hi"],
        "dates": [],
    }
    assert render_corpus(_Tokenizer(blocked=True), "m", unobserved) is None
    assert unobserved == {"rendering": "POST /tokenize (system prompt) answered 403"}
    assert copy.deepcopy(corpus) == corpus


def test_only_the_same_client_error_on_both_paths_is_agreement():
    assert refusal_compared(400, 400, None) == Compared()
    assert refusal_compared(400, 422, None).problems == (
        "the chat request answered 400 and /tokenize 422: only the same client error on both is agreement",
    )
    # A server error is no refusal, even on both paths.
    assert refusal_compared(500, 500, None).problems
    tokenize_only = refusal_compared(400, 200, 12)
    assert tokenize_only.problems == ("/tokenize renders 12 tokens, but the chat request answered 400",)
    assert refusal_compared(200, 400, None).problems == (
        "the chat request was served, but /tokenize answered 400: compared with nothing",
    )


def test_an_answer_that_says_a_route_is_out_of_reach_leaves_the_conversation_undecided():
    # What the capture reads as unreachable (render.UNREACHABLE) says nothing of the template, on either side.
    both = refusal_compared(503, 503, None)
    assert both.problems == () and both.undecided == (
        "the chat request answered 503 and /tokenize answered 503: out of reach, which says nothing of the rendering"
    )
    assert refusal_compared(404, 404, None).undecided
    assert refusal_compared(None, 200, 12).undecided == (
        "the chat request got no answer: out of reach, which says nothing of the rendering"
    )
    assert refusal_compared(200, 429, None).undecided == (
        "/tokenize answered 429: out of reach, which says nothing of the rendering"
    )


def test_a_missing_total_fails_where_the_route_sends_one_and_not_on_anthropic_messages():
    assert usage_problems(Usage(27, 8, 35, 8), 27) == []
    assert usage_problems(Usage(27, 8, None, 8), 27) == ["no total_tokens, which the version sends on this route"]
    assert usage_problems(Usage(27, 8, None, 8, reports_total=False), 27) == []
    assert usage_problems(Usage(27, 8, 36, 8), 27) == ["total_tokens 36 is not prompt 27 + completion 8"]


RESPONSES_ROUTE = next(route for route in accounting.ROUTES if route.name == "responses")


def _responses_stream(closing):
    events = [{"type": "response.created", "response": {"status": "in_progress"}}]
    if closing:
        usage = {"input_tokens": 27, "output_tokens": 8, "total_tokens": 35}
        cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "usage": usage}
        events.append({"type": closing, "response": cut})
    body = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)
    return sse.parse(body.encode(), named_events=True)


@pytest.mark.parametrize("closing", ["response.completed", "response.incomplete"])
def test_a_cut_responses_stream_is_read_from_either_closing_event(closing):
    # OpenAI closes a cut answer with response.incomplete, vLLM 0.28-0.32 with response.completed.
    usage = RESPONSES_ROUTE.read(_responses_stream(closing), True)
    assert usage == Usage(27, 8, 35, 8)
    assert usage_problems(usage, 27) == []


def test_a_responses_stream_without_its_closing_event_has_no_usage_to_check():
    usage = RESPONSES_ROUTE.read(_responses_stream(None), True)
    assert usage_problems(usage, 27) == [
        "the stream has no closing event (response.completed or response.incomplete): no usage to check"
    ]
