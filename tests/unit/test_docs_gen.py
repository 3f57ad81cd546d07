"""docs/profile-reference.md is generated from profile.schema.json and must stay in step with it."""

from pathlib import Path

from pytest_vllm_conformance.catalogue import docs_gen
from pytest_vllm_conformance.catalogue.serving_profile import schema

DOCS = Path(__file__).resolve().parents[2] / "docs"
REFERENCE = DOCS / docs_gen.PROFILE_REFERENCE


def test_committed_profile_reference_matches_the_schema():
    assert REFERENCE.is_file(), f"missing {REFERENCE}: run `{docs_gen.COMMAND}`"
    assert REFERENCE.read_text(encoding="utf-8") == docs_gen.render_profile_reference(), (
        f"{REFERENCE} is stale: the schema changed. Regenerate it with `{docs_gen.COMMAND}`"
    )


def test_committed_contracts_reference_matches_the_catalogue():
    """docs/contracts.md and --vllm-list-contracts come from the same catalogue: a stale doc fails here."""
    committed = DOCS / docs_gen.CONTRACTS_REFERENCE
    assert committed.is_file(), f"missing {committed}: run `{docs_gen.COMMAND}`"
    assert committed.read_text(encoding="utf-8") == docs_gen.render_contracts(), (
        f"{committed} is stale: the catalogue changed. Regenerate it with `{docs_gen.COMMAND}`"
    )


def test_every_contract_and_condition_is_in_the_contracts_reference():
    from pytest_vllm_conformance.catalogue import contracts

    text = docs_gen.render_contracts()
    catalogue = contracts.load()
    for contract in catalogue.contracts.values():
        assert f"`{contract.id}`" in text
        for condition in contract.conditions:
            assert str(condition) in text, (contract.id, condition)


def test_every_schema_field_has_a_row():
    reference = docs_gen.render_profile_reference()

    def fields(node):
        for name, child in node.get("properties", {}).items():
            yield name
            yield from fields(child)
            if isinstance(child.get("items"), dict):
                yield from fields(child["items"])

    for name in fields(schema()):
        assert f"| `{name}` |" in reference, name


def test_reference_renders_kinds_of_values():
    document = {
        "title": "t",
        "type": "object",
        "required": ["a"],
        "additionalProperties": False,
        "$defs": {"mode": {"enum": ["on", "off"], "description": "A mode."}},
        "properties": {
            "a": {"const": 1, "description": "pipe | in text"},
            "b": {"$ref": "#/$defs/mode"},
            "c": {"type": ["integer", "null"], "minimum": 2, "default": 3},
            "d": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "e": {"type": "object", "properties": {"f": {"type": "boolean"}}},
        },
    }
    reference = docs_gen.render_profile_reference(document)
    assert "| `a` | exactly `1` | yes | pipe \\| in text |" in reference
    assert "| `b` | one of `on`, `off` | no | A mode. |" in reference
    assert "| `c` | integer, at least 2, or null (default `3`) | no |  |" in reference
    assert "| `d` | list of string, no repeats | no |  |" in reference
    assert "## `e`" in reference and "| `f` | `true` or `false` | no |  |" in reference


def test_check_mode_fails_on_a_stale_file(tmp_path, capsys):
    (tmp_path / docs_gen.CONTRACTS_REFERENCE).write_text("old\n")
    assert docs_gen.main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert (
        f"{tmp_path / docs_gen.CONTRACTS_REFERENCE} is stale" in err and docs_gen.PROFILE_REFERENCE in err
    )  # missing too
    assert docs_gen.main(["--write", str(tmp_path)]) == 0
    assert docs_gen.main(["--check", str(tmp_path)]) == 0
