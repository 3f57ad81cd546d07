"""fleet_entry.reaches_every_replica's reading of a replica's counter, on stand-in clients (the real proof:
tests/integration/test_fleet_on_real_vllm.py)."""

import httpx

from pytest_vllm_conformance.connection.client import Response
from suites.fleet_entry.entry_requests import burst_reaches

COUNTER = "vllm:request_success"


def _answer(path: str, status: int, text: str = "") -> Response:
    return Response("GET", path, status, httpx.Headers(), text.encode(), len(text), False, 0.001)


class Replica:
    """A replica's /metrics page whose counter grows by ``per_read`` on each read."""

    def __init__(self, page: str | None, per_read: int = 0) -> None:
        self.page, self.per_read, self.reads = page, per_read, 0

    def answer_or_none(self, method, path, **_):
        if self.page is None:
            return _answer(path, 404, "Not Found")
        value = self.reads * self.per_read
        self.reads += 1
        return _answer(path, 200, self.page.format(value=value))


class Entry:
    def __init__(self, status: int = 200) -> None:
        self.status, self.sessions = status, set()

    def post(self, path, body, headers):
        self.sessions.add(headers["X-Session-Affinity"])
        return Response("POST", path, self.status, httpx.Headers(), b"{}", 2, False, 0.001)


# As prometheus_client writes a counter (the family vllm:request_success, its series with _total).
PAGE = (
    "# HELP vllm:request_success_total Count of successfully processed requests.\n"
    "# TYPE vllm:request_success_total counter\n"
    'vllm:request_success_total{{finished_reason="length"}} {value}\n'
    'vllm:request_success_total{{finished_reason="stop"}} 3.0\n'
)


def _reach(replica, entry=None):
    return burst_reaches(entry or Entry(), replica, "m", metrics_path="/metrics", counter=COUNTER, requests=8)


def test_a_replica_whose_counter_grows_was_reached_and_each_request_is_its_own_session():
    entry = Entry()
    reach = _reach(Replica(PAGE, per_read=5), entry)
    assert (reach.sent, reach.answered, reach.served) == (8, 8, 5)
    assert len(entry.sessions) == 8


def test_a_replica_whose_counter_stays_was_not_reached():
    reach = _reach(Replica(PAGE))
    assert reach.served == 0 and reach.before == 3.0


def test_a_replica_without_the_counter_cannot_be_judged():
    reach = _reach(Replica("# TYPE other counter\nother_total 1.0\n"))
    assert reach.served is None and f"has no {COUNTER}" in reach.problem
    reach = _reach(Replica(None))
    assert reach.served is None and "-> 404" in reach.problem
