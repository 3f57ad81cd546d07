"""Suite runs forked from one warm interpreter instead of started cold.

Our server tests run the real suites about a hundred times, each in a fresh
``python -m pytest`` process: interpreter start-up and importing pytest,
httpx, jsonschema and the OpenAI SDK cost about 0.4 s of every run on a
quiet machine, more than 1.5 s on a loaded one. A warm process (this module run with ``-m``) imports
those libraries once and forks one child per run. The child is a fresh
``pytest.main`` in the run's directory, environment and ``PYTHONPATH``, with
its output in files, exactly as pytester's subprocess run; it only skips the
imports (nothing of the plugin is imported before the fork, so no state of
the plugin is shared between runs).

``VLLM_CONFORMANCE_TEST_COLD_RUNS=1`` runs every suite run in a cold
process, as a user's ``pytest`` would start.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from _pytest.pathlib import make_numbered_dir

COLD_RUNS_ENV = "VLLM_CONFORMANCE_TEST_COLD_RUNS"

# Libraries only: the plugin and the suites are imported by each run itself, and so are
# pytest plugins (pytest_asyncio, xdist, anyio), which pytest must import to rewrite their asserts.
_WARM_IMPORTS = (
    "pytest",
    "_pytest.pytester",
    "_pytest.junitxml",
    "httpx",
    "jsonschema",
    "yaml",
    "openai",
    "numpy",
    # Hypothesis's pytest plugin (installed with our test extra) imports the whole library at every run's terminal
    # summary: 0.7 s a run, a few minutes over the server tests.
    "hypothesis",
)
# httpx imports anyio, a pytest plugin, before the run's pytest can mark it for rewriting: pytest says so
# in a warning that a cold run would not print.
_WARM_WARNING = "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"


class WarmRunner:
    """The test process's side: one warm parent, one run at a time."""

    def __init__(self, repo: Path) -> None:
        self._repo = repo
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.warm_runs"],
                cwd=self._repo,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=_environ_with_path_first(self._repo),
            )
        return self._process

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], stdout: Path, stderr: Path, timeout: float) -> int:
        """Run ``pytest argv`` in a child forked from the warm parent; its exit code.

        Raises TimeoutError (the child killed) after ``timeout`` seconds.
        """
        with self._lock:
            process = self._started()
            assert process.stdin is not None and process.stdout is not None
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(stdout), "stderr": str(stderr)}
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            child = int(json.loads(process.stdout.readline())["pid"])
            if not _readable(process.stdout, timeout):
                os.kill(child, signal.SIGKILL)
                process.stdout.readline()
                raise TimeoutError(f"{timeout} second timeout expired running: pytest {' '.join(argv)}")
            return int(json.loads(process.stdout.readline())["ret"])

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()


def _environ_with_path_first(entry: Path) -> dict[str, str]:
    """This process's environment with ``entry`` first on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(entry), os.environ.get("PYTHONPATH")]))}


_RUNNER: WarmRunner | None = None


def runpytest(pytester: pytest.Pytester, *args: str, timeout: float) -> pytest.RunResult:
    """``pytester.runpytest_subprocess``, forked from the warm parent unless cold runs are asked for."""
    global _RUNNER
    if os.environ.get(COLD_RUNS_ENV):
        return pytester.runpytest_subprocess(*args, timeout=timeout)
    if _RUNNER is None:
        _RUNNER = WarmRunner(Path(__file__).resolve().parents[2])
        atexit.register(_RUNNER.close)
    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    argv = [f"--basetemp={basetemp}", *args]
    cwd = Path.cwd()
    env = _environ_with_path_first(cwd)  # as pytester's subprocess run
    stdout, stderr = pytester.path / "stdout", pytester.path / "stderr"
    print("running (warm): pytest", *argv)
    print("     in:", cwd)
    started = time.monotonic()
    try:
        ret = _RUNNER.run(argv, cwd, env, stdout, stderr, timeout)
    except TimeoutError as exc:
        raise pytester.TimeoutExpired(str(exc)) from None
    out = stdout.read_text(encoding="utf-8", errors="replace").splitlines()
    err = stderr.read_text(encoding="utf-8", errors="replace").splitlines()
    for lines, stream in ((out, sys.stdout), (err, sys.stderr)):
        for line in lines:
            print(line, file=stream)
    try:
        code: int | pytest.ExitCode = pytest.ExitCode(ret)
    except ValueError:
        code = ret
    return pytest.RunResult(code, out, err, time.monotonic() - started)


def _readable(stream: IO[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if select.select([stream], [], [], left)[0]:
            return True
    return False


def _child(request: dict) -> None:
    """In the forked child: become ``python -m pytest ARGV`` run in the request's directory and environment."""
    code = 3
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # As a cold `python -m pytest` would: the run's directory first, then its PYTHONPATH.
        extra = [request["cwd"], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        sys.path[:] = dict.fromkeys([*extra, *sys.path[1:]])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
        argv = ["-W", _WARM_WARNING, *request["argv"]]
        sys.argv = [sys.argv[0], *argv]
        import pytest

        code = int(pytest.main(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # nothing is left to report it to
                pass
        os._exit(code)


def main() -> None:
    import importlib

    for name in _WARM_IMPORTS:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            sys.stdout.flush()
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"ret": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
