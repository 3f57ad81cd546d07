"""The bounded client against a server that misbehaves on purpose.

Real vLLM cannot produce these answers (that is the point), so a hostile
fixture server stands in. Bounds here are functional: the body is cut at the
cap and the deadline ends the exchange. Memory and speed figures live in
bench/client_amplification.py.
"""

import time

import pytest

from fixtures.hostile_server import HostileServer
from pytest_vllm_conformance.connection.client import (
    AsyncBoundedClient,
    BoundedClient,
    NotJSON,
    RequestTimeout,
    TransportFailure,
)
from pytest_vllm_conformance.connection.secrets import Secret
from tests.unit.echo_upstream import serving

CAP = 64 * 1024


@pytest.fixture(scope="module")
def hostile():
    with HostileServer() as server:
        yield server


@pytest.fixture
def client(hostile):
    with BoundedClient(hostile.url, timeout=2.0, max_body=CAP) as client:
        yield client


def test_huge_body_is_cut_at_the_cap(client):
    response = client.get("/huge?bytes=300000000")
    assert response.status == 200
    assert response.truncated
    assert len(response.body) == CAP
    assert response.size_text == f"truncated at {CAP:,} bytes"
    with pytest.raises(NotJSON, match="truncated"):
        response.json()


def test_endless_body_is_cut_at_the_cap(client):
    response = client.get("/endless")
    assert response.truncated and len(response.body) == CAP


def test_trickle_ends_at_the_deadline(client):
    started = time.monotonic()
    with pytest.raises(RequestTimeout, match=r"GET /trickle\?interval=0.2: no complete answer within 2 s"):
        client.get("/trickle?interval=0.2")
    assert time.monotonic() - started < 2 + 2


def test_headers_trickled_byte_by_byte_end_at_the_deadline(client):
    started = time.monotonic()
    with pytest.raises(RequestTimeout):
        client.get("/slow-headers")
    assert time.monotonic() - started < 2 + 2


def test_a_server_that_never_answers_ends_at_the_deadline(client):
    with pytest.raises(RequestTimeout, match="GET /hang"):
        client.get("/hang")


def test_connection_reset_is_retried_once_and_says_so(client):
    with pytest.raises(TransportFailure, match=r"GET /reset: .*after one retry"):
        client.get("/reset")


def test_invalid_json_is_a_clear_assertion(client):
    response = client.get("/invalid-json")
    assert response.status == 200
    with pytest.raises(NotJSON, match="body is not JSON"):
        response.json()
    assert response.json_or_none() is None


def test_statuses_are_returned_never_retried(client):
    response = client.get("/status/503")
    assert response.status == 503
    assert response.retried is None


def test_compressed_bomb_is_cut_at_the_cap(hostile):
    # The server builds the bomb on first use (a CRC over a GiB: seconds); the cap is tested, not the clock.
    with BoundedClient(hostile.url, timeout=60.0, max_body=CAP) as client:
        response = client.get("/gzip-bomb")
    assert len(response.body) <= CAP


def test_repr_and_messages_hold_no_secret(hostile):
    key = Secret("sk-client-secret-77")
    with BoundedClient(hostile.url, api_key=key, timeout=2.0) as client:
        response = client.get("/status/401")
        assert "sk-client-secret-77" not in repr(client)
        assert "sk-client-secret-77" not in response.describe()


@pytest.mark.asyncio
async def test_async_client_shares_the_bounds(hostile):
    client = AsyncBoundedClient(hostile.url, timeout=2.0, max_body=CAP)
    try:
        response = await client.get("/huge?bytes=10000000")
        assert response.truncated and len(response.body) == CAP
        with pytest.raises(RequestTimeout):
            await client.get("/hang")
    finally:
        await client.aclose()


@pytest.mark.asyncio
async def test_sync_client_works_inside_a_running_event_loop(hostile):
    # An async test may use the sync fixture: its loop already runs in this thread.
    with BoundedClient(hostile.url, timeout=2.0, max_body=CAP) as client:
        assert client.get("/status/204").status == 204
        with pytest.raises(RequestTimeout):
            client.get("/hang")
        assert client.get("/status/418").status == 418


def test_sync_client_serves_several_threads(hostile):
    from concurrent.futures import ThreadPoolExecutor

    with BoundedClient(hostile.url, timeout=2.0, max_body=CAP) as client, ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda status: client.get(f"/status/{status}").status, range(200, 216)))
    assert statuses == list(range(200, 216))


def test_enough_stops_reading_and_marks_the_body_cut(client):
    """A reader that has what it needs hangs up (the server sees the caller gone); the body is never taken as whole."""
    response = client.get("/endless", enough=lambda body: len(body) >= 1000)
    assert response.truncated and 1000 <= len(response.body) < CAP
    with pytest.raises(NotJSON, match="truncated"):
        response.json()


def test_a_target_goes_on_the_request_line_as_written_outside_the_base_urls_path():
    with serving("main") as upstream, BoundedClient(upstream.url + "/v/", timeout=5.0) as client:
        assert (client.root_path, client.host) == ("/v", upstream.url.split("//", 1)[1])
        under = client.get("/v1/chat/x").json()
        raw = client.get("/v1/./chat", target="//v1/./chat").json()
    assert under["raw_path"] == "/v/v1/chat/x"
    assert raw["raw_path"] == "//v1/./chat"
