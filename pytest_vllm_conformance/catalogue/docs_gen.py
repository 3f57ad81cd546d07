"""Generate ``docs/profile-reference.md`` from ``profile.schema.json``.

The schema is the single source of what a serving profile may say; the
reference is rendered from it so the two cannot drift. A unit test
(tests/unit/test_docs_gen.py) fails when the committed reference is stale.

    python -m pytest_vllm_conformance.catalogue.docs_gen                 # print the reference
    python -m pytest_vllm_conformance.catalogue.docs_gen --write docs/profile-reference.md
    python -m pytest_vllm_conformance.catalogue.docs_gen --check docs/profile-reference.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.catalogue.serving_profile import SCHEMA_FILE, schema

COMMAND = "python -m pytest_vllm_conformance.catalogue.docs_gen --write docs/profile-reference.md"
TOP_LEVEL = "Top level"


def render_profile_reference(document: dict[str, Any] | None = None) -> str:
    document = schema() if document is None else document
    lines = [
        f"<!-- Generated from pytest_vllm_conformance/catalogue/{SCHEMA_FILE} by `{COMMAND}`; do not edit by hand. -->",
        "",
        f"# Serving profile reference: {document.get('title', 'serving profile')}",
        "",
        _text(document.get("description", "")),
        "",
        "A profile is a YAML file given with `--vllm-profile PATH` (or `VLLM_CONFORMANCE_PROFILE`). It is "
        f"validated against `pytest_vllm_conformance/{SCHEMA_FILE}` before anything runs; a bad file stops the "
        "run naming the file, the field and what was expected.",
    ]
    for path, node in _objects(document, TOP_LEVEL):
        lines += ["", f"## {path if path == TOP_LEVEL else f'`{path}`'}", ""]
        if path != TOP_LEVEL and node.get("description"):
            lines += [_text(node["description"]), ""]
        lines += _table(node, document)
        if node.get("additionalProperties") is False:
            lines += ["", "No other field is allowed here."]
    return "\n".join(lines) + "\n"


def _objects(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every object with properties, depth first: the top level, then each section and sub-section."""
    found = [(path, node)] if node.get("properties") else []
    for name, child in node.get("properties", {}).items():
        child_path = name if path == TOP_LEVEL else f"{path}.{name}"
        found += _objects(child, child_path)
        items = child.get("items")
        if isinstance(items, dict):
            found += _objects(items, f"{child_path}[]")
    return found


def _table(node: dict[str, Any], document: dict[str, Any]) -> list[str]:
    required = set(node.get("required", ()))
    lines = ["| field | value | required | meaning |", "|---|---|---|---|"]
    for name, child in node["properties"].items():
        child = _resolve(child, document)
        lines.append(
            f"| `{name}` | {_cell(_value(child, document))} | {'yes' if name in required else 'no'} | "
            f"{_cell(child.get('description', ''))} |"
        )
    return lines


def _resolve(node: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    reference = node.get("$ref")
    if not isinstance(reference, str) or not reference.startswith("#/"):
        return node
    target: Any = document
    for part in reference[2:].split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _value(node: dict[str, Any], document: dict[str, Any]) -> str:
    """What a field may hold, in words: ``one of `enabled`, `disabled```, ``integer ≥ 64``..."""
    if "const" in node:
        return f"exactly {_literal(node['const'])}"
    if "enum" in node:
        return "one of " + ", ".join(_literal(value) for value in node["enum"])
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return "one of: " + "; ".join(_value(_resolve(option, document), document) for option in node[combinator])
    types = node.get("type", "any")
    types = [types] if isinstance(types, str) else list(types)
    words = []
    for kind in types:
        if kind == "null":
            continue
        if kind == "array":
            items = _resolve(node["items"], document) if isinstance(node.get("items"), dict) else {}
            inner = _value(items, document) if items else "anything"
            if items.get("properties"):
                word = "list of mappings (fields below)"
            else:
                word = f"list of ({inner})" if " " in inner else f"list of {inner}"
            if node.get("uniqueItems"):
                word += ", no repeats"
        elif kind == "object" and node.get("properties"):
            word = "mapping (fields below)"
        else:
            word = {"integer": "integer", "number": "number", "string": "string", "boolean": "`true` or `false`",
                    "object": "mapping"}.get(kind, kind)
        words.append(word)
    text = " or ".join(words) or "null"
    constraints = _constraints(node)
    if constraints:
        text += ", " + ", ".join(constraints)
    if "null" in types:
        text += ", or null"
    if "default" in node:
        text += f" (default {_literal(node['default'])})"
    return text


def _constraints(node: dict[str, Any]) -> list[str]:
    found = []
    for keyword, words in (
        ("minimum", "at least {}"),
        ("exclusiveMinimum", "more than {}"),
        ("maximum", "at most {}"),
        ("exclusiveMaximum", "less than {}"),
        ("minLength", "at least {} character"),
        ("maxLength", "at most {} character"),
        ("minItems", "at least {} item"),
        ("maxItems", "at most {} item"),
    ):
        if keyword in node:
            plural = "s" if words.endswith(("character", "item")) and node[keyword] != 1 else ""
            found.append(words.format(node[keyword]) + plural)
    if "pattern" in node:
        found.append(f"matching `{node['pattern']}`")
    return found


def _literal(value: Any) -> str:
    return f"`{json.dumps(value) if not isinstance(value, str) else value}`"


def _text(text: str) -> str:
    return " ".join(str(text).split())


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the serving-profile reference from profile.schema.json.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="PATH", type=Path, help="write the reference to PATH")
    group.add_argument("--check", metavar="PATH", type=Path, help="exit 1 when PATH differs from the schema's reference")
    args = parser.parse_args(argv)
    reference = render_profile_reference()
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(reference, encoding="utf-8")
        return 0
    if args.check:
        current = args.check.read_text(encoding="utf-8") if args.check.is_file() else ""
        if current != reference:
            print(f"{args.check} is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
