"""The fault proxy passes everything through faithfully, and each rule breaks one thing.

The upstream here is a small Starlette app that echoes what it received (never vLLM),
answering in the error shapes vLLM uses, so every rule can be checked without a model.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fixtures.fault_proxy import (
    DEFAULT_LEAK_TEXT,
    AmplifyErrors,
    FaultProxy,
    InjectAuth,
    LeakInternals,
    Respond,
    RewriteJsonResponse,
    RouteTo,
    SetJsonField,
    StripJsonField,
    UvicornThread,
    rule_from_dict,
)
from fixtures.hostile_server import HostileServer

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = httpx.Timeout(5.0)
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
SECRET = "sk-never-print-me"


class Upstream:
    """A Starlette app standing in for vLLM, plus what it has seen."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.url = ""  # known once it is served
        self.requests = 0
        # Set by a test to let the SSE stream continue: proves chunks are not buffered.
        self.release_stream = threading.Event()
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.models),
                Route("/errors/validation", self.validation_error, methods=ALL_METHODS),
                Route("/errors/unauthorized", self.unauthorized),
                Route("/errors/internal", self.internal_error),
                Route("/errors/plain-text", self.plain_text_error),
                Route("/sse", self.sse, methods=["POST"]),
                Route("/gzipped", self.gzipped),
                Route("/{rest:path}", self.echo, methods=ALL_METHODS),
            ]
        )

    async def echo(self, request: Request) -> Response:
        self.requests += 1
        body = await request.body()
        status = int(request.query_params.get("status", "200"))
        payload = {
            "server": self.name,
            "method": request.method,
            "raw_path": request.scope["raw_path"].decode(),
            "query": request.scope["query_string"].decode(),
            "headers": [[k.decode(), v.decode()] for k, v in request.scope["headers"]],
            "body": body.decode("latin-1"),
        }
        response = JSONResponse(payload, status_code=status, headers={"x-upstream": self.name})
        response.raw_headers.append((b"set-cookie", b"a=1"))
        response.raw_headers.append((b"set-cookie", b"b=2"))
        return response

    async def models(self, request: Request) -> Response:
        self.requests += 1
        data = [{"id": "tiny-a", "max_model_len": 512}, {"id": "tiny-b", "max_model_len": 1024}]
        return JSONResponse({"object": "list", "data": data})

    async def validation_error(self, request: Request) -> Response:
        self.requests += 1
        error = {
            "message": "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'stop')}",
            "type": "Bad Request",
            "param": "body.stop",
            "code": 400,
        }
        return JSONResponse({"error": error}, status_code=400)

    async def unauthorized(self, request: Request) -> Response:
        return JSONResponse({"error": "Unauthorized"}, status_code=401)

    async def internal_error(self, request: Request) -> Response:
        error = {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}
        return JSONResponse({"error": error}, status_code=500)

    async def plain_text_error(self, request: Request) -> Response:
        return Response("plain failure", status_code=400, media_type="text/plain")

    async def sse(self, request: Request) -> Response:
        async def events() -> AsyncIterator[str]:
            yield 'data: {"n":0}\n\n'
            deadline = time.monotonic() + 3
            while not self.release_stream.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            yield 'data: {"n":1}\n\n'
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def gzipped(self, request: Request) -> Response:
        return Response(
            gzip.compress(b'{"zipped":true}', mtime=0),
            media_type="application/json",
            headers={"content-encoding": "gzip"},
        )


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream("main")
    with UvicornThread(server.app) as running:
        server.url = running.url
        yield server


@pytest.fixture(scope="module")
def other_upstream() -> Iterator[Upstream]:
    server = Upstream("other")
    with UvicornThread(server.app) as running:
        server.url = running.url
        yield server


@pytest.fixture(scope="module")
def plain_proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream.url) as proxy:
        yield proxy


def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def header_values(echoed: dict, name: str) -> list[str]:
    return [value for key, value in echoed["headers"] if key == name]


def raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


# -- pass-through fidelity ------------------------------------------------------------


