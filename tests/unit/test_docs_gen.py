"""docs/profile-reference.md is generated from profile.schema.json and must stay in step with it."""

from pathlib import Path

from pytest_vllm_conformance.catalogue import docs_gen
from pytest_vllm_conformance.catalogue.serving_profile import schema

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "profile-reference.md"


def test_committed_profile_reference_matches_the_schema():
    assert REFERENCE.is_file(), f"missing {REFERENCE}: run `{docs_gen.COMMAND}`"
    assert REFERENCE.read_text(encoding="utf-8") == docs_gen.render_profile_reference(), (
        f"{REFERENCE} is stale: the schema changed. Regenerate it with `{docs_gen.COMMAND}`"
    )


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
    stale = tmp_path / "profile-reference.md"
    stale.write_text("old\n")
    assert docs_gen.main(["--check", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert docs_gen.main(["--write", str(stale)]) == 0
    assert docs_gen.main(["--check", str(stale)]) == 0
