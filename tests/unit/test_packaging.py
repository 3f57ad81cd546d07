"""The wheel carries the suites, the contract data and the entry points,
so a pip install without a clone can gate a server; an editable install
(``pip install -e .``, the Makefile's) runs the checkout's ``suites/`` in place."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(out.glob("pytest_vllm_conformance-*.whl"))


def test_wheel_holds_suites_data_and_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        entry_text = archive.read(entry_points).decode()
    for needed in (
        "pytest_vllm_conformance/suites/__init__.py",
        "pytest_vllm_conformance/suites/scale_out/test_scale_out.py",
        "pytest_vllm_conformance/suites/scale_out/contracts.yaml",
        "pytest_vllm_conformance/catalogue/catalogue.yaml",
        "pytest_vllm_conformance/catalogue/declarations.yaml",
        "pytest_vllm_conformance/suites/auth/contracts.yaml",
        "pytest_vllm_conformance/catalogue/facts/api_server.yaml",
        "pytest_vllm_conformance/catalogue/route_tables.yaml",
        "pytest_vllm_conformance/catalogue/profile.schema.json",
        "pytest_vllm_conformance/connection/vllm_cli.py",
        "pytest_vllm_conformance/suites/preflight/deprecations.yaml",
        "pytest_vllm_conformance/suites/quality/tasks/short_answer.jsonl",
        "pytest_vllm_conformance/protocol/schemas/chat_chunk.json",
        "pytest_vllm_conformance/protocol/schemas/common.json",
    ):
        assert needed in names
    assert "[pytest11]\nvllm_conformance = pytest_vllm_conformance.plugin.hooks" in entry_text
    assert "vllm-conformance = pytest_vllm_conformance.plugin.cli:main" in entry_text
    assert "vllm-conformance-watermark = pytest_vllm_conformance.watermark.__main__:main" in entry_text
    assert not any(name.startswith(("tests/", "fixtures/")) for name in names)


def test_every_tracked_file_of_the_package_and_the_suites_is_in_the_wheel(wheel):
    """A file git tracks but the wheel leaves out (an ignore rule that hits a room, a data file outside the
    build's reach) breaks the installed plugin where the clone works."""
    tracked = subprocess.run(
        ["git", "ls-files", "pytest_vllm_conformance", "suites"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout: nothing to compare the wheel with")
    expected = {
        name if name.startswith("pytest_vllm_conformance/") else f"pytest_vllm_conformance/{name}" for name in tracked
    }
    with zipfile.ZipFile(wheel) as archive:
        missing = sorted(expected - set(archive.namelist()))
    assert not missing, f"tracked but not in the wheel: {missing}"


COLLECT = ("--collect-only", "-q", "-p", "no:cacheprovider")


def _unpacked(wheel: Path, tmp_path: Path) -> Path:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def _pytest_from_wheel(site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pytest --pyargs pytest_vllm_conformance.suites --collect-only`` with the unpacked wheel alone on the path."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    command = [sys.executable, "-m", "pytest", "--pyargs", "pytest_vllm_conformance.suites", *COLLECT]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_installed_suites_collect_from_the_wheel_alone(wheel, tmp_path):
    run = _pytest_from_wheel(_unpacked(wheel, tmp_path), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    # Collected from the wheel's copy (paths relative to the run folder), not the clone.
    assert "site/pytest_vllm_conformance/suites/scale_out/test_scale_out.py::test_enabled_routes_served" in run.stdout
    # A plain run from the wheel warns of nothing (pytest-asyncio's loop scope, assertion rewriting).
    assert "Warning" not in run.stdout + run.stderr


def _command(args: list[str], site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``vllm-conformance ARGS`` as its console script runs it: the package imported first, then pytest."""
    script = "import sys; from pytest_vllm_conformance.plugin.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_command_from_the_wheel_names_merge_first_and_warns_of_nothing(wheel, tmp_path):
    site = _unpacked(wheel, tmp_path)
    helped = _command(["--help"], site, tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: vllm-conformance ")
    assert "\nsubcommands:\n  merge " in helped.stdout.split("usage: pytest")[0]
    collected = _command(["--collect-only", "-q"], site, tmp_path)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "Warning" not in collected.stdout + collected.stderr


@pytest.fixture(scope="module")
def editable(tmp_path_factory) -> Path:
    """A fresh venv with ``pip install -e`` of this checkout; its dependencies come from the running venv."""
    where = tmp_path_factory.mktemp("editable") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", "-e", str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return where


def test_an_editable_install_runs_the_checkout_s_suites(editable, tmp_path):
    """No import hook: the command finds the checkout's suites/ by path, as it finds the wheel's in the package."""
    deps = next(Path(path) for path in sys.path if path.endswith("site-packages"))
    env = {**os.environ, "PYTHONPATH": str(deps)}
    run = subprocess.run(
        [str(editable / "bin" / "vllm-conformance"), "--collect-only", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "suites/scale_out/test_scale_out.py::test_enabled_routes_served" in run.stdout
    listed = subprocess.run(
        [str(editable / "bin" / "vllm-conformance"), "--vllm-list-contracts"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0 and "discovery.version_parses" in listed.stdout, listed.stdout + listed.stderr


def _collected(run: subprocess.CompletedProcess[str]) -> set[str]:
    """The test ids a ``--collect-only -q`` run printed, from the suites folder down (``auth/test_auth.py::...``)."""
    assert run.returncode == 0, run.stdout + run.stderr
    return {line.split("suites/", 1)[1] for line in run.stdout.splitlines() if "suites/" in line and "::" in line}


def test_the_clone_the_command_and_the_wheel_run_the_same_tests(wheel, tmp_path):
    """``pytest suites`` in a clone, ``vllm-conformance`` and ``pytest --pyargs`` from the wheel: one set of tests."""
    site = _unpacked(wheel, tmp_path)
    clone = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", *COLLECT], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    tests = _collected(clone)
    assert len(tests) > 150
    assert _collected(_pytest_from_wheel(site, tmp_path)) == tests
    assert _collected(_command(list(COLLECT), site, tmp_path)) == tests
