"""One server, several pytest-xdist workers: a test that needs the server to itself gets it.

An admission burst fills the server's queue on purpose; any other request
in flight then (another worker's context check, say) is refused with 503,
and would also change what the burst measures. So every test that talks
to the server holds a shared lock for its whole run (setup, call and
teardown), and a burst holds the lock exclusively. The lock is writer
first: once a burst waits for it, no new test starts until it is done
(a turnstile taken before the shared lock), so a burst is never starved.

The locks are ``flock`` on two files in a directory the controlling
process makes and hands to its workers. A run without workers has no
concurrency and no lock.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows; there each worker runs unlocked
    fcntl = None  # type: ignore[assignment]


class RunLock:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory if fcntl is not None else None

    @contextlib.contextmanager
    def _locked(self, name: str, mode: int) -> Iterator[None]:
        assert self.directory is not None
        descriptor = os.open(self.directory / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, mode)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        descriptor = os.open(self.directory / "server", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            with self._locked("turnstile", fcntl.LOCK_EX):
                fcntl.flock(descriptor, fcntl.LOCK_SH)
            yield
        finally:
            os.close(descriptor)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        with self._locked("turnstile", fcntl.LOCK_EX), self._locked("server", fcntl.LOCK_EX):
            yield
