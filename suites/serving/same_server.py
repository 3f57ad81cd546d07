"""Whether a live serving baseline is the target itself: the same URL, or the same server under another name.

A target compared with itself passes the throughput contract whatever it
is, so such a baseline is refused unless ``--vllm-baseline-is-target`` says
it is meant (a noise check). The same URL is caught by spelling; another
name for the same server (a second host name, an address, a port forward)
by what the server counts: a few one-token requests sent to the target
show in the baseline's own count of finished requests. A baseline busy
with traffic of its own could show as many by chance, so where both pages
export the process's start time and it differs, they are two servers.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.protocol import prometheus as metrics

from .loadgen import Workload

PROBES = 3
# prometheus_client's process collector (Linux): when the server's process started, in seconds since the epoch.
START_TIME = "process_start_time_seconds"


def same_url(a: str, b: str) -> bool:
    """The same scheme, host, port and path, spelled alike (default ports and a trailing slash aside)."""

    def key(url: str) -> tuple[str, str, int | None, str]:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
        return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")

    return key(a) == key(b)


def counted_by_both(grew: float | None, sent: int, starts: Sequence[float | None]) -> bool:
    """The baseline's finished count grew by every probe sent to the target, and no start time tells them apart."""
    if grew is None or grew < sent:
        return False
    first, second = starts
    return first is None or second is None or first == second


def same_server(
    target: BoundedClient, baseline: BoundedClient, workload: Workload, *, metrics_path: str, counter: str
) -> bool:
    """Send ``PROBES`` one-token requests to the target; did the baseline count them as its own?"""
    before = metrics.read(baseline, metrics_path)
    counted = before.total(counter)
    if counted is None:
        return False  # the baseline exports no count to tell by: judged as another server
    for index in range(PROBES):
        target.answer_or_none("POST", workload.path, json_body={**workload.request_body(index), "max_tokens": 1})
    after = metrics.read(baseline, metrics_path)
    grown = after.total(counter)
    starts = (metrics.read(target, metrics_path).total(START_TIME), after.total(START_TIME))
    return counted_by_both(None if grown is None else grown - counted, PROBES, starts)
