"""Progress is a data event carrying generated tokens: a keep-alive comment, an error event or an empty chunk
in front of a hung engine is not, however soon it comes."""

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from fixtures.fault_proxy import UvicornThread
from pytest_vllm_conformance.connection.client import BoundedClient
from suites.serving.loadgen import Workload
from suites.serving.rounds import progress_while_healthy

STREAMS = {
    "keep-alive then a hung engine": [b": ping\n\n", None],
    "an error event": [b'data: {"error": {"message": "engine dead", "code": 500}}\n\n', b"data: [DONE]\n\n"],
    "an empty chunk then a hung engine": [b'data: {"choices": [{"text": "", "token_ids": []}]}\n\n', None],
    "a token": [b'data: {"choices": [{"text": "a", "token_ids": [5]}]}\n\n', None],
}
WORKLOAD = Workload("/v1/completions", "m", ((1, 2),), 16, 1, 1, {"stream": True})


def _app(events: list[bytes | None]) -> Starlette:
    async def completions(request):
        async def body():
            for event in events:
                if event is None:
                    await asyncio.sleep(30)  # the engine hangs: nothing more comes
                else:
                    yield event

        return StreamingResponse(body(), media_type="text/event-stream")

    async def health(request):
        return PlainTextResponse("")

    return Starlette(routes=[Route("/health", health), Route("/v1/completions", completions, methods=["POST"])])


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_only_generated_tokens_are_progress(stream):
    with UvicornThread(_app(STREAMS[stream])) as running, BoundedClient(running.url, timeout=5.0) as client:
        seen = progress_while_healthy(client, "/health", WORKLOAD, within=1.0)
    assert seen.health_status == 200
    if stream == "a token":
        assert seen.first_token_seconds is not None and seen.first_token_seconds < 1.0
        return
    assert seen.first_token_seconds is None, seen
    if stream == "an error event":
        assert "an error event" in seen.detail and "engine dead" in seen.detail, seen.detail
    else:
        assert "no complete answer within 1 s" in seen.detail, seen.detail
        assert f"what arrived meanwhile: {STREAMS[stream][0]!r}" in seen.detail, seen.detail
