"""What an exchange with the server gave back: a ``Response`` as read under the byte cap, and the short forms
(a request's summary, a URL without its password) every message about one uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

SUMMARY_CHARS = 160


class NotJSON(AssertionError):
    """A body that a contract needs as JSON is not JSON (or was truncated)."""


def display_url(url: str) -> str:
    """The URL without user:password, safe to print."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=host))


LONG_VALUE_CHARS = 48


def _shorten(value: Any) -> Any:
    """Long strings (a base64 payload) and long lists (a malformed prompt) become their size."""
    if isinstance(value, str) and len(value) > LONG_VALUE_CHARS:
        return f"<{len(value):,} chars>"
    if isinstance(value, list) and len(value) > 8:
        return f"<list of {len(value):,} items>"
    if isinstance(value, dict):
        return {key: _shorten(item) for key, item in value.items()}
    return value


def summarize(payload: Any) -> str:
    """A short, single-line rendering of a request body for messages."""
    if payload is None:
        return ""
    if isinstance(payload, (bytes, bytearray)):
        text = f"<{len(payload)} bytes>"
    else:
        text = json.dumps(_shorten(payload), separators=(",", ":"), default=str)
    if len(text) > SUMMARY_CHARS:
        text = f"{text[:SUMMARY_CHARS]}... ({len(text)} chars)"
    return text


@dataclass(frozen=True)
class Response:
    method: str
    path: str
    status: int
    headers: httpx.Headers
    body: bytes
    bytes_seen: int
    truncated: bool
    elapsed: float
    request_summary: str = ""
    retried: str | None = None

    def __repr__(self) -> str:
        # Short on purpose: assertion rewriting prints it, and a body may be a megabyte.
        return f"<Response {self.describe()}>"

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        if self.truncated:
            raise NotJSON(f"{self.describe()}: body truncated, cannot parse it as JSON")
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise NotJSON(f"{self.describe()}: body is not JSON ({exc}): {self.text[:SUMMARY_CHARS]!r}") from None

    def json_or_none(self) -> Any:
        try:
            return self.json()
        except NotJSON:
            return None

    @property
    def size_text(self) -> str:
        if self.truncated:
            return f"truncated at {len(self.body):,} bytes"
        return f"{self.bytes_seen:,} B"

    def describe(self) -> str:
        """``POST /v1/completions {"prompt":...} -> 400 (1,330 B in 5 ms)``"""
        request = f"{self.method} {self.path}"
        if self.request_summary:
            request += f" {self.request_summary}"
        note = f", retried after {self.retried}" if self.retried else ""
        return f"{request} -> {self.status} ({self.size_text} in {self.elapsed * 1000:.0f} ms{note})"
