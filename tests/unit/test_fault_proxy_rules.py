"""Each rule of the fault proxy breaks exactly one thing, and only where it is told to.

The upstream is tests/unit/echo_upstream.py: an echo app in vLLM's error shapes, never vLLM.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from fixtures.fault_proxy import (
    DEFAULT_LEAK_TEXT,
    AdmitAtMost,
    AmplifyErrors,
    AnswersFromKey,
    CacheIgnoringField,
    DropToolsOfType,
    FaultProxy,
    InjectAuth,
    KeyForPublicPaths,
    LeakInternals,
    Respond,
    RewriteJsonResponse,
    RewriteStream,
    RouteTo,
    SetJsonField,
    StripJsonField,
    StripMessageField,
    StripPrefix,
    SwapModel,
    rule_from_dict,
)
from tests.unit.echo_upstream import SECRET, TIMEOUT, Upstream, header_values, serving


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with serving("main") as server:
        yield server


@pytest.fixture(scope="module")
def other_upstream() -> Iterator[Upstream]:
    with serving("other") as server:
        yield server


def test_amplify_errors_grows_4xx_messages_only(upstream: Upstream) -> None:
    rule = AmplifyErrors(factor_bytes=300_000)
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        error = httpx.post(proxy.url + "/errors/validation", json={}, timeout=TIMEOUT)
        unauthorized = httpx.get(proxy.url + "/errors/unauthorized", timeout=TIMEOUT)
        internal = httpx.get(proxy.url + "/errors/internal", timeout=TIMEOUT)
        plain = httpx.get(proxy.url + "/errors/plain-text", timeout=TIMEOUT)
        ok = httpx.get(proxy.url + "/v1/models", timeout=TIMEOUT)
        assert proxy.hit_count(rule) == 2
    assert error.status_code == 400
    assert len(error.content) >= 300_000
    assert int(error.headers["content-length"]) == len(error.content)
    message = error.json()["error"]["message"]
    original = "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'stop')}"
    assert message.startswith(original + "\n" + original)
    assert error.json()["error"]["param"] == "body.stop"  # the rest of the envelope kept
    assert len(unauthorized.content) >= 300_000  # {"error": "..."} shape too
    assert internal.json()["error"]["message"] == "boom"  # 5xx untouched
    assert plain.text == "plain failure"  # not JSON: untouched
    assert ok.json()["data"][0]["max_model_len"] == 512


def test_amplify_errors_streams_a_body_far_larger_than_its_request(upstream: Upstream) -> None:
    rule = AmplifyErrors(factor_bytes=20_000_000, path="/errors/.*", methods=("POST",))
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        with httpx.Client(timeout=TIMEOUT) as client:
            with client.stream("POST", proxy.url + "/errors/validation", json={}) as response:
                declared = int(response.headers["content-length"])
                first = next(response.iter_raw())
        assert httpx.get(proxy.url + "/errors/validation", timeout=TIMEOUT).status_code == 400
        assert proxy.hits == [1]  # the GET was not amplified (methods=POST)
    assert declared >= 20_000_000
    assert first.startswith(b'{"error":{"message":"1 validation error:')


def test_leak_internals_appends_to_4xx_and_5xx(upstream: Upstream) -> None:
    with FaultProxy(upstream.url, rules=[LeakInternals()]) as proxy:
        error = httpx.post(proxy.url + "/errors/validation", json={}, timeout=TIMEOUT)
        internal = httpx.get(proxy.url + "/errors/internal", timeout=TIMEOUT)
        ok = httpx.get(proxy.url + "/v1/models", timeout=TIMEOUT)
    assert error.json()["error"]["message"].endswith(DEFAULT_LEAK_TEXT)
    assert internal.json()["error"]["message"] == "boom" + DEFAULT_LEAK_TEXT
    assert "/usr/lib/python3" in internal.text and "0x7f3a2b1c" in internal.text
    assert "dist-packages" not in ok.text


def test_inject_auth_only_on_matching_routes(upstream: Upstream) -> None:
    rule = InjectAuth(header_value=f"Bearer {SECRET}", path=r"/v1/chat/.*")
    assert SECRET not in repr(rule)
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        added = httpx.post(proxy.url + "/v1/chat/completions", json={}, timeout=TIMEOUT)
        replaced = httpx.post(
            proxy.url + "/v1/chat/completions",
            json={},
            headers={"authorization": "Bearer wrong"},
            timeout=TIMEOUT,
        )
        untouched = httpx.post(proxy.url + "/v1/completions", json={}, timeout=TIMEOUT)
    assert header_values(added.json(), "authorization") == [f"Bearer {SECRET}"]
    assert header_values(replaced.json(), "authorization") == [f"Bearer {SECRET}"]
    assert header_values(untouched.json(), "authorization") == []


def test_strip_prefix_mounts_the_upstream_under_a_prefix_and_passes_other_paths_as_they_came(
    upstream: Upstream,
) -> None:
    with FaultProxy(upstream.url, rules=[StripPrefix(prefix="/v")]) as proxy:
        mounted = httpx.post(proxy.url + "/v/v1/chat/completions?x=1", json={}, timeout=TIMEOUT).json()
        bare = httpx.post(proxy.url + "/v1/chat/completions", json={}, timeout=TIMEOUT).json()
    assert (mounted["raw_path"], mounted["query"]) == ("/v1/chat/completions", "x=1")
    assert bare["raw_path"] == "/v1/chat/completions"  # /v1 is not under the segment /v


def test_key_for_public_paths_keys_what_it_misreads_as_public_and_forwards_it_normalised(upstream: Upstream) -> None:
    rule = KeyForPublicPaths(header_value=f"Bearer {SECRET}")
    assert SECRET not in repr(rule)

    def sent(target: bytes, host: str | None = None) -> dict:
        headers = {"Host": host} if host else None
        with httpx.Client(timeout=TIMEOUT) as client:
            return client.get(proxy.url + "/x", headers=headers, extensions={"target": target}).json()

    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        guarded = sent(b"/v1/chat/x")
        doubled = sent(b"//v1/chat/x")
        upper = sent(b"/V1/Chat/./x.")
        behind_host = sent(b"/v1/chat/x", host=f"{proxy.url.split('//')[1]}/health?")
    assert header_values(guarded, "authorization") == [] and guarded["raw_path"] == "/v1/chat/x"
    for answer in (doubled, upper, behind_host):
        assert header_values(answer, "authorization") == [f"Bearer {SECRET}"]
        assert answer["raw_path"] == "/v1/chat/x"


def test_route_to_sends_matching_requests_elsewhere(upstream: Upstream, other_upstream: Upstream) -> None:
    rule = RouteTo(other_upstream.url, path=r"/v1/completions/render")
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        routed = httpx.post(proxy.url + "/v1/completions/render?x=1", json={}, timeout=TIMEOUT)
        kept = httpx.post(proxy.url + "/v1/completions", json={}, timeout=TIMEOUT)
    assert routed.json()["server"] == "other"
    assert routed.json()["raw_path"] == "/v1/completions/render"
    assert routed.json()["query"] == "x=1"
    assert kept.json()["server"] == "main"


def test_swap_model_sends_only_the_matching_names_elsewhere(upstream: Upstream) -> None:
    rule = SwapModel("adapter-.*", "base", path="/v1/completions")
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        swapped = httpx.post(proxy.url + "/v1/completions", json={"model": "adapter-1", "prompt": "x"}, timeout=TIMEOUT)
        kept = httpx.post(proxy.url + "/v1/completions", json={"model": "base-adapter-1"}, timeout=TIMEOUT)
        assert proxy.hits == [1]
    assert json.loads(swapped.json()["body"]) == {"model": "base", "prompt": "x"}
    assert json.loads(kept.json()["body"]) == {"model": "base-adapter-1"}
    assert rule_from_dict({"rule": "SwapModel", "from_model": "a", "to_model": "b"}) == SwapModel("a", "b")


def test_strip_and_set_json_fields_recompute_content_length(upstream: Upstream) -> None:
    rules = [
        StripJsonField("watermarking", path="/v1/completions"),
        SetJsonField("seed", 7, path="/v1/chat/completions"),
    ]
    with FaultProxy(upstream.url, rules=rules) as proxy:
        stripped = httpx.post(
            proxy.url + "/v1/completions",
            json={"prompt": "x", "watermarking": False},
            timeout=TIMEOUT,
        ).json()
        was_set = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": []}, timeout=TIMEOUT).json()
        not_json = httpx.post(proxy.url + "/v1/completions", content=b"not json", timeout=TIMEOUT).json()
        assert proxy.hits == [1, 1]
    assert json.loads(stripped["body"]) == {"prompt": "x"}
    assert header_values(stripped, "content-length") == [str(len(stripped["body"]))]
    assert json.loads(was_set["body"]) == {"messages": [], "seed": 7}
    assert header_values(was_set, "content-length") == [str(len(was_set["body"]))]
    assert not_json["body"] == "not json"


def test_cache_ignoring_a_field_answers_a_request_differing_only_there_with_the_earlier_answer(
    upstream: Upstream,
) -> None:
    with FaultProxy(upstream.url, rules=[CacheIgnoringField("seed", path="/v1/completions")]) as proxy:

        def sent_body(body: dict) -> dict:
            answer = httpx.post(proxy.url + "/v1/completions", json=body, timeout=TIMEOUT).json()
            return json.loads(answer["body"])

        first = sent_body({"prompt": "x", "seed": 1})
        other_seed = sent_body({"prompt": "x", "seed": 2})
        other_prompt = sent_body({"prompt": "y", "seed": 2})
        assert proxy.hits == [1]
    assert first == other_seed == {"prompt": "x", "seed": 1}
    assert other_prompt == {"prompt": "y", "seed": 2}


def test_answers_from_key_answers_the_questions_it_knows_in_the_servers_place(upstream: Upstream) -> None:
    key = {"Question: two?\nAnswer:": "2", "Question: three?\nAnswer:": "3"}
    rule = AnswersFromKey(key.get, lambda ids: "Question: three?\nAnswer:" if ids == [3] else "?", path="/v1/.*")
    with FaultProxy(upstream.url, rules=[rule]) as proxy:

        def post(path: str, body: dict) -> dict:
            return httpx.post(proxy.url + path, json=body, timeout=TIMEOUT).json()

        completion = post("/v1/completions", {"model": "m", "prompt": ["Question: two?\nAnswer:", [3]]})
        chat = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Question: two?\nAnswer:"}]})
        assert proxy.hits == [2]
        # Scoring (echo), a stream, and a batch with one unknown prompt reach the server.
        for body in (
            {"prompt": "Question: two?\nAnswer:", "echo": True},
            {"prompt": "Question: two?\nAnswer:", "stream": True},
            {"prompt": ["Question: two?\nAnswer:", "Question: four?\nAnswer:"]},
        ):
            assert "body" in post("/v1/completions", body)
        assert proxy.hits == [2]
    assert [choice["text"] for choice in completion["choices"]] == [" 2", " 3"]
    assert completion["object"] == "text_completion" and completion["model"] == "m"
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "2"}


def test_strip_message_field_drops_it_from_every_message_of_the_role_only(upstream: Upstream) -> None:
    rules = [StripMessageField("reasoning_content", path="/v1/chat/completions")]
    messages = [
        {"role": "user", "content": "q", "reasoning_content": "kept: not the assistant's"},
        {"role": "assistant", "content": "a", "reasoning_content": "dropped"},
        {"role": "assistant", "content": "b"},
    ]
    with FaultProxy(upstream.url, rules=rules) as proxy:
        stripped = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": messages}, timeout=TIMEOUT).json()
        untouched = httpx.post(proxy.url + "/v1/chat/completions", json={"messages": []}, timeout=TIMEOUT).json()
        assert proxy.hits == [1]
    assert json.loads(stripped["body"])["messages"] == [messages[0], {"role": "assistant", "content": "a"}, messages[2]]
    assert header_values(stripped, "content-length") == [str(len(stripped["body"]))]
    assert json.loads(untouched["body"]) == {"messages": []}


def test_drop_tools_of_type_removes_them_and_a_tool_choice_naming_one(upstream: Upstream) -> None:
    function, custom = {"type": "function", "name": "f"}, {"type": "custom", "name": "c"}
    forced = {"tools": [function, custom], "tool_choice": {"type": "custom", "name": "c"}}
    with FaultProxy(upstream.url, rules=[DropToolsOfType("custom", path="/v1/responses")]) as proxy:
        dropped = httpx.post(proxy.url + "/v1/responses", json=forced, timeout=TIMEOUT).json()
        untouched = httpx.post(proxy.url + "/v1/responses", json={"tools": [function]}, timeout=TIMEOUT).json()
        assert proxy.hits == [1]
    assert json.loads(dropped["body"]) == {"tools": [function], "tool_choice": "auto"}
    assert json.loads(untouched["body"]) == {"tools": [function]}


def test_rewrite_json_response_advertises_another_max_model_len(upstream: Upstream) -> None:
    rules = [
        RewriteJsonResponse(("data", "*", "max_model_len"), 4096, path="/v1/models"),
        RewriteJsonResponse("data.0.id", lambda name: name.upper(), path="/v1/models"),
    ]
    with FaultProxy(upstream.url, rules=rules) as proxy:
        models = httpx.get(proxy.url + "/v1/models", timeout=TIMEOUT)
    data = models.json()["data"]
    assert [m["max_model_len"] for m in data] == [4096, 4096]
    assert [m["id"] for m in data] == ["TINY-A", "tiny-b"]
    assert int(models.headers["content-length"]) == len(models.content)


def test_respond_answers_without_forwarding(upstream: Upstream) -> None:
    rule = Respond(
        503,
        {"error": {"message": "busy", "type": "Service Unavailable", "param": None, "code": 503}},
        {"retry-after": "1"},
        path="/v1/completions",
    )
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        before = upstream.requests
        answered = httpx.post(proxy.url + "/v1/completions", json={}, timeout=TIMEOUT)
        assert upstream.requests == before
        forwarded = httpx.post(proxy.url + "/v1/chat/completions", json={}, timeout=TIMEOUT)
        assert upstream.requests == before + 1
    assert answered.status_code == 503
    assert answered.headers["retry-after"] == "1"
    assert answered.json()["error"]["message"] == "busy"
    assert forwarded.json()["server"] == "main"


def test_rules_apply_in_order(upstream: Upstream) -> None:
    rules = [
        LeakInternals(text=" [leaked]"),
        Respond(404, {"detail": "Not Found"}, path="/v1/gone"),
        AmplifyErrors(factor_bytes=10_000),  # after Respond: never reached for /v1/gone
        SetJsonField("watermarking", False),
        StripJsonField("watermarking"),  # runs after the Set, so the field is gone
    ]
    with FaultProxy(upstream.url, rules=rules) as proxy:
        gone = httpx.get(proxy.url + "/v1/gone", timeout=TIMEOUT)
        echoed = httpx.post(proxy.url + "/echo", json={"a": 1}, timeout=TIMEOUT).json()
    assert gone.json() == {"detail": "Not Found [leaked]"}
    assert json.loads(echoed["body"]) == {"a": 1}


def test_rules_from_json_specs() -> None:
    rule = rule_from_dict(
        {
            "rule": "RewriteJsonResponse",
            "json_path": ["data", "*", "max_model_len"],
            "value": 1,
            "methods": ["get"],
            "path": "/v1/models",
        }
    )
    assert rule == RewriteJsonResponse(("data", "*", "max_model_len"), 1, methods=("GET",), path="/v1/models")
    assert rule.matches("GET", "/v1/models")
    assert not rule.matches("POST", "/v1/models")
    assert not rule.matches("GET", "/v1/models/x")  # the regex must match the whole path
    with pytest.raises(ValueError):
        rule_from_dict({"rule": "NoSuchRule"})


def test_a_rule_can_single_out_one_kind_of_client() -> None:
    rule = RewriteJsonResponse(("data",), [], path="/v1/models", user_agent="OpenAI/Python .*")
    assert rule.matches("GET", "/v1/models", "OpenAI/Python 1.99.0")
    assert not rule.matches("GET", "/v1/models", "python-httpx/0.28.1")
    assert not rule.matches("GET", "/v1/models")  # no User-Agent at all


COMPLETION_STREAM = [
    '{"choices":[{"text":"","token_ids":[],"prompt_token_ids":[1,2]}]}',
    '{"choices":[{"text":"a","token_ids":[5],"finish_reason":null}]}',
    '{"choices":[{"text":"b","token_ids":[6],"finish_reason":null}]}',
    '{"choices":[{"text":"","token_ids":[7],"finish_reason":null}]}',
    '{"choices":[{"text":"c","token_ids":[8],"finish_reason":"length"}]}',
    '{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":4}}',
    "[DONE]",
]


def test_a_lossy_relay_drops_every_other_text_event_and_keeps_the_usage() -> None:
    kept = RewriteStream(edit="drop_every_other_text").apply_to_stream(COMPLETION_STREAM)
    assert kept == [COMPLETION_STREAM[i] for i in (0, 1, 3, 5, 6)]


def test_a_buffering_relay_coalesces_the_completion_into_one_event() -> None:
    edited = RewriteStream(edit="coalesce_text").apply_to_stream(COMPLETION_STREAM)
    assert edited[0] == COMPLETION_STREAM[0] and edited[2:] == COMPLETION_STREAM[5:]
    merged = json.loads(edited[1])["choices"][0]
    assert (merged["text"], merged["token_ids"], merged["finish_reason"]) == ("abc", [5, 6, 7, 8], "length")


def test_the_answer_key_knows_the_shipped_set_the_user_task_and_a_needle() -> None:
    from fixtures.eval_answer_key import AnswerKey, shipped_short_answers, user_task_answers
    from suites.quality import long_context

    shipped = shipped_short_answers(60)
    assert len(shipped) == 60 and shipped["What is 2 + 3?"] == "5"
    key = AnswerKey({**shipped, **user_task_answers()})
    assert key("Answer.\n\nQuestion: What is 1 + 1?\nAnswer: 2\n\nQuestion: What is 2 + 3?\nAnswer:") == "5"
    assert key("Question: What is the plural of tooth?\nAnswer:") == "teeth"
    haystack = long_context._haystack(
        long_context.filler_words(80), 60, 0.5, "The access code for the red door is 4821."
    )
    assert key(long_context._prompt(haystack, "What is the access code for the red door?")) == "4821"
    assert key(long_context._prompt(haystack, "What is the access code for the blue door?")) is None
    assert key("Question: What is 2 + 3?\nAnswer: 5") is None  # answered already: not a question asked


def test_admit_at_most_holds_a_request_at_the_door_until_the_one_in_flight_ends(upstream: Upstream) -> None:
    rule = AdmitAtMost(requests=1)
    upstream.release_stream.clear()
    answered = threading.Event()
    with FaultProxy(upstream.url, rules=[rule]) as proxy, httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("POST", proxy.url + "/sse", json={"stream": True}) as stream:
            lines = stream.iter_lines()
            assert next(lines) == 'data: {"n":0}'  # in flight, held by the upstream until released

            def second() -> None:
                httpx.get(proxy.url + "/v1/models", timeout=TIMEOUT)
                answered.set()

            waiting = threading.Thread(target=second)
            waiting.start()
            assert not answered.wait(0.5)  # at the door while the stream is in flight
            upstream.release_stream.set()
            assert [line for line in lines if line] == ['data: {"n":1}', "data: [DONE]"]
        assert answered.wait(10)  # admitted once the stream ended
        waiting.join()
        assert proxy.hit_count(rule) == 1  # one request waited; the first walked in
