"""Output paths are written, never replaced: a device stays a device, a link a link, an input an input.

CI runs as root in containers where /dev/null and /dev/stdout are what every later step writes to; replacing one
with a regular file (os.replace does, as root) breaks the steps after. No test here touches a real /dev node: the
devices are made in tmp_path (os.mknod, as root), the pipes are FIFOs there.
"""

from __future__ import annotations

import os
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_vllm_conformance.plugin import cli
from pytest_vllm_conformance.reporting import report_files
from pytest_vllm_conformance.reporting.redaction import Redactor
from tests.unit.test_merge_inputs import SMALL, refusal

QUIET = ("-p", "no:cacheprovider")
A_REPORT = report_files.build(
    report_files.RunInfo(started=datetime(2026, 12, 6, tzinfo=UTC), plugin_version="0"), [], Redactor()
)


def device(where: Path, name: str, minor: int) -> Path:
    """A character device in tmp_path: minor 3 is what /dev/null is, 7 what /dev/full is."""
    path = where / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        with open(path, "w"):
            pass
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc}): not root, or a nodev mount")
    return path


def fifo_reader(path: Path) -> tuple[threading.Thread, list[str]]:
    """A FIFO at ``path`` and a reader that keeps what was written to it (a CI step reading a pipe)."""
    os.mkfifo(path)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(path.read_text()), daemon=True)
    reader.start()
    return reader, got


def test_a_device_is_written_as_it_is_and_has_no_twin(tmp_path):
    null = device(tmp_path, "null", 3)
    assert report_files.write(null, A_REPORT) == (null, None)
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["null"]  # no null.md, no temporary left


def test_a_full_device_is_an_error_and_stays_a_device(tmp_path):
    full = device(tmp_path, "full", 7)
    with pytest.raises(OSError, match="No space left"):
        report_files.write(full, A_REPORT)
    assert stat.S_ISCHR(os.stat(full).st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["full"]


def test_a_fifo_is_written_to_its_reader_and_stays_a_fifo(tmp_path):
    pipe = tmp_path / "pipe.yaml"
    reader, got = fifo_reader(pipe)
    report_files.write(pipe, A_REPORT)
    reader.join(10)
    assert got and "kind: VllmConformanceReport" in got[0]
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
    assert not (tmp_path / "pipe.md").exists()


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "kept").mkdir()
    target = tmp_path / "kept" / "real.yaml"
    target.write_text("old\n")
    link = tmp_path / "report.yaml"
    link.symlink_to(target)
    report_files.write(link, A_REPORT)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "kind: VllmConformanceReport" in target.read_text()
    assert (tmp_path / "report.md").is_file()  # the twin beside the name given
    assert sorted(path.name for path in (tmp_path / "kept").iterdir()) == ["real.yaml"]


def test_a_link_to_a_device_writes_the_device(tmp_path):
    null = device(tmp_path, "null", 3)
    link = tmp_path / "stdout"
    link.symlink_to(null)
    report_files.write(link, A_REPORT)
    assert link.is_symlink() and stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["null", "stdout"]


