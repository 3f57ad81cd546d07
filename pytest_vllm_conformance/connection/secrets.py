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


def key_line(text: str) -> str:
    """A key as a secret file holds it: one trailing newline (``\\n`` or ``\\r\\n``) is the file's, not the key's,
    and is dropped, as every CLI that reads a secret file does. Any other control character, and any character
    outside ASCII, cannot travel in an HTTP header: a ValueError that says which one and where, never the key."""
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    for position, character in enumerate(text, 1):
        if ord(character) < 0x20 or ord(character) == 0x7F:
            raise ValueError(
                f"character {position} of {len(text)} is a control character (U+{ord(character):04X}): a key is "
                "one line of printable ASCII (one trailing newline, as a secret file ends, is dropped)"
            )
        if ord(character) > 0x7E:
            raise ValueError(
                f"character {position} of {len(text)} is not ASCII (U+{ord(character):04X}): an HTTP header "
                "carries printable ASCII only, so no server can be sent this key"
            )
    return text


def spellings(secret: str) -> list[str]:
    """How a secret may be written in text: itself, and as a repr shows it inside a str or a bytes value
    (``b'Bearer KEY\\n'`` in an "Illegal header value" message holds ``KEY\\n`` with a backslash)."""
    found = [secret, repr(secret)[1:-1], repr(secret.encode("utf-8", "backslashreplace"))[2:-1]]
    found += [secret.encode("unicode_escape").decode("ascii")]
    return list(dict.fromkeys(spelling for spelling in found if spelling))


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
        """Mask ``secret`` from now on, in each spelling a repr may give it."""
        for spelling in spellings(secret) if secret else ():
            self._add(spelling)

    def _add(self, secret: str) -> None:
        if secret not in self.secrets:
            self.secrets = sorted([*self.secrets, secret], key=len, reverse=True)
            alternatives = "|".join(re.escape(known) for known in self.secrets)
            self._pattern = re.compile(f"{_BEFORE}(?:{alternatives}){_AFTER}")

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        return _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + MASK, text)

    def needed(self, text: str) -> bool:
        return self(text) != text
