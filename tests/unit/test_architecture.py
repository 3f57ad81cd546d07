"""The house keeps its shape: imports run down the floors, and no room grows into a grab-bag."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pytest_vllm_conformance"
# The package holds the floors the features stand on: connection speaks HTTP; protocol reads vLLM's answers;
# catalogue and reporting hold the contracts and the reports; watermark, the detector, is a tool of its own (its
# console script and the plugin's key rules need one import name); observed composes what a server was observed to
# do; plugin wires it all into pytest. The features themselves are folders of the suites (below), above them all.
FLOORS = {
    "connection": 1,
    "protocol": 2,
    "catalogue": 3,
    "reporting": 3,
    "watermark": 4,
    "observed": 5,
    "plugin": 6,
}
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


def test_every_folder_of_the_package_is_a_room_on_a_floor():
    """A new folder names its floor here, so that the rule above sees its imports."""
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert folders == set(FLOORS), f"folders without a floor: {sorted(folders - set(FLOORS))}"


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


# Each feature is one folder of the suites: suites/<feature>/ holds its contracts.yaml, its test_<feature>.py (the
# tests and their fixtures) and its machinery, plain Python that imports no pytest. A checkout imports the folders
# as `suites.<feature>`, a wheel as `pytest_vllm_conformance.suites.<feature>`: a folder reaches its own modules by
# relative imports and the package by absolute ones, and nothing in the package reaches up into the suites.
SUITES = REPO / "suites"


def feature_folder_crossings(folder: Path) -> list[str]:
    """Each import by which a feature folder reaches past itself into the suites (another folder, or by name)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        depth = len(path.relative_to(folder).parts)  # 1: a module of the folder itself
        where = f"{folder.name}/{path.relative_to(folder)}"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= depth + 1:
                found.append(f"{where}: from {'.' * node.level}{node.module or ''} import ...")
            named = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            named += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for module in named:
                if module.split(".")[0] == "suites" or module.startswith("pytest_vllm_conformance.suites"):
                    found.append(f"{where}: imports {module} by name")
    return found


def test_no_feature_folder_reaches_into_another():
    """Features stand side by side: what two share lives in the package below them (protocol, catalogue, ...)."""
    folders = sorted(path for path in SUITES.iterdir() if path.is_dir())
    found = [line for folder in folders for line in feature_folder_crossings(folder)]
    assert not found, found


def test_the_folder_rule_catches_a_crossing(tmp_path):
    folder = tmp_path / "admission"
    (folder / "inner").mkdir(parents=True)
    (folder / "measure.py").write_text("from . import limits\nfrom ..metrics import scrape\n")
    (folder / "inner" / "deep.py").write_text("from .. import measure\nfrom ...serving import stats\n")
    (folder / "test_admission.py").write_text("import suites.metrics\nfrom pytest_vllm_conformance.suites import x\n")
    assert [line.rsplit(": ", 1)[1] for line in feature_folder_crossings(folder)] == [
        "from ...serving import ...",
        "from ..metrics import ...",
        "imports suites.metrics by name",
        "imports pytest_vllm_conformance.suites by name",
    ]


def test_the_package_never_imports_the_suites():
    reaching = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in PACKAGE.rglob("*.py")
        for module in _imports(path)
        if module.split(".")[0] == "suites" or module.startswith("pytest_vllm_conformance.suites")
    ]
    assert not reaching, reaching


def test_a_feature_folder_is_its_contracts_test_and_plain_machinery():
    """A folder holds its contracts.yaml and its test_<feature>.py; its other modules import no pytest (the test
    module holds the fixtures), and no conftest.py: from an installed wheel a conftest's fixtures leak into
    every folder beside it."""
    wrong = []
    for folder in sorted(path for path in SUITES.iterdir() if (path / "contracts.yaml").is_file()):
        if not (folder / f"test_{folder.name}.py").is_file():
            wrong.append(f"{folder.name}: no test_{folder.name}.py")
        for path in sorted(folder.rglob("*.py")):
            if path.name == "conftest.py":
                wrong.append(f"{path.relative_to(REPO)}: a conftest.py")
            elif not path.name.startswith("test_") and any(m.split(".")[0] == "pytest" for m in _imports(path)):
                wrong.append(f"{path.relative_to(REPO)}: machinery that imports pytest")
    assert not wrong, wrong


def test_no_suite_re_exports_a_name():
    """``from x import name as name`` in a test module is a fixture carried in from elsewhere: define it here."""
    carried = [
        f"{path.relative_to(REPO)}: {alias.name}"
        for path in SUITES.glob("*/test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]
    assert not carried, carried


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