def test_passthrough_preserves_request_and_response(upstream: Upstream, plain_proxy: FaultProxy) -> None:
    body = b'{"prompt": "hello",  "max_tokens": 3}'  # odd spacing must survive
    response = httpx.post(
        plain_proxy.url + "/v1/a%2Fb?x=1&y=%20z&x=2&status=201",
        content=body,
        headers={
            "content-type": "application/json",
            "x-custom": "kept",
            "authorization": "Bearer client-key",
            "connection": "keep-alive, x-hop",
            "x-hop": "named in Connection, so hop-by-hop",
            "keep-alive": "timeout=5",
        },
        timeout=TIMEOUT,
    )
    assert response.status_code == 201
    assert response.headers["x-upstream"] == "main"
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    echoed = response.json()
    assert echoed["method"] == "POST"
    assert echoed["raw_path"] == "/v1/a%2Fb"
    assert echoed["query"] == "x=1&y=%20z&x=2&status=201"
    assert echoed["body"] == body.decode()
    assert header_values(echoed, "x-custom") == ["kept"]
    assert header_values(echoed, "authorization") == ["Bearer client-key"]
    assert header_values(echoed, "content-length") == [str(len(body))]
    assert header_values(echoed, "x-hop") == []
    assert header_values(echoed, "keep-alive") == []


