"""Secrets and their masking: the lowest room, so every layer can hold a key without showing it.

``Secret`` wraps a value that must never be shown (its repr and str are
masked); ``Redactor`` masks every secret the run knows, and any
Authorization or X-API-Key header value, in a piece of text. How reports,
log records and warnings are scrubbed with it is ``reporting/redaction.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit


class Secret:
    """A value that must never be shown: its repr and str are masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)


MASK = "***"
# The fewest characters an API key may have: a shorter one (a key "a") would be masked inside ordinary words.
MIN_SECRET_CHARS = 8
# A secret is masked where it stands as a whole token: not inside a longer run of key characters
# ("sk-ab" is not masked in "sk-abc"), so that no ordinary word is garbled. After a percent escape
# ("key%3Dsk-ab", a URL-encoded query) or a backslash escape in a repr ("body:\\nsk-ab") it still starts one.
_BEFORE = (
    r"(?:(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrtvfb0])|(?<=\\x[0-9A-Fa-f]{2})|(?<=\\u[0-9A-Fa-f]{4})"
    r"|(?<![A-Za-z0-9_\-]))"
)
_AFTER = r"(?![A-Za-z0-9_\-])"
# Header values are masked even when they are not one of our secrets. The
# scheme word is kept (it says what kind of credential was there). Source
# lines that build a header (``f"Bearer {key}"``) are left readable: a value
# that starts with "{" is a placeholder, and the groups before the value are
# atomic so that a quote prefix or the scheme word is never taken for the
# value instead. ``(b'authorization', b'Bearer k')`` is raw header-list form.
_HEADER_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key)((?>['\"]?\s*[:=]\s*(?:[rbfu]{0,2}['\"])?|['\"],\s*b?['\"]))"
    r"((?>(?:(?:bearer|basic|token|digest|negotiate|apikey)\s+)?))((?!\{)[^\s'\",}\]]+)"
)


def url_password(url: str | None) -> str | None:
    """The password of ``scheme://user:password@host``, if the URL has one."""
    if not url:
        return None
    try:
        return urlsplit(str(url)).password or None
    except ValueError:
        return None


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        if secret and secret not in self.secrets:
            self.secrets = sorted([*self.secrets, secret], key=len, reverse=True)
            alternatives = "|".join(re.escape(known) for known in self.secrets)
            self._pattern = re.compile(f"{_BEFORE}(?:{alternatives}){_AFTER}")

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        return _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + MASK, text)

    def needed(self, text: str) -> bool:
        return self(text) != text
