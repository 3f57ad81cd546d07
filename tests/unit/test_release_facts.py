"""The typed facts (catalogue/release_facts.py) match the catalogue's facts/ at every version range.

Each ``ReleaseFacts`` property is named after a fact and returns it as its
annotation says; a value of another shape (a key renamed in the YAML, a
status written as a string) would reach a suite typed wrong, so every range
of every such fact is checked against the annotation here.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal, NotRequired, Union, get_args, get_origin, get_type_hints

import pytest

from pytest_vllm_conformance.catalogue import release_facts
from pytest_vllm_conformance.catalogue.contracts import load as load_catalogue
from pytest_vllm_conformance.catalogue.release_facts import ReleaseFacts

TYPED = sorted(name for name, member in inspect.getmembers(ReleaseFacts) if isinstance(member, property))


def problems(value: Any, hint: Any, where: str) -> list[str]:
    """Where ``value`` does not have the type ``hint`` (TypedDict, Literal, unions, dict, list and plain types)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return []
    if origin is NotRequired:
        return problems(value, args[0], where)
    if origin in (Union, types.UnionType):
        if any(not problems(value, option, where) for option in args):
            return []
        return [f"{where}: {value!r} is none of {hint}"]
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {args}"]
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a mapping ({hint.__name__})"]
        fields = get_type_hints(hint, include_extras=True)
        found = [f"{where}: no key {key!r}" for key in hint.__required_keys__ if key not in value]
        found += [f"{where}: unknown key {key!r}" for key in value if key not in fields]
        for key, item in value.items():
            if key in fields:
                found += problems(item, fields[key], f"{where}.{key}")
        return found
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a mapping"]
        return [p for key, item in value.items() for p in problems(item, args[1], f"{where}[{key!r}]")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for index, item in enumerate(value) for p in problems(item, args[0], f"{where}[{index}]")]
    if hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if hint is int and isinstance(value, bool):
        return [f"{where}: {value!r} is a boolean, not an integer"]
    return [] if isinstance(value, hint) else [f"{where}: {value!r} is not a {hint.__name__}"]


@pytest.mark.parametrize("name", TYPED)
def test_every_version_range_has_the_typed_shape(name):
    catalogue = load_catalogue()
    assert name in catalogue.facts, f"ReleaseFacts.{name} names no fact of the catalogue's facts/"
    hint = get_type_hints(getattr(ReleaseFacts, name).fget, vars(release_facts))["return"]
    found = [p for specifier, value in catalogue.facts[name] for p in problems(value, hint, f"{name} ({specifier})")]
    assert not found, "\n".join(found)


def test_the_checker_sees_a_wrong_shape():
    hint = get_type_hints(ReleaseFacts.scale_out_gate.fget, vars(release_facts))["return"]
    assert problems({"gate": "stub", "refusal_status": 403}, hint, "gate") == []
    wrong_type = problems({"gate": "stub", "refusal_status": "403"}, hint, "gate")
    assert wrong_type == ["gate.refusal_status: '403' is not a int"]
    wrong_value = problems({"gate": "open"}, hint, "gate")
    assert wrong_value == ["gate.gate: 'open' is not one of ('none', 'unregistered', 'stub')"]
    assert problems({"refusal_status": 403}, hint, "gate") == ["gate: no key 'gate'"]
    assert problems({"gate": "none", "status": 1}, hint, "gate") == ["gate: unknown key 'status'"]
    assert problems(True, int, "status") == ["status: True is a boolean, not an integer"]


def test_release_reads_the_version_s_fact():
    catalogue = load_catalogue()
    from packaging.version import Version

    from pytest_vllm_conformance.catalogue.expectations import Expectations

    for version in ("0.29.0", "0.32.0"):
        expect = Expectations(catalogue, Version(version), None)
        assert expect.release.scale_out_gate == expect.fact("scale_out_gate")
    assert Expectations(catalogue, Version("0.29.0"), None).release.scale_out_gate["gate"] == "none"
