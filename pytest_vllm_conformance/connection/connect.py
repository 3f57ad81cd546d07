"""The server under test for this run: connected to, or started and then connected to.

Established once, in the process that controls the run; pytest-xdist
workers receive the discovered facts instead of probing again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.connection.client import AsyncBoundedClient, BoundedClient
from pytest_vllm_conformance.connection.discovery import (
    DiscoveryError,
    KnownRoutes,
    PrefixCachingReader,
    ServerFacts,
    discover,
)
from pytest_vllm_conformance.connection.ingress import unreached_model
from pytest_vllm_conformance.connection.launcher import Progress, StartClocks, VllmServer
from pytest_vllm_conformance.connection.secrets import Secret
from pytest_vllm_conformance.connection.settings import Settings
from pytest_vllm_conformance.connection.transport import CappedTransport, Connection, capped_httpx2_client

NO_TARGET = "no vLLM server to test: give --vllm-url=URL, or --vllm-serve=MODEL_DIR to start one"


class NoTarget(Exception):
    """Neither a URL nor a model to serve was given."""


@dataclass
class ServerConnection:
    """The server under test as the run reached it: what discovery found, where, and the process when we started it."""

    facts: ServerFacts
    base_url: str
    server: VllmServer | None = None
    # The clocks of the starts made before the run's server's (--vllm-serve-second-start: the first), in order.
    earlier_starts: tuple[StartClocks, ...] = ()

    @property
    def log_path(self) -> Path | None:
        return self.server.log_path if self.server else None

    @property
    def start_clocks(self) -> tuple[StartClocks, ...]:
        """The clocks of each start the run made, in order, the run's server's last (the launcher read them as
        each started); none when the run started no server."""
        if self.server is None or self.server.clocks is None:
            return ()
        return (*self.earlier_starts, self.server.clocks)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server.remove_own_log()
            self.server = None


def configured(settings: Settings) -> bool:
    return bool(settings.url or settings.fleet or settings.serve or settings.ingress_url)


def connection_for(settings: Settings) -> Connection:
    return Connection(settings.ca_bundle, settings.client_cert, settings.client_key, settings.trust_env)


def ingress_key(settings: Settings) -> Secret | None:
    """The key callers send to the ingress: its own (a gateway's master or virtual key), else the server's."""
    return settings.ingress_api_key or settings.api_key


def target_key(settings: Settings) -> Secret | None:
    """The key of the run's target: the ingress's when only --vllm-ingress-url was given, else the server's."""
    return ingress_key(settings) if not (settings.url or settings.serve) else settings.api_key


def client_for(settings: Settings, base_url: str, api_key: Secret | None | bool = True) -> BoundedClient:
    """The run's client for ``base_url``: its byte cap, timeout and TLS; the run's key unless another is given."""
    key = settings.api_key if api_key is True else (api_key or None)
    return BoundedClient(base_url, key, settings.timeout, settings.max_body, connection_for(settings))


def async_client_for(settings: Settings, base_url: str) -> AsyncBoundedClient:
    return AsyncBoundedClient(base_url, settings.api_key, settings.timeout, settings.max_body, connection_for(settings))


def sdk_client_for(settings: Settings, base_url: str) -> Any:
    """The official OpenAI SDK for ``base_url``, through our byte cap (``CappedTransport``), timeout and TLS.

    openai is imported here, only by runs that use it: the import alone takes about 0.8 s.
    """
    import httpx
    import openai

    connection = connection_for(settings)
    http_client = httpx.Client(
        transport=CappedTransport(settings.max_body, connection),
        timeout=settings.timeout,
        trust_env=connection.trust_env,
    )
    return openai.OpenAI(
        base_url=f"{base_url.rstrip('/')}/v1",
        api_key=settings.api_key.reveal() if settings.api_key else "no-key",
        max_retries=0,
        timeout=settings.timeout,
        http_client=http_client,
    )


def anthropic_client_for(settings: Settings, base_url: str) -> Any:
    """Anthropic's official SDK for ``base_url``, through the same byte cap, timeout and TLS as the OpenAI SDK.

    The key goes as the SDK sends ``api_key``, ``Authorization: Bearer``, the header vLLM checks on every route
    (no ``x-api-key``); given explicitly, the SDK never reads ANTHROPIC_API_KEY from the environment.
    """
    import anthropic

    http_client = capped_httpx2_client(settings.max_body, connection_for(settings), settings.timeout)
    return anthropic.Anthropic(
        base_url=base_url.rstrip("/"),
        api_key=settings.api_key.reveal() if settings.api_key else "no-key",
        max_retries=0,
        timeout=settings.timeout,
        http_client=http_client,
    )


def establish(
    settings: Settings,
    known_routes: KnownRoutes | None = None,
    url: str | None = None,
    progress: Progress | None = None,
    read_prefix_caching: PrefixCachingReader | None = None,
) -> ServerConnection:
    """Start the embedded server if asked to, then discover the target (``known_routes``: see ``discover``).

    ``url``: one replica of a fleet (else the one --vllm-url). ``progress``: told how the server's start goes while
    it is waited for (plugin/progress.py decides when to say so).
    """
    server = None
    earlier: tuple[StartClocks, ...] = ()
    # Given only the public entry (--vllm-ingress-url), the run tests what callers reach.
    base_url = url or (settings.url[0] if settings.url else None) or (None if settings.serve else settings.ingress_url)
    if not base_url:
        if not settings.serve:
            raise NoTarget(NO_TARGET)
        if settings.serve_second_start:
            earlier = (_first_start(settings, progress),)
        server = _embedded(settings, settings.serve_log).start(progress, readiness=True)
        base_url = server.url
    assert base_url is not None, "a URL, an ingress or a server to start"
    try:
        with client_for(settings, base_url, target_key(settings)) as client:
            facts = discover(client, settings.model, known_routes, read_prefix_caching=read_prefix_caching)
        if settings.ingress_url and settings.ingress_url != base_url:
            with client_for(settings, settings.ingress_url, ingress_key(settings)) as ingress:
                unreached = unreached_model(ingress, facts.model)
            if unreached:
                raise DiscoveryError(unreached)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return ServerConnection(facts=facts, base_url=base_url, server=server, earlier_starts=earlier)


def _embedded(settings: Settings, log_path: Path | None) -> VllmServer:
    assert settings.serve is not None, "a model to serve"
    return VllmServer(
        settings.serve,
        settings.serve_arg,
        python=settings.serve_python,
        api_key=settings.api_key,
        # None: a temporary folder of the server's, removed when the run is done (--vllm-serve-log keeps one).
        log_path=log_path,
        startup_timeout=settings.serve_timeout,
    )


def _first_start(settings: Settings, progress: Progress | None) -> StartClocks:
    """--vllm-serve-second-start: a start of the same flags, timed and stopped; the run then tests the next one.

    Its log is its own (beside --vllm-serve-log as ``NAME.first.log`` when one is kept), so the start-up log the
    run reads is the tested server's alone.
    """
    kept = settings.serve_log
    first = _embedded(settings, kept.with_name(f"{kept.stem}.first{kept.suffix}") if kept else None)
    try:
        first.start(progress, readiness=True)
    finally:
        first.stop()
    first.remove_own_log()
    assert first.clocks is not None, "timed once healthy"
    return first.clocks
