"""Generate the reference documents from the data they describe, so the two cannot drift.

- ``docs/profile-reference.md`` from ``profile.schema.json``: what a serving
  profile may say;
- ``docs/contracts.md`` from the catalogue's files: every feature and contract,
  the vLLM versions it covers, when it is claimed, where an undeclared
  profile key takes its value, and where each fact was read.

A unit test (tests/unit/test_docs_gen.py) fails when a committed one is stale.
``docs/options.md`` has its own generator, ``plugin/option_docs.py``: the
option table lives on a floor above this room.

    python -m pytest_vllm_conformance.catalogue.docs_gen --write docs
    python -m pytest_vllm_conformance.catalogue.docs_gen --check docs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.catalogue import contracts
from pytest_vllm_conformance.catalogue.serving_profile import SCHEMA_FILE, schema

COMMAND = "python -m pytest_vllm_conformance.catalogue.docs_gen --write docs"
PROFILE_REFERENCE = "profile-reference.md"
CONTRACTS_REFERENCE = "contracts.md"
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
            word = {
                "integer": "integer",
                "number": "number",
                "string": "string",
                "boolean": "`true` or `false`",
                "object": "mapping",
            }.get(kind, kind)
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


def render_contracts(catalogue: contracts.Catalogue | None = None) -> str:
    catalogue = contracts.load() if catalogue is None else catalogue
    lines = [
        f"<!-- Generated from suites/*/{contracts.FEATURE_FILE} and "
        f"pytest_vllm_conformance/catalogue/{contracts.FACTS_DIR}/ by `{COMMAND}`; "
        "do not edit by hand. -->",
        "",
        "# Contracts",
        "",
        "Every check the suites make is a contract of the catalogue. A contract is *claimed* when its feature's and "
        "its own conditions hold and its vLLM versions contain the server's; otherwise it is *not claimed*, decided "
        "before the test runs, with the condition as the reason. A profile that requires a feature the release does "
        "not have fails. `pytest --vllm-list-contracts` prints the same catalogue.",
        "",
        "| feature | checks | claimed when | vLLM releases that have it |",
        "|---|---|---|---|",
    ]
    for name, feature in catalogue.features.items():
        claimed = " and ".join(map(str, feature.conditions)) or "always"
        have = f"`{feature.available}`" if feature.available else "all"
        lines.append(f"| [`{name}`](#{name}) | {_cell(feature.statement)} | {_cell(claimed)} | {have} |")
    for name, members in catalogue.by_feature().items():
        lines += ["", f"## {name}", "", _text(catalogue.features[name].statement), ""]
        lines += ["| contract | vLLM | claimed | statement |", "|---|---|---|---|"]
        for contract in members:
            own = " and ".join(map(str, contract.conditions)) or "with its feature"
            statement = contract.statement
            if contract.holds_to:
                statement += f" Held to {contracts.HOLDS_TO[contract.holds_to]}."
            lines.append(f"| `{contract.id}` | `{contract.versions}` | {_cell(own)} | {_cell(statement)} |")
    lines += [
        "",
        "## Declarations",
        "",
        "Where a profile key takes its value when the profile leaves it out: the server's release (a fact below), "
        "the `--vllm-baseline` capture, or the plugin's own policy, which messages call by that name.",
        "",
        "| profile key | default |",
        "|---|---|",
    ]
    for key, declaration in catalogue.declarations.items():
        if declaration.fact:
            default = f"the release's `{declaration.fact}`"
        elif declaration.from_baseline:
            default = "the baseline's value (--vllm-baseline), else not declared"
        elif declaration.has_policy:
            default = f"plugin policy: `{json.dumps(declaration.policy)}`" + (
                f" ({declaration.why})" if declaration.why else ""
            )
        else:
            default = f"none: {declaration.why}" if declaration.why else "none: not declared turns its contracts off"
        lines.append(f"| `{key}` | {_cell(default)} |")
    lines += [
        "",
        "## Facts",
        "",
        "What vLLM does, by version, and where it was read.",
        "",
        "| fact | versions | source |",
        "|---|---|---|",
    ]
    raw_sources = _fact_sources()
    for name, ranges in catalogue.facts.items():
        for (versions, _), source in zip(ranges, raw_sources.get(name, [""] * len(ranges)), strict=False):
            lines.append(f"| `{name}` | `{versions or 'all'}` | {_cell(source)} |")
    return "\n".join(lines) + "\n"


def _fact_sources() -> dict[str, list[str]]:
    """Each fact range's source, as the data file says it (the loaded catalogue keeps only values)."""
    from importlib import resources

    from pytest_vllm_conformance.catalogue import yaml_data

    package = resources.files(contracts.__package__)
    file = contracts.ROUTE_TABLES_FILE
    facts = {**contracts.raw_catalogue()["facts"], **yaml_data.load_shipped(package.joinpath(file).read_text())}
    return {
        name: [entry.get("source", f"each route names its file ({file})") for entry in ranges]
        for name, ranges in facts.items()
    }


def rendered() -> dict[str, str]:
    """Every generated document by file name."""
    return {PROFILE_REFERENCE: render_profile_reference(), CONTRACTS_REFERENCE: render_contracts()}


def main(argv: list[str] | None = None) -> int:
    return sync(
        rendered(),
        argv,
        command=COMMAND,
        about="Render the reference documents from the catalogue and the profile schema.",
    )


def sync(documents: dict[str, str], argv: list[str] | None, *, command: str, about: str) -> int:
    """``--write DIR`` the documents, or ``--check DIR`` that the committed ones are theirs (exit 1 naming the stale).

    Every generator of docs/ shares it, so each command writes and checks alike.
    """
    parser = argparse.ArgumentParser(description=about)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", type=Path, help="write every document into DIR")
    group.add_argument("--check", metavar="DIR", type=Path, help="exit 1 when a document in DIR differs from its data")
    args = parser.parse_args(argv)
    stale = []
    for name, text in documents.items():
        if args.write:
            args.write.mkdir(parents=True, exist_ok=True)
            (args.write / name).write_text(text, encoding="utf-8")
            continue
        path = args.check / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(path))
    for path in stale:
        print(f"{path} is stale: regenerate it with `{command}`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
