"""docs/architecture.md's room list, drawn from the code: every room and every module in it, by its docstring.

A room is a folder of the package, the package's top level, the suites and
each feature's folder in them (``suites/<feature>/``: a room of its own), and
each folder of the checkout beside them that holds Python (the harness,
the atlas, the benches, the examples, the tests' own support). A module's line
is the first paragraph of its docstring, so the list changes where the code
does. The list sits between two markers in docs/architecture.md; the rest of
the page is written by hand. ``make lint`` checks it, ``make docs`` writes it.

    python -m tests.support.room_list --write docs
    python -m tests.support.room_list --check docs
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "pytest_vllm_conformance"
DOCUMENT = "architecture.md"
COMMAND = "python -m tests.support.room_list --write docs"
BEGIN = f"<!-- The room list: generated from each module's docstring by `{COMMAND}`; do not edit by hand. -->"
END = "<!-- End of the generated room list. -->"
# Beside the package, in the order the list gives them.
BESIDE = ("suites", "fixtures", "atlas", "bench", "examples", "tests/support")


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line ("" when it has none)."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(docstring.split("\n\n", 1)[0].split())


def rooms(repo: Path = REPO) -> list[tuple[str, list[Path]]]:
    """Each room (its folder, relative to the checkout) with its modules, in the order the list gives them."""
    package = repo / PACKAGE
    folders = sorted([package, *(p for p in package.iterdir() if (p / "__init__.py").is_file())])
    for beside in (repo / name for name in BESIDE):
        if beside.is_dir():
            folders.append(beside)
            if beside.name == "suites":  # each feature's folder right after the suites
                folders += sorted(p for p in beside.iterdir() if (p / "__init__.py").is_file())
    found = []
    for folder in folders:
        inner = {f for f in folders if f != folder and folder in f.parents}
        modules = sorted(
            path
            for path in folder.rglob("*.py")
            if not any(room == path.parent or room in path.parents for room in inner)
            and "__pycache__" not in path.parts
        )
        if modules:
            found.append((str(folder.relative_to(repo)) + "/", modules))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(repo: Path = REPO) -> str:
    lines = [BEGIN, ""]
    for room, modules in rooms(repo):
        init = repo / room / "__init__.py"
        about = summary(init) if init.is_file() else ""
        lines += [f"**`{room}`**" + (f": {_cell(about)}" if about else ""), ""]
        rows = [f"| `{path.relative_to(repo / room)}` | {_cell(summary(path))} |" for path in modules if path != init]
        if rows:
            lines += ["| module | holds |", "|---|---|", *rows, ""]
    return "\n".join([*lines, END])


def with_rooms(page: str, rooms_text: str) -> str:
    """``page`` with the text between the markers replaced by ``rooms_text`` (markers included)."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"docs/{DOCUMENT} has no generated room list (the markers {BEGIN!r} ... {END!r})")
    head, rest = page.split(BEGIN, 1)
    return head + rooms_text + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw docs/architecture.md's room list from the code.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="DIR", type=Path, help="write the list into DIR/architecture.md")
    group.add_argument("--check", metavar="DIR", type=Path, help="exit 1 when DIR/architecture.md's list is stale")
    args = parser.parse_args(argv)
    path = (args.write or args.check) / DOCUMENT
    page = path.read_text(encoding="utf-8")
    current = with_rooms(page, render())
    if args.write:
        path.write_text(current, encoding="utf-8")
        return 0
    if current != page:
        print(f"{path}'s room list is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
