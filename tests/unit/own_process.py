"""A fixtures server run as its own process (``python -m fixtures.X``), as CI and the benches start one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Started:
    process: subprocess.Popen[str]
    port: int
    stderr: str = ""  # what the process wrote there, once it is stopped


@contextmanager
def listening(module: str, *args: str) -> Iterator[Started]:
    """``python -m module args``, which must print ``LISTENING <port>`` as its first line; stopped with SIGTERM
    when the block ends (killed if it has not ended 5 s later)."""
    with subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            word, port = process.stdout.readline().split()
            assert word == "LISTENING"
            started = Started(process, int(port))
            yield started
        finally:
            process.terminate()
            try:
                _, stderr = process.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                _, stderr = process.communicate(timeout=5)
        started.stderr = stderr
