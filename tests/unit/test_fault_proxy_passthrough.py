"""The fault proxy passes everything through faithfully, lets go when either side leaves, and leaks no secret.

The upstream is tests/unit/echo_upstream.py: an echo app in vLLM's error shapes, never vLLM.
"""

from __future__ import annotations

import gzip
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from fixtures.fault_proxy import FaultProxy, InjectAuth, Stretch, StripJsonField
from fixtures.hostile_server import HostileServer
from tests.support.waiting import wait_until
from tests.unit.echo_upstream import (
    SECRET,
    TIMEOUT,
    Upstream,
    header_values,
    raw_exchange,
    serving,
)
from tests.unit.own_process import listening


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with serving("main") as server:
        yield server


@pytest.fixture(scope="module")
def plain_proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream.url) as proxy:
        yield proxy


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


def test_subprocess_mode_prints_its_port_first(upstream: Upstream) -> None:
    spec = {"rule": "Respond", "status": 418, "body_json": {"teapot": True}, "path": "/tea"}
    with listening("fixtures.fault_proxy", "--upstream", upstream.url, "--rule", json.dumps(spec)) as started:
        base = f"http://127.0.0.1:{started.port}"
        # The port is bound before it is printed, but uvicorn serves a moment later.
        assert wait_until(lambda: _answers(base), timeout=10)
        assert httpx.get(base + "/tea", timeout=TIMEOUT).status_code == 418
        assert httpx.get(base + "/v1/models", timeout=TIMEOUT).status_code == 200
    # uvicorn shuts down cleanly, then re-raises the SIGTERM it caught, by design.
    assert started.process.returncode in (0, -signal.SIGTERM)


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


def test_a_stretched_stream_arrives_factor_times_as_slowly_and_whole(upstream: Upstream) -> None:
    """The upstream holds its second event back about 0.3 s; stretched by 2, it leaves about 0.6 s in."""
    upstream.release_stream.clear()
    timer = threading.Timer(0.3, upstream.release_stream.set)
    with (
        FaultProxy(upstream.url, rules=[Stretch(factor=2.0, path="/sse")]) as proxy,
        httpx.Client(timeout=TIMEOUT) as client,
    ):
        started = time.monotonic()
        timer.start()
        with client.stream("POST", proxy.url + "/sse", json={"stream": True}) as response:
            lines = [line for line in response.iter_lines() if line]
        took = time.monotonic() - started
        assert proxy.hits[0] == 1
    assert lines == ['data: {"n":0}', 'data: {"n":1}', "data: [DONE]"]
    assert 0.5 <= took < 2.0, took
