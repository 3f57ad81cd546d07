"""The start of a server the plugin started, as its clocks show it: judged, never measured here.

The launcher times the start as it happens (``launcher.StartClocks``: /health
first 200, /v1/models first listing the model, a first greedy token, in
seconds from the spawn); these judges only read what it recorded, so they
need nothing of the server and may run at any time of the run, before the
drain stops it.
"""

from __future__ import annotations

from pytest_vllm_conformance.catalogue.cases import CaseContext, Named
from pytest_vllm_conformance.connection.launcher import CLOCKS, StartClocks

NOT_TIMED = (
    "the run started no server, so no start was timed (a server given by URL: its start-up log's phases are the "
    "startup_log suite's)"
)
# The starts of a run, in order: the second (--vllm-serve-second-start) has the first's caches warm.
FIRST, SECOND = "first", "second"


def starts(ctx: CaseContext) -> list[Named]:
    """The starts the run makes (cases of the clocks' checks): the first, and with --vllm-serve-second-start the
    second, each reported apart."""
    return [Named(FIRST), *([Named(SECOND)] if ctx.settings.serve_second_start else [])]


def clocks_of(start: Named, clocks: tuple[StartClocks, ...]) -> StartClocks | None:
    """The clocks of ``start`` among the run's, or None when it made no such start."""
    index = [FIRST, SECOND].index(start.name)
    return clocks[index] if index < len(clocks) else None


def faults(clocks: StartClocks) -> list[str]:
    """Each sign of readiness the server did not reach as a ready server must, named."""
    return [f"{CLOCKS[name]}: {why}" for name, why in clocks.faults.items()]


def unread(clocks: StartClocks) -> list[str]:
    """Each clock not read for a reason that is not the server's fault (a refusal), named."""
    return [f"{CLOCKS[name]}: {why}" for name, why in clocks.unread.items()]


def objective_missed(clocks: StartClocks, seconds: float, basis: str) -> str | None:
    """Why the start missed the declared objective (endpoint readiness within ``seconds``); None when it kept it."""
    ready = clocks.endpoint_ready
    if ready is not None and ready <= seconds:
        return None
    took = f"took {ready:.2f} s" if ready is not None else "was never reached"
    return (
        f"endpoint readiness (/v1/models listing the model) {took}, past lifecycle.ready_within_seconds "
        f"{seconds:g} s ({basis}); {clocks.line()}"
    )
