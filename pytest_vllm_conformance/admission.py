"""A bounded burst of concurrent requests, sorted by how the server answered.

With ``--max-num-queued-reqs N`` vLLM (0.29+) refuses a request with 503
before any work starts once N requests are unfinished; without it the
server queues every request and answers all of them, late. The burst is
sent at once, so the refusals are answered while the admitted requests
are still generating, and their latency is the time to refuse.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .client import Response


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample: one of its values, never interpolated."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Burst:
    outcomes: tuple[Response | Exception, ...]
    rejection_status: int
    # The version's rejection counter on /metrics just before the burst (None: not exported).
    counted_before: float | None = None

    @property
    def size(self) -> int:
        return len(self.outcomes)

    @property
    def answered(self) -> list[Response]:
        return [o for o in self.outcomes if isinstance(o, Response)]

    @property
    def served(self) -> list[Response]:
        return [r for r in self.answered if 200 <= r.status < 300]

    @property
    def rejected(self) -> list[Response]:
        return [r for r in self.answered if r.status == self.rejection_status]

    @property
    def other(self) -> list[Response]:
        return [r for r in self.answered if r not in self.served and r not in self.rejected]

    @property
    def unanswered(self) -> list[Exception]:
        return [o for o in self.outcomes if isinstance(o, Exception)]

    def rejection_seconds(self) -> list[float]:
        return [r.elapsed for r in self.rejected]

    def summary(self) -> str:
        parts = [f"{len(self.served)} served", f"{len(self.rejected)} refused with {self.rejection_status}"]
        if self.other:
            parts.append(f"{len(self.other)} other ({', '.join(sorted({str(r.status) for r in self.other}))})")
        if self.unanswered:
            parts.append(f"{len(self.unanswered)} unanswered ({self.unanswered[0]})")
        return f"a burst of {self.size} concurrent requests: " + ", ".join(parts)
