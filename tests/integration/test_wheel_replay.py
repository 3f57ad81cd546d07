"""Issue 52's rows replayed from the installed wheel in a clean venv, as a new user meets them (opt-in).

``make test-wheel`` builds the wheel, installs it with its dependencies (and nothing of ours) in a venv of its
own, and points ``VLLM_CONFORMANCE_WHEEL_BIN`` at that venv's ``bin``: every command here runs from there, in a
folder with no clone in sight. The rows that need no server run here; a server's rows (an interrupted run, the
embedded server's start) are proved by the server tests. Run as root where CI runs as root: a device or a link
in /dev must survive every output option.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

WHEEL_BIN_ENV = "VLLM_CONFORMANCE_WHEEL_BIN"
BIN = os.environ.get(WHEEL_BIN_ENV)
KEY = "sk-replayed-from-a-secret-file-77"
UNREACHABLE = "http://127.0.0.1:9"

pytestmark = [
    pytest.mark.wheel_replay,
    pytest.mark.servers(),
    pytest.mark.skipif(not BIN, reason=f"opt-in: make test-wheel (sets {WHEEL_BIN_ENV} to a clean venv's bin)"),
]


def run(folder: Path, *args: str, key: str | None = None, program: str = "vllm-conformance") -> tuple[int, str]:
    """A console script of the clean venv, in ``folder``, with no variable of ours but ``key`` as VLLM_API_KEY."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("VLLM_", "PYTEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    if key is not None:
        env["VLLM_API_KEY"] = key
    done = subprocess.run(
        [str(Path(BIN or "") / program), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=180
    )
    return done.returncode, done.stdout + done.stderr


def test_the_wheel_is_what_runs(tmp_path):
    status, said = run(tmp_path, "-c", "import pytest_vllm_conformance as p; print(p.__file__)", program="python")
    assert status == 0 and "site-packages" in said, said


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_a_key_from_a_secret_file_is_stripped_and_never_shown(tmp_path, ending):
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", "--vllm-report=r.yaml", key=KEY + ending)
    assert status == 4, said  # refused: nothing listens there
    for where in (said, (tmp_path / "r.yaml").read_text(), (tmp_path / "r.md").read_text()):
        assert KEY not in where and "Illegal header" not in where


def test_a_key_with_a_character_no_header_carries_is_one_line_without_the_key(tmp_path):
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", key=KEY[:10] + "\u00e9" + KEY[10:])
    assert status == 4 and "INTERNALERROR" not in said and KEY[:10] not in said, said
    assert "VLLM_API_KEY" in said


def test_dev_null_as_the_report_stays_a_device(tmp_path):
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", "--vllm-report=/dev/null")
    assert status == 4, said
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and not Path("/dev/null.md").exists()


def test_the_merge_never_writes_over_an_input_a_device_or_a_link(tmp_path):
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", "--vllm-report=a.yaml")
    assert status == 4 and (tmp_path / "a.yaml").exists(), said
    shard = (tmp_path / "a.yaml").read_bytes()
    status, said = run(tmp_path, "merge", "a.yaml", "-o", "a.yaml")
    assert status == 2 and "is also one of the inputs" in said, said
    assert (tmp_path / "a.yaml").read_bytes() == shard
    (tmp_path / "out").symlink_to("/dev/null")
    status, said = run(tmp_path, "merge", "a.yaml", "-o", "out")
    assert (tmp_path / "out").is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode), said


def test_a_selection_naming_nothing_real_is_refused(tmp_path):
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", "-m", "scale_ot or discovery")
    assert status == 4 and "scale_ot" in said, said


def test_one_url_twice_in_a_fleet_file_is_refused(tmp_path):
    (tmp_path / "fleet.yaml").write_text(
        f"replicas:\n  - url: {UNREACHABLE}\n    name: a\n  - url: {UNREACHABLE}/\n    name: b\n"
    )
    status, said = run(tmp_path, "--vllm-fleet-file=fleet.yaml")
    assert status == 4 and "INTERNALERROR" not in said and "twice" in said, said


@pytest.mark.parametrize(
    ("args", "said_part"),
    [
        (("--vllm-ca-bundle=garbage.pem",), "--vllm-ca-bundle"),
        (("--vllm-client-cert=missing.pem",), "missing.pem"),
        (("--vllm-url=http://user:pw@127.0.0.1:9",), "--vllm-url"),
        (("--vllm-serve=no-such-folder",), "no-such-folder does not exist"),
    ],
)
def test_transport_and_serve_settings_are_one_line(tmp_path, args, said_part):
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    status, said = run(tmp_path, *args)
    assert status == 4 and "INTERNALERROR" not in said and "Traceback" not in said, said
    assert said_part in said and "user:pw" not in said


def test_a_workload_a_run_could_never_send_is_refused_with_the_profile(tmp_path):
    (tmp_path / "p.yaml").write_text("profile: 1\nname: huge\nserving:\n  concurrency: 2\n  requests: 1000000000000\n")
    status, said = run(tmp_path, f"--vllm-url={UNREACHABLE}", "--vllm-profile=p.yaml")
    assert status == 4 and "serving.requests" in said, said


def test_a_guest_s_run_is_untouched_by_the_installed_plugin(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    (tmp_path / "test_skipped.py").write_text("import pytest\npytest.importorskip('no_such_module')\n")
    with_plugin = run(tmp_path, "-ra", "-p", "no:cacheprovider", program="pytest")
    without = run(tmp_path, "-ra", "-p", "no:cacheprovider", "-p", "no:vllm_conformance", program="pytest")
    assert with_plugin[0] == without[0] == 0, with_plugin[1]
    assert _without_times(with_plugin[1]) == _without_times(without[1])


def _without_times(output: str) -> list[str]:
    return [line for line in output.splitlines() if " in " not in line and not line.startswith(("rootdir", "plugins"))]
