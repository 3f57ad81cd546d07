"""What a vLLM server's log says last when its engine fails: its last error lines, cut to be read.

Shared by more than one feature (discovery names the engine's error when the
first token fails; the startup_log feature reads the same logs), so it lives
on this floor rather than in either feature's folder.
"""

from __future__ import annotations

import re
from pathlib import Path

# What an engine that died or cannot run says last: the exception vLLM logs as the engine core goes down.
_ERROR_LINE = re.compile(r"\b(ERROR|Error|Exception|Traceback|EngineDeadError|AttributeError|RuntimeError)\b")
LAST_ERRORS = 3


def last_errors(path: Path, *, tail_bytes: int = 1 << 20) -> list[str]:
    """The log's last few error lines (from its last MiB), each cut to one readable line; [] when unreadable."""
    try:
        with path.open("rb") as stream:
            stream.seek(max(path.stat().st_size - tail_bytes, 0))
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return []
    found = [line.strip() for line in text.splitlines() if _ERROR_LINE.search(line)]
    return [line if len(line) <= 300 else line[:297] + "..." for line in found[-LAST_ERRORS:]]
