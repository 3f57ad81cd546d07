"""The files a user hands the plugin (profiles, fleet files, baselines, shards' reports), read one way.

Each is read as UTF-8 (a byte-order mark accepted: Notepad writes one), up to
a size no such file comes near, and YAML without aliases: a 1 KB file of
nested aliases expands to gigabytes (the "billion laughs"), and none of our
files needs one. Anything else is refused with one line naming the file and
what to do, as ``UserFileError`` (a ``ValueError``), never a traceback.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any, BinaryIO

import yaml

# A profile is a few KB, a shard's report of every contract test about 1 MB; 64 MB bounds memory, not use.
MAX_BYTES = 64 * 1024 * 1024
# Deeper nesting than any of our files has; deeper still would exhaust the parser's recursion.
MAX_DEPTH = 64
# UTF-32's little-endian BOM starts with UTF-16's, so it is looked for first.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


class UserFileError(ValueError):
    """The file cannot be read as the text it should hold; the message names it and says what to do."""


def read_text(path: Path, what: str) -> str:
    """The file's text: UTF-8, a BOM accepted; anything else refused naming ``what`` (e.g. "profile x.yaml")."""
    try:
        with open(path, "rb") as stream:
            raw = _read_at_most(stream, MAX_BYTES + 1)
    except OSError as exc:
        raise UserFileError(f"{what}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise UserFileError(f"{what}: larger than {MAX_BYTES // (1024 * 1024)} MB; not a file this plugin writes")
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            raise UserFileError(f"{what}: {encoding} text (it starts with a {encoding} BOM); save it as UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError(
            f"{what}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def _read_at_most(stream: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes, a megabyte at a time: ``read(limit)`` would allocate all of it for a 1 KB file,
    and a file's size cannot be trusted beforehand (a pipe, /dev/zero)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := stream.read(min(1024 * 1024, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class _PlainLoader(yaml.SafeLoader):
    """PyYAML's safe loader (its errors quote the line with a caret), refusing aliases and deep nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"an alias (*{event.anchor}): aliases are not read here; write the value out",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(path: Path, what: str) -> Any:
    """The YAML document in ``path``, read as ``read_text`` does, without aliases; else ``UserFileError``."""
    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=_PlainLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise UserFileError(f"{what}: not valid YAML: {where}{_one_line(problem)}") from None
    except yaml.YAMLError as exc:
        raise UserFileError(f"{what}: not valid YAML: {_one_line(str(exc))}") from None
    except (ValueError, RecursionError) as exc:  # an integer past Python's digit limit, a date out of range
        raise UserFileError(f"{what}: not valid YAML: {_one_line(str(exc))}") from None


def load_json(path: Path, what: str) -> Any:
    """The JSON document in ``path``, read as ``read_text`` does; else ``UserFileError``."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UserFileError(f"{what}: not JSON: {_one_line(str(exc))}") from None


def _one_line(message: str) -> str:
    """PyYAML's multi-line message (problem, the line, a caret) as one line: the caret's picture adds nothing."""
    lines = [line.strip() for line in message.splitlines() if line.strip() and set(line.strip()) != {"^"}]
    return "; ".join(lines)[:500]


class _PlainDumper(yaml.SafeDumper):
    """Writes an object met twice in full, so that what we write ``load_yaml`` reads back."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(data: Any, **options: Any) -> str:
    """``yaml.safe_dump`` without anchors or aliases (the readers here refuse them)."""
    return yaml.dump(data, Dumper=_PlainDumper, **options)
