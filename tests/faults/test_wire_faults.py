"""The wire suite FAILS exactly the contract a broken body or stream breaks, naming the JSON path.

Each fault is one rule of the fault proxy in front of the real plain server:
a required field nulled, ``[DONE]`` dropped or sent twice, a choice finished
twice, the usage chunk carrying choices, a validation error sent as 200 and
an error event, an error body without its type, a Responses answer or event
with a required field nulled, a Responses stream without its terminal event,
a continuous usage chunk without usage, a stream of nothing but ``[DONE]``, a
Responses message typed as a function call or as no type OpenAI has. Every
other wire contract must still pass. A Responses event of a type OpenAI's
stream lacks is reported, and fails under ``wire.strict_openai``.
"""

import pytest

from fixtures.fault_proxy import ErrorAsStreamEvent, FaultProxy, Respond, RewriteJsonResponse, RewriteStream
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks
from tests.conftest import requires_vllm, run_suites
from tests.integration.test_suites_on_real_vllm import WIRE_PLAIN
from tests.integration.test_wire_on_real_vllm import STRICT_PROFILE, STRICT_VERDICTS
from tests.support.profiles import PLAIN_PROFILE, hiding

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain")]

CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
WITH_USAGE, WITHOUT_USAGE, CONTINUOUS = "stream usage logprobs", "stream", "stream continuous usage logprobs"
GENERATION = r"/v1/(chat/)?completions"
NO_CHOICE = "no event carries a choice (0 JSON event(s) before [DONE]): the stream has no text and no finish_reason"

# fault id -> (the proxy's one rule, the verdicts it changes, {failed test: words its message must hold})
FAULTS = {
    "a required field nulled": (
        RewriteJsonResponse(("choices", 0, "text"), None, path=COMPLETIONS),
        {"wire.completion_shape": {"failed": 2}},
        {f"wire.completion_shape[{COMPLETIONS} plain]": "$.choices[0].text: expected string, got null"},
    ),
    "[DONE] dropped": (
        RewriteStream(edit="drop_done", path=CHAT),
        {"wire.chat_stream_framing": {"failed": 2}},
        {f"wire.chat_stream_framing[{CHAT} {WITHOUT_USAGE}]": "the stream does not end with `data: [DONE]`"},
    ),
    "[DONE] sent twice": (
        RewriteStream(edit="double_done", path=COMPLETIONS),
        {"wire.completion_stream_framing": {"failed": 2}},
        {f"wire.completion_stream_framing[{COMPLETIONS} {WITH_USAGE}]": "`data: [DONE]` is sent 2 times"},
    ),
    "a choice finished twice": (
        RewriteStream(edit="finish_twice", path=CHAT),
        {"wire.chat_stream_framing": {"failed": 2}},
        {f"wire.chat_stream_framing[{CHAT} {WITHOUT_USAGE}]": "choice 0 finished 2 times ($.choices[*].finish_reason"},
    ),
    "the usage chunk carrying choices": (
        RewriteStream(edit="usage_with_choices", path=CHAT),
        # The continuous-usage stream's final usage chunk carries them too.
        {
            "wire.chat_stream_framing": {"failed": 1, "passed": 1},
            "wire.stream_continuous_usage": {"failed": 1, "passed": 1},
        },
        {
            f"wire.chat_stream_framing[{CHAT} {WITH_USAGE}]": "$.choices: the usage chunk carries 1 choice(s), not []",
            f"wire.stream_continuous_usage[{CHAT} {CONTINUOUS}]": "$.choices: expected exactly one final usage chunk",
        },
    ),
    "an error turned into 200 and an error event": (
        ErrorAsStreamEvent(path=COMPLETIONS),
        {"wire.stream_errors_before_streaming": {"failed": 2, "passed": 2}},
        {
            f"wire.stream_errors_before_streaming[{COMPLETIONS} invalid parameter]": (
                "must be refused with 400 and a JSON error body before any event, got 200 and an error event"
            )
        },
    ),
    "an error body without error.type": (
        RewriteJsonResponse(("error", "type"), None, path=CHAT),
        {"wire.error_shape": "failed"},
        {f"wire.error_shape[{CHAT} unknown model]": "$.error.type: expected string, got null"},
    ),
    "an error's param renamed": (
        RewriteJsonResponse(("error", "param"), "body.model", path=COMPLETIONS),
        {"wire.error_status_map": {"failed": 3, "passed": 3}},
        {
            "wire.error_status_map[unknown model (POST /v1/completions)]": (
                "$.error.param: expected 'model', got 'body.model'"
            )
        },
    ),
    "a Responses answer's text nulled": (
        RewriteJsonResponse(("output", 0, "content", 0, "text"), None, path=RESPONSES),
        {"wire.responses_shape": "failed"},
        {f"wire.responses_shape[{RESPONSES} plain]": "$.output[0].content[0].text: expected string, got null"},
    ),
    "a Responses event's required field nulled": (
        RewriteStream(edit="null_output_item_index", path=RESPONSES),
        {"wire.responses_stream_shape": "failed"},
        {f"wire.responses_stream_shape[{RESPONSES} stream]": "event 3 $.output_index: expected integer, got null"},
    ),
    "the Responses terminal event dropped": (
        RewriteStream(edit="drop_terminal", path=RESPONSES),
        {"wire.responses_stream_framing": "failed"},
        {f"wire.responses_stream_framing[{RESPONSES} stream]": "$.type: expected exactly one terminal event"},
    ),
    "a stream replaced by [DONE] only": (
        RewriteStream(edit="only_done", path=GENERATION),
        {
            "wire.completion_stream_shape": {"failed": 2},
            "wire.completion_stream_framing": {"failed": 2},
            "wire.chat_stream_shape": {"failed": 2},
            "wire.chat_stream_framing": {"failed": 2},
            "wire.stream_continuous_usage": {"failed": 2},
            # vLLM's 200 and error event for top_logprobs, emptied: no longer the known deviation.
            "wire.stream_errors_before_streaming": {"failed": 1, "passed": 3},
        },
        {
            f"wire.chat_stream_framing[{CHAT} {WITHOUT_USAGE}]": NO_CHOICE,
            f"wire.completion_stream_framing[{COMPLETIONS} {WITHOUT_USAGE}]": NO_CHOICE,
            f"wire.chat_stream_shape[{CHAT} {WITHOUT_USAGE}]": "nothing to judge: the stream carries no JSON event",
            f"wire.completion_stream_shape[{COMPLETIONS} {WITH_USAGE}]": "nothing to judge",
        },
    ),
    "a Responses message typed as a function call": (
        RewriteJsonResponse(("output", 0, "type"), "function_call", path=RESPONSES),
        {"wire.responses_shape": "failed"},
        {
            f"wire.responses_shape[{RESPONSES} plain]": (
                "$.output[0].call_id: expected the field (required by OpenAI), got no such field"
            )
        },
    ),
    "a Responses output item of a type OpenAI does not define": (
        RewriteJsonResponse(("output", 0, "type"), "output_message", path=RESPONSES),
        {"wire.responses_shape": "failed"},
        {f"wire.responses_shape[{RESPONSES} plain]": '$.output[0].type: expected one of "message", "function_call"'},
    ),
    "continuous usage dropped from a middle chunk": (
        RewriteStream(edit="drop_mid_stream_usage", path=COMPLETIONS),
        {"wire.stream_continuous_usage": {"failed": 1, "passed": 1}},
        {
            f"wire.stream_continuous_usage[{COMPLETIONS} {CONTINUOUS}]": (
                "event 2 $.usage: a chunk without usage under continuous_usage_stats"
            )
        },
    ),
}


