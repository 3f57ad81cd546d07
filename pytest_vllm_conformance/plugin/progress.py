"""Lines that say a long phase is still going: the embedded server's start, a serving measurement.

A phase quiet for ``EVERY`` seconds says where it is, then again every
``EVERY`` seconds, so that a run is never silent for a minute and a half
(a server's start) or until killed (a workload too big for the time). The
phase calls its ticker often; the ticker decides when a line is due, and a
status given as a callable is built only then (a server's start polls twice
a second, and its status reads the server's log). Lines
go past pytest's capture, as pytest's own live logging writes, and through
the run's redactor like every other line of ours.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

EVERY = 10.0
PREFIX = "vllm-conformance"

Status = str | Callable[[], str]
Ticker = Callable[[Status], None]


def silent(status: Status) -> None:
    """The ticker of a phase nobody watches (a library call, a unit test)."""


class Progress:
    def __init__(
        self,
        write: Callable[[str], None],
        redact: Callable[[str], str] = lambda line: line,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._redact = redact
        self._every = every
        self._clock = clock

    def phase(self, name: str) -> Ticker:
        """A ticker for ``name``: call it with the phase's status whenever it changes or the phase waits."""
        started = self._clock()
        last = started

        def tick(status: Status) -> None:
            nonlocal last
            now = self._clock()
            if now - last < self._every:
                return
            last = now
            said = status() if callable(status) else status
            self._write(self._redact(f"{PREFIX}: {name}: {said} ({now - started:.0f} s so far)"))

        return tick


def terminal_writer(config: Any) -> Callable[[str], None]:
    """Write a whole line to pytest's terminal now, even from inside a test or fixture whose output is captured.

    Where no terminal reporter is registered (an xdist worker's output is not shown; ``-p no:terminal``), nothing
    is written.
    """

    def write(line: str) -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        released = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
        with released:
            terminal.ensure_newline()
            terminal.write_line(line)

    return write
