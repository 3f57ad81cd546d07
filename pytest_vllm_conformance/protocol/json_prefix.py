"""Whether a text is the start of a JSON value valid against a schema: how an answer cut by max_tokens is judged.

A model may fill constrained JSON with whitespace until ``max_tokens`` (random
tiny models do, and so do small real ones): the answer is cut, never closed,
and does not parse. What it did generate is still evidence. A constraint that
held leaves a text some continuation makes valid; a constraint that was
dropped soon leaves one no continuation can save (words where a ``{`` must
be, a key the schema does not allow, a value outside the enum).
``prefix_problem`` reads the text once and names the first character that no
valid value has there.

Only the schema keywords our constraints use are read in a prefix: ``type``,
``enum``, ``const``, ``properties``, ``required``, ``additionalProperties`` and
``items``. A prefix that only another keyword rules out is taken as viable
(undecided, never failed); a complete answer is judged by jsonschema anyway
(``schema_problem``: where a whole value breaks its schema). Structured
outputs, tool calls and the agent loops' forced calls judge their answers by both.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import jsonschema

WHITESPACE = " \t\n\r"
ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
NUMBER_START = re.compile(r"-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?")
WORDS = {"true": True, "false": False, "null": None}
KIND_OF_FIRST = {"{": "object", "[": "array", '"': "string", "t": "boolean", "f": "boolean", "n": "null"}


class _TextEnded(Exception):
    """The text ended where a valid value could still go on."""


class _Broken(Exception):
    def __init__(self, position: int, why: str) -> None:
        super().__init__(why)
        self.position, self.why = position, why


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1.0`` is ``1``, ``true`` is not."""
    if _kind(a) == _kind(b) == "number":
        return bool(a == b)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _allowed_kinds(schema: Any) -> set[str] | None:
    kinds = schema.get("type") if isinstance(schema, dict) else None
    if kinds is None:
        return None
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    return kinds | {"number"} if "integer" in kinds else kinds