@pytest.mark.parametrize(
    "fault", [pytest.param(fault, marks=pytest.mark.pins(failed=FAULTS[fault][1]), id=fault) for fault in FAULTS]
)
def test_a_broken_body_or_stream_fails_exactly_its_wire_contract(pytester, plain_server, fault):
    rule, changed, messages = FAULTS[fault]
    with FaultProxy(plain_server.url, rules=[rule]) as proxy:
        run_suites(pytester, "-m", "wire", url=proxy.url, profile=PLAIN_PROFILE)
    assert proxy.hits[0] > 0, "the fault never happened"
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {**WIRE_PLAIN, **changed})
    failed = failed_checks(junit)
    for test, words in messages.items():
        assert words in failed[test], failed[test]
        assert "POST /v1/" in failed[test]  # the endpoint and the request, as sent


UNKNOWN_EVENT = (
    '$.type: "response.vendor_progress" is an event type OpenAI\'s stream does not define: clients that dispatch on '
    "type skip it or stop on it"
)


# A second proof of contracts CI proves failing elsewhere (make test-extended): 17 s of CI.
@pytest.mark.extended_proof
@pytest.mark.pins(failed=STRICT_VERDICTS)
def test_an_unknown_responses_event_is_reported_and_fails_under_strict(pytester, plain_server):
    """A Responses stream gains an event of a type OpenAI's union does not have: it cannot be judged by any branch,
    so it is reported, not passed in silence; under wire.strict_openai it fails. The stream's framing still holds."""
    rule = RewriteStream(edit="unknown_event", path=RESPONSES)
    stream_shape = f"wire.responses_stream_shape[{RESPONSES} stream]"
    with FaultProxy(plain_server.url, rules=[rule]) as proxy:
        run_suites(pytester, "-m", "wire", url=proxy.url, profile=PLAIN_PROFILE)
        junit = pytester.path / "junit.xml"
        assert_verdicts(junit, WIRE_PLAIN)
        reported = {run.key: run.properties.get("vllm_wire_report", "") for run in contract_runs(junit)}
        assert f"event 3 {UNKNOWN_EVENT}" in reported[stream_shape], reported[stream_shape]
        run_suites(pytester, "-m", "wire", url=proxy.url, profile=STRICT_PROFILE)
    assert proxy.hits[0] > 0, "the fault never happened"
    assert_verdicts(junit, STRICT_VERDICTS)
    failed = failed_checks(junit)[stream_shape]
    assert f"event 3 {UNKNOWN_EVENT} [wire.strict_openai is true (profile plain)]" in failed, failed


