"""Generate docs/options.md from the option table, so the page and ``pytest --help`` cannot drift.

    python -m pytest_vllm_conformance.plugin.option_docs --write docs
    python -m pytest_vllm_conformance.plugin.option_docs --check docs

A unit test (tests/unit/test_option_docs.py) fails when the committed page is stale.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from pytest_vllm_conformance.catalogue import docs_gen
from pytest_vllm_conformance.connection.settings import MIB
from pytest_vllm_conformance.plugin.option_table import OPTIONS, Option
from pytest_vllm_conformance.plugin.options import FALSE_WORDS, TRUE_WORDS

COMMAND = "python -m pytest_vllm_conformance.plugin.option_docs --write docs"
OPTIONS_REFERENCE = "options.md"


def render_options(options: Iterable[Option] = OPTIONS) -> str:
    yes, no = "/".join(TRUE_WORDS), "/".join(word for word in FALSE_WORDS if word)
    lines = [
        f"<!-- Generated from pytest_vllm_conformance/plugin/option_table.py by `{COMMAND}`; do not edit by hand. -->",
        "",
        "# Options",
        "",
        "Each option is read from the command line, else its environment variable, else the ini file "
        "(`[tool.pytest.ini_options]` in pyproject.toml, `pytest.ini`, ...; the key is the option's name with "
        "underscores), else its default. The report header says which source won for each option that is not at "
        "its default; a secret is shown only as `set`. A repeatable option takes shell words in its environment "
        f"variable and ini key; a flag's variable takes {yes} or {no}. `pytest --help` lists the same options.",
        "",
        "| option | environment | ini key | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for option in options:
        lines.append(
            f"| {_flag(option)} | {f'`{option.env}`' if option.env else ''} | "
            f"{f'`{option.dest}`' if option.has_ini else ''} | {_default(option.default)} | "
            f"{_cell(option.described)} |"
        )
    return "\n".join(lines) + "\n"


def _flag(option: Option) -> str:
    shown = f"`{option.flag} {option.metavar}`" if option.metavar and option.kind != "flag" else f"`{option.flag}`"
    return _cell(shown) + (" (repeatable)" if option.kind == "list" else "")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: Any) -> str:
    if value is None or value == () or value is False:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= MIB and value % MIB == 0:
        return f"{value // MIB} MiB"
    return f"`{value}`"


def main(argv: list[str] | None = None) -> int:
    return docs_gen.sync(
        {OPTIONS_REFERENCE: render_options()},
        argv,
        command=COMMAND,
        about="Render docs/options.md from the option table.",
    )


if __name__ == "__main__":
    sys.exit(main())
