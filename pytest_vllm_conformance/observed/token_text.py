"""Token strings as the text they stand for, and the dates a template writes into a rendering.

``/tokenize`` returns token strings in the tokenizer's own alphabet: GPT-2's
byte-level one (``Ġ`` a space, ``Ċ`` a newline) or SentencePiece's (``▁`` a
space, ``<0x0A>`` a raw byte). ``token_bytes`` undoes either, so a rendering
can be shown and searched as text.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Sequence

_SENTENCEPIECE_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
# The formats chat templates write today's date in (Llama 3.x "26 Jul 2024", ISO dates, ...).
DATE_FORMATS = ("%d %b %Y", "%d %B %Y", "%b %d, %Y", "%B %d, %Y", "%Y-%m-%d", "%d/%m/%Y", "%m/%d/%Y")
DATE_MARK = "<date>"


@functools.cache
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, reversed (the table byte-level BPE tokenizers share)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    stand_ins = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            stand_ins.append(256 + extra)
            extra += 1
    return {chr(stand_in): byte for byte, stand_in in zip(printable, stand_ins, strict=True)}


def token_bytes(token: str) -> bytes:
    """The bytes one token string stands for."""
    raw = _SENTENCEPIECE_BYTE.match(token)
    if raw:
        return bytes([int(raw.group(1), 16)])
    decoder = _byte_level_decoder()
    if all(char in decoder for char in token):
        return bytes(decoder[char] for char in token)
    return token.replace("▁", " ").encode()


def tokens_text(tokens: Sequence[str]) -> str:
    return b"".join(token_bytes(token) for token in tokens).decode(errors="replace")


def date_texts(now: datetime.datetime) -> list[str]:
    """Today's date (and the days either side: the server's zone may differ) as templates write it."""
    days = [(now + datetime.timedelta(days=shift)).date() for shift in (-1, 0, 1)]
    texts = {day.strftime(form) for day in days for form in DATE_FORMATS}
    # The same without a leading zero ("2 Dec 2026").
    texts |= {text[1:] for text in texts if text.startswith("0")}
    return sorted(texts, key=len, reverse=True)


def date_spans(tokens: Sequence[str], dates: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) token ranges covering each date found in the rendering's text."""
    offsets, position = [], 0
    for token in tokens:
        offsets.append(position)
        position += len(token_bytes(token))
    text = b"".join(token_bytes(token) for token in tokens)
    spans: list[tuple[int, int]] = []
    for date in dates:
        for found in re.finditer(re.escape(date.encode()), text):
            first = max(i for i, start in enumerate(offsets) if start <= found.start())
            last = max(i for i, start in enumerate(offsets) if start < found.end())
            if not any(first < end and start <= last for start, end in spans):
                spans.append((first, last + 1))
    return sorted(spans)


def normalised(ids: Sequence[int], spans: Sequence[Sequence[int]]) -> list[int | str]:
    """The ids with each date's tokens replaced by one ``<date>`` mark."""
    out: list[int | str] = []
    position = 0
    for start, end in sorted((int(s), int(e)) for s, e in spans):
        out += list(ids[position:start]) + [DATE_MARK]
        position = end
    return out + list(ids[position:])
