"""Our Responses schemas (protocol/schemas/, written by us) cross-checked against OpenAI's published
OpenAPI description: the same fields, the same required ones, the same event union.

The description is reference data the repo does not ship: it is read from
VLLM_CONFORMANCE_OPENAI_OPENAPI or ../shared/reference/openai-openapi/openapi.yaml next to the
checkout, and the test is skipped when it is absent, so the repo stands on its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

SCHEMAS = Path(__file__).parents[2] / "pytest_vllm_conformance" / "protocol" / "schemas"
REFERENCE = Path(
    os.environ.get(
        "VLLM_CONFORMANCE_OPENAI_OPENAPI",
        Path(__file__).parents[3] / "shared" / "reference" / "openai-openapi" / "openapi.yaml",
    )
)

# OpenAI's component -> our definition in common.json.
COUNTERPARTS = {
    "Response": "response",
    "OutputMessage": "output_message",
    "FunctionToolCall": "function_call_item",
    "ReasoningItem": "reasoning_item",
    "ResponseUsage": "response_usage",
    "OutputTextContent": "output_text",
    "RefusalContent": "refusal_content",
}

# Fields OpenAI documents in prose, not in the component: include_obfuscation "adds random
# characters to an `obfuscation` field on streaming delta events", so ours allow it.
IN_PROSE = {"response.output_text.delta": {"obfuscation"}}


@pytest.fixture(scope="module")
def openai() -> dict[str, Any]:
    if not REFERENCE.is_file():
        pytest.skip(f"OpenAI's OpenAPI description is not here ({REFERENCE.name}; set VLLM_CONFORMANCE_OPENAI_OPENAPI)")
    return yaml.safe_load(REFERENCE.read_text())["components"]["schemas"]


def _flat(components: dict[str, Any], schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The properties and required fields of a component, its allOf parts merged."""
    if "$ref" in schema:
        return _flat(components, components[schema["$ref"].rsplit("/", 1)[-1]])
    properties, required = set(schema.get("properties", {})), set(schema.get("required", []))
    for part in schema.get("allOf", []):
        more, must = _flat(components, part)
        properties |= more
        required |= must
    return properties, required


def _ours(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.json").read_text())


@pytest.mark.parametrize("component", sorted(COUNTERPARTS))
def test_our_response_shapes_have_openais_fields_and_required_ones(openai, component):
    properties, required = _flat(openai, openai[component])
    ours = _ours("common")["$defs"][COUNTERPARTS[component]]
    assert set(ours.get("properties", {})) == properties
    assert set(ours.get("required", [])) == required


def _event_types(openai: dict[str, Any]) -> dict[str, str]:
    union = openai["ResponseStreamEvent"]["anyOf"]
    names = [branch["$ref"].rsplit("/", 1)[-1] for branch in union]
    return {_type_of(openai[name]["properties"]["type"]): name for name in names}


def _type_of(schema: dict[str, Any]) -> str:
    return schema["const"] if "const" in schema else schema["enum"][0]


def test_our_event_union_is_openais(openai):
    assert set(_ours("responses_event")["properties"]["type"]["enum"]) == set(_event_types(openai))


def test_each_event_we_define_has_openais_fields_and_required_ones(openai):
    names = _event_types(openai)
    for branch in _ours("responses_event")["allOf"]:
        named = branch["if"]["properties"]["type"]
        for event_type in named.get("enum", [named.get("const")]):
            properties, required = _flat(openai, openai[names[event_type]])
            then = branch["then"]
            assert (event_type, set(then["properties"])) == (event_type, properties | IN_PROSE.get(event_type, set()))
            assert (event_type, set(then["required"])) == (event_type, required)
