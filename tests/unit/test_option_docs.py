"""docs/options.md is generated from plugin/option_table.py and must stay in step with it."""

from pathlib import Path

from pytest_vllm_conformance.plugin import option_docs
from pytest_vllm_conformance.plugin.option_table import OPTIONS, Option

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / option_docs.OPTIONS_REFERENCE


def test_committed_options_page_matches_the_option_table():
    assert COMMITTED.is_file(), f"missing {COMMITTED}: run `{option_docs.COMMAND}`"
    assert COMMITTED.read_text(encoding="utf-8") == option_docs.render_options(), (
        f"{COMMITTED} is stale: plugin/option_table.py changed. Regenerate it with `{option_docs.COMMAND}`"
    )


def test_every_option_has_a_row_with_its_variable_and_ini_key():
    rows = [line for line in option_docs.render_options().splitlines() if line.startswith("| `--")]
    assert len(rows) == len(OPTIONS)
    for option, row in zip(OPTIONS, rows, strict=True):
        assert row.startswith(f"| `{option.flag}"), (option.flag, row)
        if option.env:
            assert f"`{option.env}`" in row
        assert (f"`{option.dest}`" in row) == option.has_ini


def test_rows_show_kinds_defaults_and_pipes():
    page = option_docs.render_options(
        (
            Option("vllm-x", "A | B.", kind="choice", default="a", choices=("a", "b"), env="X", metavar="a|b"),
            Option("vllm-y", "Many.", kind="list", default=(), env="Y", metavar="ARG"),
            Option("vllm-z", "Bytes.", kind="int", default=2 * 1024 * 1024, metavar="N", maximum=8),
            Option("vllm-go", "Act and exit.", kind="flag", default=False),
        )
    )
    assert "| `--vllm-x a\\|b` | `X` | `vllm_x` | `a` | A \\| B. |" in page
    assert "| `--vllm-y ARG` (repeatable) | `Y` | `vllm_y` |  | Many. |" in page
    assert "| `--vllm-z N` |  | `vllm_z` | 2 MiB | Bytes. (at least 1, at most 8) |" in page
    assert "| `--vllm-go` |  |  |  | Act and exit. |" in page


def test_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    (tmp_path / option_docs.OPTIONS_REFERENCE).write_text("old\n")
    assert option_docs.main(["--check", str(tmp_path)]) == 1
    assert f"{tmp_path / option_docs.OPTIONS_REFERENCE} is stale" in capsys.readouterr().err
    assert option_docs.main(["--write", str(tmp_path)]) == 0
    assert option_docs.main(["--check", str(tmp_path)]) == 0
