"""The house keeps its shape: imports run down the floors, and no room grows into a grab-bag."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pytest_vllm_conformance"
FLOORS = {"connection": 1, "catalogue": 2, "reporting": 2, "features": 3, "plugin": 4}
MAX_LINES = 500


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "pytest_vllm_conformance" and parts[1] in FLOORS else None


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def test_no_room_imports_a_higher_floor():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        room = _room("pytest_vllm_conformance." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if room is None:
            continue
        for module in _imports(path):
            target = _room(module)
            if target is not None and FLOORS[target] > FLOORS[room]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert not upward, upward


def test_no_python_file_of_the_repository_is_a_grab_bag():
    """The package, the suites, our tests, fixtures and benches alike: a file past the limit holds two concerns."""
    long = {
        str(path.relative_to(REPO)): n
        for folder in ("pytest_vllm_conformance", "suites", "tests", "fixtures", "bench", "atlas")
        for path in (REPO / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_no_any_hides_a_cycle():
    """A parameter typed Any named like a room's object (state, facts, settings) is a cycle dodged, not a type."""
    dodges = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg) and node.arg in {"state", "facts", "settings", "catalogue", "expect"}:
                if isinstance(node.annotation, ast.Name) and node.annotation.id == "Any":
                    dodges.append(f"{path.relative_to(PACKAGE)}: {node.arg}: Any")
    assert not dodges, dodges
