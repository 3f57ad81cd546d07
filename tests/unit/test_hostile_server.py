"""The hostile server really misbehaves, byte for byte, and stops when clients leave.

Every test is bounded: responses are read a little and dropped, sockets carry short
timeouts, and nothing ever inflates the gzip bomb or downloads the 300 MB body.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from fixtures.hostile_server import DEFAULT_HUGE_BYTES, HostileServer
from tests.support.waiting import wait_until
from tests.unit.own_process import listening

# Tight client limits: a test that waits longer than this has found a bug.
TIMEOUT = httpx.Timeout(2.0)


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with HostileServer() as server:
        yield server
    # Responses that crashed (rather than saw their client leave) are bugs in the server.
    assert server.errors == []


def assert_released(server: HostileServer) -> None:
    """The server stopped serving once the client left (no orphaned writer)."""
    assert wait_until(lambda: server.active_connections == 0), (
        f"{server.active_connections} connection(s) still served after the client left"
    )


def raw_connection(server: HostileServer, request: bytes, timeout: float = 2.0) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=timeout)
    sock.sendall(request)
    return sock


def get_request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode()


def read_until_closed(sock: socket.socket, limit: int = 1 << 20) -> bytes:
    data = b""
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_huge_declares_its_length_and_is_read_only_in_part(hostile: HostileServer) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("GET", hostile.url + "/huge") as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(DEFAULT_HUGE_BYTES)
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if len(received) >= 1_000_000:
                    break
    assert received.startswith(b'{"data":"aaaa')
    assert_released(hostile)


@pytest.mark.parametrize("size", [0, 5, 11, 1000, 200_000])
def test_huge_sends_exactly_the_requested_bytes(hostile: HostileServer, size: int) -> None:
    response = httpx.get(hostile.url + f"/huge?bytes={size}", timeout=TIMEOUT)
    assert response.headers["content-length"] == str(size)
    assert len(response.content) == size
    if size >= 11:  # room for {"data":""}: then it is real JSON
        assert json.loads(response.content)["data"] == "a" * (size - 11)


def test_endless_is_chunked_and_stops_when_the_client_leaves(hostile: HostileServer) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("GET", hostile.url + "/endless") as response:
            assert response.headers["transfer-encoding"] == "chunked"
            assert "content-length" not in response.headers
            received = 0
            for chunk in response.iter_bytes():
                received += len(chunk)
                if received >= 2_000_000:
                    break
    assert received >= 2_000_000
    assert_released(hostile)


def test_trickle_defeats_a_per_read_timeout(hostile: HostileServer) -> None:
    # Each byte arrives well within the read timeout, so only an overall deadline can
    # stop such a response: that is what the plugin's client has to enforce.
    timeout = httpx.Timeout(0.5)
    started = time.monotonic()
    with httpx.Client(timeout=timeout) as client:
        with client.stream("GET", hostile.url + "/trickle?interval=0.05") as response:
            assert response.status_code == 200
            received = b""
            for chunk in response.iter_raw():
                received += chunk
                if time.monotonic() - started > 0.8:
                    break
    assert time.monotonic() - started > 0.8  # longer than the read timeout, no error
    assert received.startswith(b'{"data":"')
    assert 5 <= len(received) <= 30  # about one byte per interval, not a burst
    assert_released(hostile)


def test_slow_headers_arrive_one_byte_at_a_time(hostile: HostileServer) -> None:
    sock = raw_connection(hostile, get_request("/slow-headers?interval=0.05"))
    with sock:
        time.sleep(0.22)
        sock.settimeout(0.5)
        early = sock.recv(4096)
    # About 0.22 / 0.05 bytes so far: the start of the status line, nothing more.
    assert 2 <= len(early) <= 10
    assert b"HTTP/1.1 200 OK\r\n".startswith(early)
    assert_released(hostile)


def test_slow_headers_end_in_a_complete_response(hostile: HostileServer) -> None:
    response = httpx.get(hostile.url + "/slow-headers?interval=0.001", timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.json() == {"ok": True}


def test_hang_never_answers_and_is_released_on_close(hostile: HostileServer) -> None:
    sock = raw_connection(hostile, get_request("/hang"))
    with sock:
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(1)
        assert hostile.active_connections >= 1
    assert_released(hostile)


def test_hang_reads_a_request_body_without_answering(hostile: HostileServer) -> None:
    body = b'{"prompt":"x"}'
    request = b"POST /hang HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(hostile.url + "/hang", content=body, timeout=httpx.Timeout(0.3))
    sock = raw_connection(hostile, request)
    with sock:
        sock.settimeout(0.2)
        with pytest.raises(socket.timeout):
            sock.recv(1)
    assert_released(hostile)


def test_reset_sends_rst_not_fin(hostile: HostileServer) -> None:
    sock = raw_connection(hostile, get_request("/reset"))
    with sock, pytest.raises(ConnectionResetError):
        sock.recv(1)  # a FIN would return b"" instead
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        httpx.get(hostile.url + "/reset", timeout=TIMEOUT)


@pytest.mark.parametrize("kind", ["truncated", "garbage"])
def test_invalid_json_claims_json(hostile: HostileServer, kind: str) -> None:
    response = httpx.get(hostile.url + f"/invalid-json?kind={kind}", timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    with pytest.raises(ValueError):
        json.loads(response.content)


def test_gzip_bomb_is_small_on_the_wire_and_huge_inflated(hostile: HostileServer) -> None:
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("GET", hostile.url + "/gzip-bomb") as response:
            assert response.headers["content-encoding"] == "gzip"
            wire = b"".join(response.iter_raw())  # compressed bytes only: about 1 MB
    assert len(wire) == int(response.headers["content-length"])
    assert len(wire) < 4 * 1024 * 1024
    # The gzip trailer states the inflated size; check it rather than inflating a GiB.
    assert struct.unpack("<I", wire[-4:])[0] == (1 << 30) & 0xFFFFFFFF
    head = zlib.decompressobj(31).decompress(wire, 10 * 1024 * 1024)
    assert len(head) == 10 * 1024 * 1024
    assert head.strip() == b""


def test_gzip_bomb_is_a_valid_gzip_stream(hostile: HostileServer) -> None:
    # A small bomb, inflated fully: same construction, so header, blocks and CRC are right.
    response = httpx.get(hostile.url + "/gzip-bomb?mib=3", timeout=TIMEOUT)
    assert response.headers["content-encoding"] == "gzip"
    assert response.content == b" " * (3 * 1024 * 1024)  # httpx inflated it
    with httpx.Client(timeout=TIMEOUT) as client:
        with client.stream("GET", hostile.url + "/gzip-bomb?mib=2") as raw:
            wire = b"".join(raw.iter_raw())
    assert gzip.decompress(wire) == b" " * (2 * 1024 * 1024)


@pytest.mark.parametrize("status", [200, 400, 401, 404, 418, 500, 503])
def test_status_answers_the_requested_status(hostile: HostileServer, status: int) -> None:
    response = httpx.get(hostile.url + f"/status/{status}", timeout=TIMEOUT)
    assert response.status_code == status
    assert response.json()["error"]["code"] == status


def test_status_without_body_and_out_of_range(hostile: HostileServer) -> None:
    no_content = httpx.get(hostile.url + "/status/204", timeout=TIMEOUT)
    assert no_content.status_code == 204
    assert no_content.content == b""
    assert httpx.get(hostile.url + "/status/999", timeout=TIMEOUT).status_code == 404
    assert httpx.get(hostile.url + "/status/abc", timeout=TIMEOUT).status_code == 404


def test_unknown_path_is_a_fastapi_style_404(hostile: HostileServer) -> None:
    response = httpx.post(hostile.url + "/v1/models", json={}, timeout=TIMEOUT)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


def test_malformed_and_oversized_requests_get_an_answer(hostile: HostileServer) -> None:
    with raw_connection(hostile, b"NONSENSE\r\n\r\n") as sock:
        assert read_until_closed(sock).startswith(b"HTTP/1.1 400 ")
    oversized = b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    with raw_connection(hostile, oversized) as sock:
        assert read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    assert_released(hostile)


def test_client_that_leaves_mid_request_is_released(hostile: HostileServer) -> None:
    with raw_connection(hostile, b"GET /huge HTTP/1.1\r\nHo"):
        pass
    assert_released(hostile)


def test_thread_mode_stops_promptly_with_open_connections() -> None:
    server = HostileServer()
    with server:
        endless = raw_connection(server, get_request("/endless"))
        hanging = raw_connection(server, get_request("/hang"))
        assert endless.recv(16).startswith(b"HTTP/1.1 200")
        assert wait_until(lambda: server.active_connections == 2)
        started = time.monotonic()
    try:
        assert time.monotonic() - started < 2.0
        assert server.active_connections == 0
        with pytest.raises(OSError):
            socket.create_connection((server.host, server.port), timeout=1).close()
    finally:
        endless.close()
        hanging.close()
    assert server.errors == []


def test_subprocess_mode_prints_its_port_first() -> None:
    with listening("fixtures.hostile_server", "--port", "0") as started:
        response = httpx.get(f"http://127.0.0.1:{started.port}/status/503", timeout=TIMEOUT)
        assert response.status_code == 503
    assert started.process.returncode == 0, started.stderr  # SIGTERM is a clean stop, not a crash