@pytest.mark.pins(failed={"wire.completion_shape"})
def test_through_an_ingress_a_broken_body_is_put_on_the_ingress_and_an_unserved_route_is_not_exposed(
    pytester, plain_server
):
    """The fault proxy plays a gateway in front of the plain server: one rule breaks the completions body, one
    answers GET /v1/models with its own 404. The same requests straight to the server are conformant, so the
    completion failures say the ingress introduced them, and /v1/models, which the profile declares hidden, is
    reported, not failed."""
    broken = RewriteJsonResponse(("choices", 0, "text"), None, path=COMPLETIONS)
    unserved = Respond(404, {"detail": "Not Found"}, path="/v1/models", methods=("GET",))
    with FaultProxy(plain_server.url, rules=[broken, unserved]) as gateway:
        report = pytester.path / "report.yaml"
        run_suites(
            pytester,
            "-m",
            "wire",
            f"--vllm-ingress-url={gateway.url}",
            f"--vllm-report={report}",
            url=plain_server.url,
            profile=hiding(PLAIN_PROFILE, "GET /v1/models"),
        )
    assert gateway.hits[0] > 0 and gateway.hits[1] > 0, "the faults never happened"
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {**WIRE_PLAIN, "wire.completion_shape": {"failed": 2}})
    for case in ("plain", "logprobs"):
        failed = failed_checks(junit)[f"wire.completion_shape[{COMPLETIONS} {case}]"]
        assert "introduced by the ingress: the same request straight to vLLM is conformant" in failed, failed
        assert "$.choices[0].text: expected string, got null" in failed
    models = next(run for run in contract_runs(junit) if run.contract == "wire.models_shape")
    assert models.properties.get("vllm_ingress_exposure") == "not exposed"
    markdown = report.with_suffix(".md").read_text()
    assert "GET /v1/models: not exposed by the ingress (it answered 404; the server behind it serves it)" in markdown
    # What the proxy passes on unchanged is not a change; what it broke is not a departure either (a failure).
    changes = {run.key: run.properties.get("vllm_wire_ingress_changes") for run in contract_runs(junit)}
    assert not any(changes.values()), changes


@pytest.mark.pins(failed={"wire.chat_shape"})
def test_through_an_ingress_a_route_it_hides_undeclared_fails_its_checks_and_a_declared_one_is_not_exposed(
    pytester, plain_server
):
    """A gateway that serves completions but answers its own 404 on chat (and on GET /v1/models): chat is not
    declared hidden, so every chat check fails naming the route and the declaration; /v1/models is declared
    hidden, so it is reported "not exposed"; completions, exposed, are judged and pass."""
    hidden = Respond(404, {"detail": "Not Found"}, path=f"{CHAT}|/v1/models")
    with FaultProxy(plain_server.url, rules=[hidden]) as gateway:
        run_suites(
            pytester,
            "-m",
            "wire",
            "-k",
            "test_models_shape or test_completion_shape or test_chat_shape",
            f"--vllm-ingress-url={gateway.url}",
            url=plain_server.url,
            profile=hiding(PLAIN_PROFILE, "GET /v1/models"),
        )
    assert gateway.hits[0] > 0, "the fault never happened"
    junit = pytester.path / "junit.xml"
    chat = {f"wire.chat_shape[{CHAT} {case}]" for case in ("plain", "logprobs")}
    assert_verdicts(
        junit,
        {"wire.models_shape": "passed", "wire.completion_shape": {"passed": 2}, "wire.chat_shape": "passed"},
        failed=chat,
    )
    for key in chat:
        message = failed_checks(junit)[key]
        assert f"the ingress does not expose POST {CHAT} (it answered 404" in message, message
        assert f'add "POST {CHAT}" to ingress.hidden_routes' in message, message
    exposure = {run.key: run.properties.get("vllm_ingress_exposure") for run in contract_runs(junit)}
    assert exposure["wire.models_shape"] == "not exposed"
    assert exposure[f"wire.completion_shape[{COMPLETIONS} plain]"] is None
