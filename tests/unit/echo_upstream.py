"""An upstream standing in for vLLM in the fault proxy's tests, and the helpers those tests share.

The upstream is a small Starlette app that echoes what it received (never vLLM),
answering in the error shapes vLLM uses, so every rule can be checked without a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fixtures.fault_proxy import UvicornThread

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


@contextlib.contextmanager
def serving(name: str) -> Iterator[Upstream]:
    """An upstream served on a thread for the life of the block (a module fixture in each test file)."""
    server = Upstream(name)
    with UvicornThread(server.app) as running:
        server.url = running.url
        yield server


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
