"""The one HTTP client every suite uses: bounded in bytes and in time.

A server under test may be broken or hostile (vLLM 0.29 answered a 4 KB
request with a 91 MB error body), so no response is ever buffered whole: the
body is read as a stream up to a byte cap and the rest is dropped and
recorded. Each exchange runs under one hard deadline covering connect,
headers and body, so a server that trickles a byte a second cannot stall a
run. HTTP statuses are never retried (they are what the suites observe); a
transport error is retried once, and the response says so.

``AsyncBoundedClient`` is the implementation. ``BoundedClient`` is its
synchronous face: it runs the async client on a private event loop, so both
share one code path and one deadline mechanism.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from pytest_vllm_conformance.connection import traffic
from pytest_vllm_conformance.connection.response import (  # re-exported: what a client answers with
    SUMMARY_CHARS,
    NotJSON,
    Response,
    display_url,
    summarize,
)
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.transport import DIRECT, Connection, tls_context

__all__ = [
    "SUMMARY_CHARS",
    "AsyncBoundedClient",
    "BoundedClient",
    "NotJSON",
    "OpenStream",
    "RequestTimeout",
    "Response",
    "TransportFailure",
    "display_url",
    "summarize",
]

T = TypeVar("T")


def url_root_path(url: str) -> str:
    """The path a base URL carries, without its trailing slash: ``http://h:8000/v/`` -> ``/v``; none -> ``""``."""
    return urlsplit(url).path.rstrip("/")


class TransportFailure(Exception):
    """The exchange did not produce an HTTP response."""


class RequestTimeout(TransportFailure):
    """The exchange did not finish within its deadline."""


