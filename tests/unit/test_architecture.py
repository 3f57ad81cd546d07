"""The house keeps its shape: imports run down the floors, and no room grows into a grab-bag."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pytest_vllm_conformance"
# connection speaks HTTP; protocol reads vLLM's answers; catalogue and reporting hold the contracts and the reports;
# features are side by side on one floor; profiles compose their observations; plugin wires it all into pytest.
FLOORS = {"connection": 1, "protocol": 2, "catalogue": 3, "reporting": 3, "features": 4, "profiles": 5, "plugin": 6}
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


def _module_of(path: Path) -> str:
    return "pytest_vllm_conformance." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def feature_room(module: str) -> str | None:
    """The feature room a module is in or names: ``features/X.py`` or the folder ``features/X/``."""
    parts = module.split(".")
    if len(parts) > 2 and parts[:2] == ["pytest_vllm_conformance", "features"] and parts[2] != "__init__":
        return parts[2]
    return None


def crossings(imports_by_module: dict[str, list[str]]) -> list[str]:
    """Each import by which one feature room reaches into another."""
    found = []
    for module, imported in imports_by_module.items():
        room = feature_room(module)
        for target in imported:
            other = feature_room(target)
            if room is not None and other is not None and other != room:
                found.append(f"{module} imports {target}")
    return found


def test_no_feature_room_imports_another():
    """Features stand side by side: what two share lives on a floor below them (protocol, catalogue, reporting)."""
    imports = {_module_of(path): _imports(path) for path in (PACKAGE / "features").rglob("*.py")}
    assert not crossings(imports), crossings(imports)


def test_the_side_by_side_rule_catches_a_crossing():
    """The rule holds for module rooms and folder rooms, by either import form, and not within one room."""
    found = crossings(
        {
            "pytest_vllm_conformance.features.serving.stats": ["pytest_vllm_conformance.features.admission"],
            "pytest_vllm_conformance.features.admission": [
                "pytest_vllm_conformance.features",
                "pytest_vllm_conformance.features.metrics",  # from pytest_vllm_conformance.features import metrics
            ],
            "pytest_vllm_conformance.features.quality.assemble": [
                "pytest_vllm_conformance.features.quality.session",
                "pytest_vllm_conformance.protocol.live_baseline",
            ],
        }
    )
    assert found == [
        "pytest_vllm_conformance.features.serving.stats imports pytest_vllm_conformance.features.admission",
        "pytest_vllm_conformance.features.admission imports pytest_vllm_conformance.features.metrics",
    ]


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


# A suite is its contracts: module-level code that is not a test (fixtures, helpers, constants) belongs in
# its feature room. 30 lines is the share of a new suite; the suites listed still hold more, and may only
# shrink (lower the number when they do).
HELPER_LINES = 30
HELPER_LINES_STILL_OVER: dict[str, int] = {}


def helper_lines(path: Path) -> int:
    """Lines of a suite's top-level code other than its docstring, imports and test functions (decorators included)."""
    body = ast.parse(path.read_text()).body
    counted = 0
    for index, node in enumerate(body):
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            continue
        start = min([node.lineno] + [decorator.lineno for decorator in getattr(node, "decorator_list", [])])
        counted += (node.end_lineno or node.lineno) - start + 1
    return counted


def test_every_suite_is_its_contracts():
    over = {}
    for path in sorted((REPO / "suites").glob("test_*.py")):
        share = HELPER_LINES_STILL_OVER.get(path.name, HELPER_LINES)
        if (lines := helper_lines(path)) > share:
            over[path.name] = f"{lines} helper lines, its share is {share}"
    assert not over, f"machinery in suites (move it into the feature room): {over}"


def test_the_suites_still_over_their_share_are_real():
    """A suite that shrank below its listed number lowers it; one gone or under 30 leaves the list."""
    stale = {}
    for name, share in HELPER_LINES_STILL_OVER.items():
        path = REPO / "suites" / name
        lines = helper_lines(path) if path.exists() else 0
        if lines < share or lines <= HELPER_LINES:
            stale[name] = f"listed at {share}, holds {lines}"
    assert not stale, f"lower or remove these entries of HELPER_LINES_STILL_OVER: {stale}"


# One name, one module: a reader who greps for `fleet.py` finds the one it means.
def _shared_names() -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    return {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_of_the_package_share_a_name():
    shared = _shared_names()
    assert not shared, f"modules of one name (rename one after what it holds): {shared}"


def test_the_room_list_is_drawn_from_the_code():
    from tests.support import room_list

    page = (REPO / "docs" / room_list.DOCUMENT).read_text(encoding="utf-8")
    assert room_list.with_rooms(page, room_list.render()) == page, (
        f"docs/{room_list.DOCUMENT}'s room list is stale: regenerate it with `{room_list.COMMAND}`"
    )


def test_a_new_module_shows_in_the_room_list(tmp_path):
    from tests.support import room_list

    room = tmp_path / "pytest_vllm_conformance" / "connection"
    room.mkdir(parents=True)
    (room.parent / "__init__.py").write_text('"""The package."""\n')
    (room / "__init__.py").write_text('"""Reaching the server."""\n')
    (room / "client.py").write_text('"""The one client.\n\nMore."""\n')
    before = room_list.render(tmp_path)
    assert "**`pytest_vllm_conformance/connection/`**: Reaching the server." in before
    assert "| `client.py` | The one client. |" in before
    (room / "transport.py").write_text('"""How bytes reach us."""\n')
    assert "| `transport.py` | How bytes reach us. |" in room_list.render(tmp_path)