@pytest.fixture
def guarded_env(monkeypatch):
    for name in ("VLLM_URL", "VLLM_CONFORMANCE_REPORT", "VLLM_CONFORMANCE_PROFILE", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def one_usage_line(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr.str(), result.errlines
    return errors[0]


def test_a_report_path_that_cannot_be_written_stops_the_run_before_any_test(pytester, guarded_env):
    pytester.makepyfile(test_small=SMALL)
    (pytester.path / "folder").mkdir()
    (pytester.path / "a-file").write_text("")
    result = pytester.runpytest(*QUIET, "--vllm-report=folder")
    assert (
        one_usage_line(result) == f"ERROR: --vllm-report {pytester.path / 'folder'}: is a directory: give a file's path"
    )
    result = pytester.runpytest(*QUIET, "--vllm-report=a-file/report.yaml")
    path = pytester.path / "a-file"
    assert one_usage_line(result) == f"ERROR: --vllm-report {path / 'report.yaml'}: {path} is not a directory"
    (pytester.path / "twin.md").mkdir()
    result = pytester.runpytest(*QUIET, "--vllm-report=twin.yaml")
    assert one_usage_line(result) == (
        f"ERROR: --vllm-report {pytester.path / 'twin.yaml'}: its Markdown twin {pytester.path / 'twin.md'} "
        "is a directory: give a file's path"
    )


def test_a_report_path_that_names_another_file_of_the_run_is_refused(pytester, guarded_env):
    pytester.makepyfile(test_small=SMALL)
    profile = pytester.path / "profile.yaml"
    profile.write_text("profile: 1\nname: mine\n")
    kept = profile.read_text()
    result = pytester.runpytest(*QUIET, f"--vllm-profile={profile}", "--vllm-report=./profile.yaml")
    assert one_usage_line(result) == (
        f"ERROR: --vllm-report {profile}: it is also --vllm-profile: the report would overwrite it; give another path"
    )
    assert profile.read_text() == kept
    # A profile the run refuses: the report that names the error is not written over it either.
    profile.write_text("name: mine\n")
    result = pytester.runpytest(*QUIET, f"--vllm-profile={profile}", f"--vllm-report={profile}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "is a required property" in result.stderr.str()
    assert profile.read_text() == "name: mine\n"
    result = pytester.runpytest(*QUIET, "--junitxml=out.md", "--vllm-report=out.yaml")
    assert one_usage_line(result) == (
        f"ERROR: --vllm-report {pytester.path / 'out.yaml'}: its Markdown twin {pytester.path / 'out.md'} is also "
        "--junitxml: the report would overwrite it; give another path"
    )


def test_a_run_reports_to_a_device_and_a_fifo_and_leaves_them_as_they_were(pytester, guarded_env):
    pytester.makepyfile(test_small=SMALL)
    null = device(pytester.path, "null", 3)
    result = pytester.runpytest(*QUIET, f"--vllm-report={null}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert stat.S_ISCHR(os.stat(null).st_mode) and not (pytester.path / "null.md").exists()
    result.stdout.fnmatch_lines([f"report: {null}"])
    pipe = pytester.path / "pipe.yaml"
    reader, got = fifo_reader(pipe)
    pytester.runpytest(*QUIET, f"--vllm-report={pipe}")
    reader.join(10)
    assert got and "kind: VllmConformanceReport" in got[0]
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)


@pytest.fixture
def shard(pytester, guarded_env):
    pytester.makepyfile(test_small=SMALL)
    path = pytester.path / "a.yaml"
    pytester.runpytest(*QUIET, f"--vllm-report={path}", "--junitxml=a.xml")
    return path


def test_a_merge_never_writes_over_one_of_its_inputs(shard, capsys):
    kept = shard.read_bytes()
    assert refusal([shard, "-o", shard], capsys) == (
        f"vllm-conformance merge: refused: -o {shard} is also one of the inputs ({shard}): give the merge another path"
    )
    through_a_link = shard.with_name("link.yaml")
    through_a_link.symlink_to(shard)
    assert refusal([shard, "-o", through_a_link], capsys).startswith(
        f"vllm-conformance merge: refused: -o {through_a_link} is also one of the inputs"
    )
    junit = shard.with_name("a.xml")
    assert refusal([shard, "-o", shard.with_name("m.yaml"), "--junit", junit, "--junit-out", junit], capsys) == (
        f"vllm-conformance merge: refused: --junit-out {junit} is also one of the inputs ({junit}): give the merge "
        "another path"
    )
    assert shard.read_bytes() == kept
    assert not shard.with_name("m.yaml").exists()


def test_a_merge_to_a_device_or_a_link_writes_through_it(shard, capsys):
    null = device(shard.parent, "null", 3)
    assert cli.main(["merge", str(shard), "-o", str(null)]) == 1  # the shard's failed test
    assert capsys.readouterr().out.strip().endswith(f"-> {null}")
    assert stat.S_ISCHR(os.stat(null).st_mode) and not shard.with_name("null.md").exists()
    full = device(shard.parent, "full", 7)
    assert refusal([shard, "-o", full], capsys) == (
        f"vllm-conformance merge: refused: cannot write {full}: No space left on device"
    )
    assert stat.S_ISCHR(os.stat(full).st_mode) and not shard.with_name("full.md").exists()
    target = shard.with_name("merged-target.yaml")
    link = shard.with_name("merged.yaml")
    link.symlink_to(target)
    assert cli.main(["merge", str(shard), "-o", str(link)]) == 1
    assert link.is_symlink() and target.is_file() and "kind: VllmConformanceReport" in target.read_text()
