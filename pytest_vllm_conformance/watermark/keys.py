"""The watermark key as people write it: decimal, or hex with a 0x prefix; 64 bits.

One parser for the suite, the command line and the run's redaction. Its
messages say what is wrong without echoing the value: a near-miss key is
still most of a secret.
"""

from __future__ import annotations

import re

KEY_PATTERN = re.compile(r"0[xX][0-9a-fA-F]+|[0-9]+")
MAX_KEY = 2**64 - 1
# The smallest key the run accepts: both its spellings, decimal and 0x-hex, have 8 characters, the
# least an API key may have (connection/secrets.py MIN_SECRET_CHARS). A smaller key is a small
# search: the detector is public and the key is its only secret, so trying each of the 10**7 smaller
# ones on a few answers finds it. And redaction masks the key's decimal and hex spellings wherever
# they stand, so a key like 16 would mask every "16" in every report.
MIN_KEY = 10**7


class InvalidKey(ValueError):
    """The text is not a 64-bit watermark key; the message never holds the text."""


def parse_key(text: str) -> int:
    text = text.strip()
    if len(text) > 24:  # 2**64 has 20 digits; also keeps int() within its digit limit
        raise InvalidKey("does not fit in 64 bits")
    if not KEY_PATTERN.fullmatch(text):
        raise InvalidKey("is not a non-negative integer, decimal or 0x-prefixed hex")
    key = int(text, 16) if text[:2] in ("0x", "0X") else int(text, 10)
    if key > MAX_KEY:
        raise InvalidKey("does not fit in 64 bits")
    return key


def too_small(text: str) -> bool:
    """Whether ``text`` is a valid key below MIN_KEY (an invalid one is refused where it is parsed)."""
    try:
        return parse_key(text) < MIN_KEY
    except InvalidKey:
        return False


def spellings(text: str) -> list[str]:
    """The key as given and as a traceback would print it (decimal, hex): everything redaction must mask."""
    try:
        key = parse_key(text)
    except InvalidKey:
        return [text]
    return list(dict.fromkeys([text, text.strip(), str(key), hex(key)]))
