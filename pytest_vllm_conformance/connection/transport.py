"""How bytes reach us: TLS settings per connection, and the byte cap for clients we do not own.

``Connection`` says whose certificates to trust, which to present, and
whether to use the environment's proxies; ``tls_context`` builds one
verifying context per setting. ``CappedTransport`` gives a third-party
client (the OpenAI SDK; Anthropic's, through ``capped_httpx2_client``) our byte
cap: a body over it is an error, never a buffer.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from pytest_vllm_conformance.connection import traffic


@dataclass(frozen=True)
class Connection:
    """How to reach a server: whose certificates to trust, ours to present, and whether to use proxies.

    Certificates are always verified: a private CA is given, never switched off.
    """

    ca_bundle: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    # The environment's HTTP(S)_PROXY / NO_PROXY, only when asked for (--vllm-trust-env).
    trust_env: bool = False


DIRECT = Connection()


@functools.cache
def tls_context(connection: Connection = DIRECT) -> ssl.SSLContext:
    """One verifying TLS context per connection setting: each costs about 15 ms to build (the CA bundle)."""
    context = httpx.create_ssl_context()
    if connection.ca_bundle is not None:
        context.load_verify_locations(cafile=str(connection.ca_bundle))
    if connection.client_cert is not None:
        key = str(connection.client_key) if connection.client_key else None
        # Never OpenSSL's passphrase prompt on the terminal: an encrypted key is refused (tls_problem).
        context.load_cert_chain(str(connection.client_cert), keyfile=key, password=_no_passphrase)
    return context


class EncryptedKey(Exception):
    """The client key asks for a passphrase, which a test run has no way to type."""


def _no_passphrase() -> str:
    raise EncryptedKey


def tls_problem(connection: Connection) -> str | None:
    """The TLS settings' problem in one line naming the option and the file (None: they load), asked before a run."""
    named = (
        ("--vllm-ca-bundle", connection.ca_bundle),
        ("--vllm-client-cert", connection.client_cert),
        ("--vllm-client-key", connection.client_key),
    )
    for flag, path in named:
        if path is not None and not path.is_file():
            return f"{flag} {path}: {'is a directory' if path.is_dir() else 'no such file'}: give a PEM file"
    if connection.client_key is not None and connection.client_cert is None:
        return f"--vllm-client-key {connection.client_key}: give its certificate with --vllm-client-cert too"
    try:
        if connection.ca_bundle is not None:
            httpx.create_ssl_context().load_verify_locations(cafile=str(connection.ca_bundle))
    except (ssl.SSLError, ValueError, OSError) as exc:
        return f"--vllm-ca-bundle {connection.ca_bundle}: not a PEM bundle of CA certificates ({_reason(exc)})"
    try:
        tls_context(connection)
    except EncryptedKey:
        key = connection.client_key or connection.client_cert
        return (
            f"--vllm-client-key {key}: the key is encrypted (it asks for a passphrase); give an unencrypted copy "
            "(openssl pkey -in KEY -out plain-key.pem) kept as a secret"
        )
    except (ssl.SSLError, ValueError, OSError) as exc:
        with_key = f" with --vllm-client-key {connection.client_key}" if connection.client_key else ""
        return (
            f"--vllm-client-cert {connection.client_cert}{with_key}: not a PEM certificate and its private key that "
            f"match ({_reason(exc)})"
        )
    return None


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc).splitlines()[0][:120]


class ResponseTooLarge(httpx.ReadError):
    """Raised inside clients we do not own (the OpenAI SDK) when a body passes the cap."""


def _too_large(request: Any, cap: int) -> str:
    return f"{request.method} {request.url.path}: body passed the {cap:,}-byte cap"


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, cap: int, request: httpx.Request) -> None:
        self._inner = inner
        self._cap = cap
        self._request = request

    def __iter__(self):
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise ResponseTooLarge(_too_large(self._request, self._cap), request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedTransport(httpx.HTTPTransport):
    """An httpx transport for third-party clients: a body over the cap is an error, never a buffer."""

    def __init__(self, max_body: int, connection: Connection = DIRECT, **kwargs: Any) -> None:
        kwargs.setdefault("verify", tls_context(connection))
        super().__init__(**kwargs)
        self.max_body = max_body

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        traffic.answered()
        response.stream = _CappedStream(cast(httpx.SyncByteStream, response.stream), self.max_body, request)
        return response


def capped_httpx2_client(max_body: int, connection: Connection, timeout: float) -> Any:
    """The same cap for Anthropic's SDK, which takes an httpx2 client (pydantic's fork of httpx, the same API
    under another name, installed with the SDK): imported here, only by runs that use that SDK."""
    import httpx2

    class CappedStream(httpx2.SyncByteStream):
        def __init__(self, inner: Any, request: Any) -> None:
            self._inner, self._request = inner, request

        def __iter__(self):
            seen = 0
            for chunk in self._inner:
                seen += len(chunk)
                if seen > max_body:
                    raise httpx2.ReadError(_too_large(self._request, max_body), request=self._request)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    class Transport(httpx2.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            response = super().handle_request(request)
            traffic.answered()
            response.stream = CappedStream(response.stream, request)
            return response

    transport = Transport(verify=tls_context(connection), trust_env=connection.trust_env)
    return httpx2.Client(transport=transport, timeout=timeout, trust_env=connection.trust_env)