@dataclass
class AsyncBoundedClient:
    base_url: str
    api_key: Secret | None = None
    timeout: float = 30.0
    max_body: int = 1024 * 1024
    connection: Connection = DIRECT
    _client: httpx.AsyncClient | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        key = "set" if self.api_key else "none"
        return f"AsyncBoundedClient(base_url={display_url(self.base_url)!r}, api_key={key}, timeout={self.timeout})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self.base_url.rstrip("/"),
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
                # A compressed body could inflate past the cap inside one chunk.
                headers={"Accept-Encoding": "identity"},
                trust_env=self.connection.trust_env,
                verify=tls_context(self.connection),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
        timeout: float | None = None,
        max_body: int | None = None,
        enough: Callable[[bytes], bool] | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
        target: str | None = None,
    ) -> Response:
        """One exchange. ``auth=False`` sends no Authorization header of ours.

        ``target``, when given, is the request-target sent exactly as written, the base URL's path not
        prepended (httpx would resolve ``/./`` and merge ``//``): how a caller reaches a path a proxy may
        read otherwise. ``path`` still names the request in what is reported.

        ``enough(body so far)``, when given, is asked after each chunk: once it
        says so, reading stops and the connection is closed (a server takes
        that as the caller gone, and stops generating); the response is then
        ``truncated``, like one cut at the byte cap, so it is never read as whole.
        ``on_chunk(chunk)`` sees each chunk as it arrives (a load generator times tokens by it).
        """
        deadline = self.timeout if timeout is None else timeout
        cap = self.max_body if max_body is None else max_body
        send_headers = dict(headers or {})
        if auth and self.api_key and not any(k.lower() == "authorization" for k in send_headers):
            send_headers["Authorization"] = f"Bearer {self.api_key.reveal()}"
        if json_body is not None:
            content = json.dumps(json_body).encode()
            send_headers.setdefault("Content-Type", "application/json")
        summary = summarize(json_body if json_body is not None else content)
        started = time.perf_counter()
        retried: str | None = None
        progress = {"bytes": 0}
        try:
            async with asyncio.timeout(deadline):
                for attempt in (1, 2):
                    try:
                        return await self._exchange(
                            method,
                            path,
                            content,
                            send_headers,
                            cap,
                            started,
                            summary,
                            retried,
                            progress,
                            enough,
                            on_chunk,
                            target,
                        )
                    except httpx.TimeoutException:
                        raise TimeoutError from None
                    except httpx.TransportError as exc:
                        if attempt == 2:
                            raise TransportFailure(
                                f"{method} {path}: {_explain(exc)} (after one retry; first: {retried})"
                            ) from None
                        retried = _explain(exc)
        except TimeoutError:
            raise RequestTimeout(
                f"{method} {path}: no complete answer within {deadline:g} s ({progress['bytes']:,} body bytes read)"
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(
        self,
        method: str,
        path: str,
        content: bytes | None,
        headers: dict[str, str],
        cap: int,
        started: float,
        summary: str,
        retried: str | None,
        progress: dict[str, int],
        enough: Callable[[bytes], bool] | None = None,
        on_chunk: Callable[[bytes], None] | None = None,
        target: str | None = None,
    ) -> Response:
        chunks: list[bytes] = []
        seen = 0
        truncated = False
        # httpcore's "target" extension: the request line's target as given, never normalised.
        extensions = {"target": target.encode("ascii")} if target is not None else None
        async with self._http().stream(
            method, path, content=content, headers=headers, extensions=extensions
        ) as response:
            traffic.answered()
            async for chunk in response.aiter_bytes():
                room = cap - seen
                seen += len(chunk)
                progress["bytes"] = seen
                if on_chunk is not None:
                    on_chunk(chunk)
                if len(chunk) > room:
                    chunks.append(chunk[: max(room, 0)])
                    truncated = True
                    break
                chunks.append(chunk)
                if enough is not None and enough(b"".join(chunks)):
                    truncated = True
                    break
            return Response(
                method=method,
                path=path,
                status=response.status_code,
                headers=response.headers,
                body=b"".join(chunks),
                bytes_seen=seen,
                truncated=truncated,
                elapsed=time.perf_counter() - started,
                request_summary=summary,
                retried=retried,
            )

    async def open_stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        first_chunk_within: float | None = None,
        keep: bool = False,
    ) -> OpenStream:
        """Send a request and return once its first body chunk arrived (or it ended), leaving it open.

        What follows is read and dropped in the background, so the stream
        stays drained and its end is seen; ``OpenStream.close`` hangs up,
        which a server takes as the caller going away. The deadline covers
        the wait for the first chunk only. ``keep``: the body is kept too (up
        to the byte cap), for judging how the stream ended; never sent again.
        """
        deadline = self.timeout if first_chunk_within is None else first_chunk_within
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key.reveal()}"
        content = json.dumps(json_body).encode() if json_body is not None else None
        started = time.perf_counter()
        stream = OpenStream(method, path, started, keep_bytes=self.max_body if keep else 0)
        context = self._http().stream(method, path, content=content, headers=headers, timeout=None)
        try:
            async with asyncio.timeout(deadline):
                response = await context.__aenter__()
                traffic.answered()
                stream.status = response.status_code
                chunks = response.aiter_bytes()
                try:
                    stream.first_chunk = await anext(chunks)
                    stream.first_chunk_at = time.perf_counter()
                    stream.keep(stream.first_chunk)
                except StopAsyncIteration:
                    stream.ended_at = time.perf_counter()
        except BaseException as exc:
            await context.__aexit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, TimeoutError):
                raise RequestTimeout(f"{method} {path}: no first chunk within {deadline:g} s") from None
            if isinstance(exc, httpx.TransportError):
                raise TransportFailure(f"{method} {path}: {_explain(exc)}") from None
            raise
        stream._closer = context
        if stream.ended_at is None:
            stream._drain = asyncio.ensure_future(stream._drain_rest(chunks))
        return stream

    async def get(self, path: str, **kw: Any) -> Response:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, json_body: Any = None, **kw: Any) -> Response:
        return await self.request("POST", path, json_body=json_body, **kw)


# What a TLS failure usually means, and the option that fixes it.
TLS_HINTS = (
    (
        "CERTIFICATE_VERIFY_FAILED",
        "the server's certificate is not trusted here: give --vllm-ca-bundle=PATH with the CA that signed it",
    ),
    ("WRONG_VERSION_NUMBER", "the server does not speak TLS there: use http:// instead of https://"),
    ("CERTIFICATE_REQUIRED", "the server requires a client certificate: give --vllm-client-cert=PATH"),
    ("certificate required", "the server requires a client certificate: give --vllm-client-cert=PATH"),
)