def _options(schema: Any) -> list[Any] | None:
    """The values ``enum`` or ``const`` allows, or None when they do not restrict it."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        if self.pos >= len(self.text):
            raise _TextEnded
        return self.text[self.pos]

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        return char

    def whitespace(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in WHITESPACE:
            self.pos += 1

    def value(self, schema: Any) -> Any:
        self.whitespace()
        start, first = self.pos, self.peek()
        kind = KIND_OF_FIRST.get(first) or ("number" if first in "-0123456789" else None)
        if kind is None:
            raise _Broken(start, f"{first!r} cannot start a JSON value")
        allowed, options = _allowed_kinds(schema), _options(schema)
        if allowed is not None and kind not in allowed:
            raise _Broken(start, f"a {kind} where the schema allows {' or '.join(sorted(allowed))}")
        if options is not None and not any(_kind(option) == kind for option in options):
            raise _Broken(start, f"a {kind} where the schema allows only {json.dumps(options)}")
        value: Any
        if kind == "object":
            value = self.object(schema if isinstance(schema, dict) else {})
        elif kind == "array":
            value = self.array(schema.get("items", True) if isinstance(schema, dict) else True)
        elif kind == "string":
            strings = None if options is None else [option for option in options if isinstance(option, str)]
            value = self.string(strings)
        elif kind == "number":
            value = self.number(integer=allowed is not None and "integer" in allowed and len(allowed) == 2)
        else:
            value = self.word()
        if options is not None and not any(_same(value, option) for option in options):
            raise _Broken(start, f"{json.dumps(value)} is not one of {json.dumps(options)}")
        return value

    def string(self, options: list[str] | None) -> str:
        """A string after its opening quote; ``options``: the strings it may be (each character is checked)."""
        self.take()
        decoded = ""
        while True:
            at, char = self.pos, self.take()
            if char == '"':
                if options is not None and decoded not in options:
                    raise _Broken(at, f"the string {decoded!r} is not one of {options}")
                return decoded
            if char == "\\":
                escape = self.take()
                if escape == "u":
                    digits = "".join(self.take() for _ in range(4))
                    if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                        raise _Broken(at, f"\\u{digits} is not a unicode escape")
                    char = chr(int(digits, 16))
                elif escape in ESCAPES:
                    char = ESCAPES[escape]
                else:
                    raise _Broken(at, f"\\{escape} is not a JSON escape")
            elif ord(char) < 0x20:
                raise _Broken(at, f"the control character {char!r} inside a string")
            decoded += char
            if options is not None and not any(option.startswith(decoded) for option in options):
                raise _Broken(at, f"{decoded!r} does not start any of {options}")

    def number(self, *, integer: bool) -> float:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in "+-0123456789.eE":
            self.pos += 1
        lexeme = self.text[start : self.pos]
        if self.pos >= len(self.text) and NUMBER_START.fullmatch(lexeme):
            raise _TextEnded
        if not NUMBER.fullmatch(lexeme):
            raise _Broken(start, f"{lexeme!r} is not a JSON number")
        value = float(lexeme)
        if integer and not value.is_integer():
            raise _Broken(start, f"{lexeme} where the schema allows an integer")
        return value

    def word(self) -> Any:
        start = self.pos
        word = next(word for word in WORDS if word[0] == self.text[start])
        for expected in word:
            at, char = self.pos, self.take()
            if char != expected:
                raise _Broken(at, f"{self.text[start : at + 1]!r} does not start {word}")
        return WORDS[word]

    def object(self, schema: dict[str, Any]) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties", True)
        required = schema.get("required") or []
        seen: dict[str, Any] = {}
        self.take()
        self.whitespace()
        if self.peek() == "}":
            return self.close_object(seen, required)
        while True:
            self.whitespace()
            if self.peek() != '"':
                raise _Broken(self.pos, f"{self.peek()!r} where a property name in quotes must be")
            names = None if additional is not False else [name for name in properties if name not in seen]
            key = self.string(names)
            self.whitespace()
            at = self.pos
            if self.take() != ":":
                raise _Broken(at, f"{self.text[at]!r} where ':' must follow the property name {key!r}")
            seen[key] = self.value(properties.get(key, True if additional is False else additional))
            self.whitespace()
            at, char = self.pos, self.take()
            if char == "}":
                self.pos = at
                return self.close_object(seen, required)
            if char != ",":
                raise _Broken(at, f"{char!r} where ',' or '}}' must follow a property")
            if additional is False and all(name in seen for name in properties):
                raise _Broken(at, "a ',' after the last property the schema allows")

    def close_object(self, seen: dict[str, Any], required: list[str]) -> dict[str, Any]:
        at = self.pos
        self.take()
        missing = [name for name in required if name not in seen]
        if missing:
            raise _Broken(at, f"the object closes without the required {missing}")
        return seen

    def array(self, items: Any) -> list[Any]:
        values: list[Any] = []
        self.take()
        self.whitespace()
        if self.peek() == "]":
            self.take()
            return values
        while True:
            values.append(self.value(items))
            self.whitespace()
            at, char = self.pos, self.take()
            if char == "]":
                return values
            if char != ",":
                raise _Broken(at, f"{char!r} where ',' or ']' must follow an item")


def prefix_problem(text: str, schema: Any = True, *, then: str = "") -> str | None:
    """None when some continuation of ``text`` is a JSON value valid against ``schema``, then ``then``.

    Whitespace may follow the value (before ``then``, a literal such as the end
    of a tool-call envelope). Otherwise: where the text leaves every valid
    continuation, and why (``at character 9 ('{"answer": "g'): 'g' does not start any of ['alpha', 'beta']``).
    """
    reader = _Reader(text)
    try:
        reader.value(schema)
        reader.whitespace()
        rest = text[reader.pos :]
        if then.startswith(rest):
            return None
        at = reader.pos + len(os.path.commonprefix([rest, then]))
        raise _Broken(at, f"{then!r} must follow the JSON value" if then else "text after the JSON value")
    except _TextEnded:
        return None
    except _Broken as broken:
        seen = text[max(0, broken.position - 30) : broken.position + 1]
        return f"at character {broken.position} ({seen!r}): {broken.why}"


def schema_problem(schema: dict[str, Any], value: Any) -> str | None:
    """Where and how ``value`` breaks ``schema`` (JSON Schema 2020-12), or None when it is valid."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    return f"breaks the schema at {where}: {error.message}"
