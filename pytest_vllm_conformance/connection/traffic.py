"""How many answers the server gave while one check ran.

Every client of the run (ours, async or not, and the OpenAI SDK through its
capped transport) counts an answer here when its status line arrives. The
plugin reads the count around a test's call: a check that received no answer
and recorded no evidence of its own judged nothing, and cannot pass.

One count per process: pytest runs one test at a time in a process, and
pytest-xdist workers are processes of their own. A lock, because our sync
client runs its requests on a thread of its own.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_answers = 0


def answered() -> None:
    """One answer (any status) reached a client of the run."""
    global _answers
    with _lock:
        _answers += 1


def answers_so_far() -> int:
    """A running total: a check's count is the difference across its call."""
    with _lock:
        return _answers