@dataclass
class OpenStream:
    """A response being streamed: when its first chunk came, whether and when it ended."""

    method: str
    path: str
    started: float
    status: int | None = None
    first_chunk: bytes = b""
    first_chunk_at: float | None = None
    ended_at: float | None = None
    # The end of what came last (at most 200 bytes), for saying how a stream ended.
    last_bytes: bytes = b""
    # With ``open_stream(keep=True)``: the body as read, up to keep_bytes; ``broken``: how reading it failed.
    keep_bytes: int = 0
    body: bytes = b""
    broken: str | None = None
    last_chunk_at: float | None = None
    _closer: Any = field(default=None, repr=False)
    _drain: asyncio.Future[None] | None = field(default=None, repr=False)

    def keep(self, chunk: bytes) -> None:
        self.last_chunk_at = time.perf_counter()
        if self.keep_bytes and len(self.body) < self.keep_bytes:
            self.body += chunk[: self.keep_bytes - len(self.body)]

    async def _drain_rest(self, chunks: Any) -> None:
        try:
            async for chunk in chunks:
                self.last_bytes = (self.last_bytes + chunk)[-200:]
                self.keep(chunk)
        except httpx.HTTPError as exc:
            self.broken = _explain(exc)
        except asyncio.CancelledError:
            pass
        finally:
            if self.ended_at is None:
                self.ended_at = time.perf_counter()

    def running_at(self, moment: float) -> bool:
        """Still streaming at ``moment`` (a ``time.perf_counter()`` reading)."""
        return self.first_chunk_at is not None and (self.ended_at is None or self.ended_at > moment)

    async def close(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.cancel()
            try:
                await self._drain
            except asyncio.CancelledError:
                pass
        if self._closer is not None:
            closer, self._closer = self._closer, None
            try:
                await closer.__aexit__(None, None, None)
            except httpx.HTTPError:
                pass


def _explain(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    explained = f"{exc.__class__.__name__}: {text}" if text != exc.__class__.__name__ else text
    hint = next((hint for marker, hint in TLS_HINTS if marker in text), None)
    return f"{explained} ({hint})" if hint else explained


class BoundedClient:
    """Synchronous face of :class:`AsyncBoundedClient`, on a private event loop.

    The loop runs in the calling thread: handing each exchange to a loop
    thread cost about 0.25 ms, a tenth of a whole suite's overhead. Code that
    already runs a loop in its thread (an async test using the sync client)
    cannot run a second one there, so its calls go through a helper thread.
    Calls are serialised: the loop runs one call at a time.
    """

    def __init__(
        self,
        base_url: str,
        api_key: Secret | None = None,
        timeout: float = 30.0,
        max_body: int = 1024 * 1024,
        connection: Connection = DIRECT,
    ):
        self._async = AsyncBoundedClient(base_url, api_key, timeout, max_body, connection)
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self._async.base_url

    @property
    def root_path(self) -> str:
        """The path of its base URL, which every request's path is sent under (``""`` for none)."""
        return url_root_path(self._async.base_url)

    @property
    def host(self) -> str:
        """The Host header its requests carry: the base URL's host and port."""
        return urlsplit(self._async.base_url).netloc.rsplit("@", 1)[-1]

    @property
    def timeout(self) -> float:
        return self._async.timeout

    @property
    def max_body(self) -> int:
        return self._async.max_body

    @property
    def has_api_key(self) -> bool:
        return bool(self._async.api_key)

    def key_under_scheme(self, scheme: str) -> dict[str, str]:
        """This client's own key as ``Authorization: <scheme> <key>``, for probing which schemes a server accepts."""
        key = self._async.api_key
        return {"Authorization": f"{scheme} {key.reveal()}"} if key else {}

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncBoundedClient", "BoundedClient", 1)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if not _loop_running_here():
                return self._loop.run_until_complete(coro)
            with ThreadPoolExecutor(1, thread_name_prefix="vllm-conformance-client") as helper:
                return helper.submit(self._loop.run_until_complete, coro).result()

    def request(self, method: str, path: str, **kw: Any) -> Response:
        return self._run(self._async.request(method, path, **kw))

    def answer_or_none(self, method: str, path: str, **kw: Any) -> Response | None:
        """``request``, or None when no answer came (a transport failure, the deadline): for observers that
        record what they could not see instead of failing."""
        try:
            return self.request(method, path, **kw)
        except TransportFailure:  # RequestTimeout is one
            return None

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, json_body: Any = None, **kw: Any) -> Response:
        return self.request("POST", path, json_body=json_body, **kw)

    def twin(self) -> BoundedClient:
        """Another client to the same server, with its own loop: for reading it while this one is busy."""
        a = self._async
        return BoundedClient(a.base_url, a.api_key, a.timeout, a.max_body, a.connection)

    def run(self, work: Callable[[AsyncBoundedClient], Coroutine[Any, Any, T]]) -> T:
        """Run ``work(async_client)`` on this client's loop: several exchanges that must overlap in time."""
        return self._run(work(self._async))

    def concurrently(self, calls: Iterable[tuple[str, str, dict[str, Any]]]) -> list[Response | BaseException]:
        """Send several exchanges at once; each item is (method, path, kwargs)."""

        async def gather() -> list[Response | BaseException]:
            return await asyncio.gather(
                *(self._async.request(method, path, **kw) for method, path, kw in calls), return_exceptions=True
            )

        return self._run(gather())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._async.aclose())
        self._loop.close()

    def __enter__(self) -> BoundedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