def test_passthrough_keeps_the_raw_target_and_invents_no_headers(
    plain_proxy: FaultProxy,
) -> None:
    # A raw request: no User-Agent/Accept for httpx to "helpfully" add on the way, and a
    # path httpx would normalise.
    raw = raw_exchange(plain_proxy.port, b"GET //v1/../models?q=%zz HTTP/1.1\r\nHost: test\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    echoed = json.loads(body)
    assert echoed["raw_path"] == "//v1/../models"
    assert echoed["query"] == "q=%zz"
    sent = {key for key, _ in echoed["headers"]}
    assert sent <= {"host", "connection"}, sent


def test_passthrough_leaves_error_bodies_byte_identical(upstream: Upstream, plain_proxy: FaultProxy) -> None:
    for path in ("/errors/validation", "/errors/unauthorized", "/errors/internal"):
        direct = httpx.get(upstream.url + path, timeout=TIMEOUT)
        proxied = httpx.get(plain_proxy.url + path, timeout=TIMEOUT)
        assert (proxied.status_code, proxied.content) == (direct.status_code, direct.content)
        assert proxied.headers["content-length"] == direct.headers["content-length"]


def test_passthrough_keeps_compressed_bodies_compressed(plain_proxy: FaultProxy) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("GET", plain_proxy.url + "/gzipped") as response:
            assert response.headers["content-encoding"] == "gzip"
            wire = b"".join(response.iter_raw())
    assert gzip.decompress(wire) == b'{"zipped":true}'


def test_passthrough_streams_a_chunked_request_body(plain_proxy: FaultProxy) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"part": '
        yield b'"one"}'

    response = httpx.post(plain_proxy.url + "/echo", content=body(), timeout=TIMEOUT)
    assert response.json()["body"] == '{"part": "one"}'


def test_passthrough_streams_sse_without_buffering(upstream: Upstream, plain_proxy: FaultProxy) -> None:
    upstream.release_stream.clear()
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("POST", plain_proxy.url + "/sse", json={"stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            # The upstream holds the rest back until released (or 3 s pass): a proxy
            # that buffers would deliver the first event only after that.
            started = time.monotonic()
            assert next(lines) == 'data: {"n":0}'
            assert time.monotonic() - started < 1.0
            upstream.release_stream.set()
            rest = [line for line in lines if line]
    assert rest == ['data: {"n":1}', "data: [DONE]"]


def test_client_leaving_releases_the_upstream_connection() -> None:
    with HostileServer() as hostile, FaultProxy(hostile.url) as proxy:
        with httpx.Client(timeout=TIMEOUT) as client:
            with client.stream("GET", proxy.url + "/endless") as response:
                for received, _ in enumerate(response.iter_raw()):
                    if received > 20:
                        break
        assert wait_until(lambda: hostile.active_connections == 0)
        # Also before any answer: a hanging upstream is dropped when the client leaves.
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(proxy.url + "/hang", timeout=httpx.Timeout(0.3))
        assert wait_until(lambda: hostile.active_connections == 0)


def test_upstream_failure_is_a_502_that_names_no_secret() -> None:
    with HostileServer() as hostile, FaultProxy(hostile.url) as proxy:
        response = httpx.post(
            proxy.url + "/reset",
            headers={"authorization": f"Bearer {SECRET}"},
            content=SECRET,
            timeout=TIMEOUT,
        )
    assert response.status_code == 502
    assert response.headers["x-fault-proxy-error"] == "1"
    assert SECRET not in response.text


def test_stopping_with_open_streams_is_prompt() -> None:
    with HostileServer() as hostile:
        proxy = FaultProxy(hostile.url)
        with proxy:
            endless = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            endless.sendall(b"GET /endless HTTP/1.1\r\nHost: test\r\n\r\n")
            assert endless.recv(12) == b"HTTP/1.1 200"
            hanging = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            hanging.sendall(b"GET /hang HTTP/1.1\r\nHost: test\r\n\r\n")
            assert wait_until(lambda: hostile.active_connections == 2)
            started = time.monotonic()
        assert time.monotonic() - started < 2.0
        endless.close()
        hanging.close()
        assert wait_until(lambda: hostile.active_connections == 0)


# -- rules ----------------------------------------------------------------------------


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


def test_route_to_sends_matching_requests_elsewhere(upstream: Upstream, other_upstream: Upstream) -> None:
    rule = RouteTo(other_upstream.url, path=r"/v1/completions/render")
    with FaultProxy(upstream.url, rules=[rule]) as proxy:
        routed = httpx.post(proxy.url + "/v1/completions/render?x=1", json={}, timeout=TIMEOUT)
        kept = httpx.post(proxy.url + "/v1/completions", json={}, timeout=TIMEOUT)
    assert routed.json()["server"] == "other"
    assert routed.json()["raw_path"] == "/v1/completions/render"
    assert routed.json()["query"] == "x=1"
    assert kept.json()["server"] == "main"


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


def test_subprocess_mode_prints_its_port_first(upstream: Upstream) -> None:
    spec = {"rule": "Respond", "status": 418, "body_json": {"teapot": True}, "path": "/tea"}
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fixtures.fault_proxy",
            "--upstream",
            upstream.url,
            "--rule",
            json.dumps(spec),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            word, port = process.stdout.readline().split()
            assert word == "LISTENING"
            base = f"http://127.0.0.1:{port}"
            # The port is bound before it is printed, but uvicorn serves a moment later.
            assert wait_until(lambda: _answers(base), timeout=10)
            assert httpx.get(base + "/tea", timeout=TIMEOUT).status_code == 418
            assert httpx.get(base + "/v1/models", timeout=TIMEOUT).status_code == 200
        finally:
            process.terminate()
            try:
                process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate(timeout=5)
    # uvicorn shuts down cleanly, then re-raises the SIGTERM it caught, by design.
    assert process.returncode in (0, -signal.SIGTERM)


def _answers(base: str) -> bool:
    try:
        httpx.get(base + "/tea", timeout=1)
    except httpx.TransportError:
        return False
    return True


def test_nothing_secret_reaches_logs_or_output(
    upstream: Upstream, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    body = json.dumps({"prompt": SECRET, "watermarking": True})
    rules = [InjectAuth(f"Bearer {SECRET}x", path="/v1/models"), StripJsonField("watermarking")]
    with HostileServer() as hostile, FaultProxy(upstream.url, rules=rules) as proxy:
        headers = {"authorization": f"Bearer {SECRET}"}
        httpx.post(proxy.url + "/v1/completions", content=body, headers=headers, timeout=TIMEOUT)
        httpx.get(proxy.url + "/v1/models", headers=headers, timeout=TIMEOUT)
        with FaultProxy(hostile.url) as failing:
            httpx.post(failing.url + "/reset", content=body, headers=headers, timeout=TIMEOUT)
    captured = capfd.readouterr()
    assert SECRET not in caplog.text
    assert SECRET not in captured.out + captured.err
