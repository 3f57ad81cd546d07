"""The load generator behind one small interface, and its one implementation: a closed asyncio loop.

A closed loop keeps exactly ``concurrency`` requests in flight: each worker
sends its next request when its last one ended, so the server is offered
the declared concurrency and never more (an open loop measures the queue
instead). Each request is a streamed completion of token ids, so its prompt
length is exact on every release, with ``ignore_eos`` so its output length
is the pinned one; the usage chunk says what the server counted. Another
generator fits behind ``LoadGenerator`` as long as it returns the same
per-request timings: the statistics and the verdicts are ours.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_vllm_conformance.connection.client import AsyncBoundedClient, TransportFailure
from pytest_vllm_conformance.protocol import sse
from pytest_vllm_conformance.protocol.error_envelope import error_of


@dataclass(frozen=True)
class Workload:
    """What one round sends: ``requests`` streamed completions, ``concurrency`` at a time."""

    path: str
    model: str
    prompts: tuple[tuple[int, ...], ...]  # one token-id prompt per request, cycled
    output_tokens: int
    concurrency: int
    requests: int
    body: dict[str, Any] = field(default_factory=dict)  # the version's streamed-request fields
    # Where this round's prompts start: each round and side takes prompts no earlier request sent, so none is
    # served from the prefix cache another warmed.
    offset: int = 0

    def request_body(self, index: int) -> dict[str, Any]:
        prompt = self.prompts[(self.offset + index) % len(self.prompts)]
        return {**self.body, "model": self.model, "prompt": list(prompt), "max_tokens": self.output_tokens}


@dataclass
class RequestTiming:
    """One request as the client saw it (``time.perf_counter()`` readings)."""

    started: float
    ended: float = 0.0
    status: int | None = None
    token_times: list[float] = field(default_factory=list)  # when each chunk carrying generated tokens arrived
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    # The generated token ids the chunks delivered (None: no chunk carried token_ids), counted against the usage:
    # a relay that drops events leaves the usage chunk saying what the server sent, not what arrived.
    tokens_received: int | None = None

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.started if self.token_times else None

    @property
    def inter_token(self) -> list[float]:
        return [later - earlier for earlier, later in zip(self.token_times, self.token_times[1:], strict=False)]

    @property
    def time_per_output_token(self) -> float | None:
        """Decode time over the tokens after the first: the first token's arrival to the last's, divided by the
        tokens that came after the first. Not the gaps between events: vLLM and the network fold several tokens
        into one read, so half of those gaps are a few microseconds and the other half hold several tokens."""
        tokens = self.completion_tokens or self.tokens_received
        if len(self.token_times) < 2 or not tokens or tokens < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (tokens - 1)

    @property
    def output_rate(self) -> float | None:
        """Output tokens per second of this request, queueing included (what a caller gets)."""
        seconds = self.ended - self.started
        return self.completion_tokens / seconds if self.completion_tokens and seconds > 0 else None


@dataclass(frozen=True)
class Round:
    """One round's requests, and the wall time of the whole round."""

    timings: tuple[RequestTiming, ...]
    started: float
    ended: float
    # How late the client's own event loop woke, 90th percentile over the round, in seconds (None: not probed): a
    # client starved of CPU stamps arrivals late, and its figures are then its own, not the server's.
    client_lag_p90: float | None = None

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def output_tokens_per_second(self) -> float:
        tokens = sum(t.completion_tokens or 0 for t in self.timings)
        return tokens / self.seconds if self.seconds > 0 else 0.0


class LoadGenerator(Protocol):
    async def run(self, client: AsyncBoundedClient, workload: Workload) -> Round: ...


class SseReader:
    """Reads a stream's events as chunks arrive (the protocol's SSE reader), noting when generated tokens came
    and the usage.

    Only a data event whose choices carry text or token ids is a generated token: an SSE comment, an error
    event or a usage chunk is not (a keep-alive in front of a hung engine must not look like progress).
    """

    def __init__(self, timing: RequestTiming) -> None:
        self.timing = timing
        self.reader = sse.Reader()

    def __call__(self, chunk: bytes) -> None:
        events = [event for event in self.reader.feed(chunk) if not event.done]
        carried_text = False
        for event in events:
            carried_text |= self._read(event)
        if carried_text:
            self.timing.token_times.append(events[0].arrived or time.perf_counter())

    def _read(self, event: sse.Event) -> bool:
        payload = event.payload
        if payload is None and event.data:
            self.timing.error = self.timing.error or f"an event that is not JSON: {event.data[:80]!r}"
            return False
        if not isinstance(payload, dict):
            return False
        if error_of(payload) is not None:
            self.timing.error = self.timing.error or f"an error event: {str(payload['error'])[:160]}"
            return False
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.timing.prompt_tokens = usage.get("prompt_tokens")
            self.timing.completion_tokens = usage.get("completion_tokens")
        choices = [c for c in payload.get("choices") or [] if isinstance(c, dict)]
        for choice in choices:
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self.timing.tokens_received = (self.timing.tokens_received or 0) + len(ids)
        return any(c.get("text") or c.get("token_ids") for c in choices)


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` workers on one bounded client, each sending its next request when the last one ended."""

    async def run(self, client: AsyncBoundedClient, workload: Workload) -> Round:
        queue = iter(range(workload.requests))
        timings: list[RequestTiming] = []

        async def worker() -> None:
            for index in queue:
                timings.append(await _one(client, workload, index))

        started = time.perf_counter()
        lags: list[float] = []
        probe = asyncio.ensure_future(_probe_lag(lags))
        try:
            await asyncio.gather(*(worker() for _ in range(min(workload.concurrency, workload.requests))))
        finally:
            probe.cancel()
        ended = time.perf_counter()
        lags.sort()
        return Round(tuple(timings), started, ended, lags[int(0.9 * (len(lags) - 1))] if lags else None)


LAG_PROBE_EVERY = 0.005


async def _probe_lag(into: list[float]) -> None:
    """How much later than asked the loop wakes a sleeper, every few milliseconds, until cancelled."""
    while True:
        asked = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_EVERY)
        into.append(max(0.0, time.perf_counter() - asked - LAG_PROBE_EVERY))


async def _one(
    client: AsyncBoundedClient, workload: Workload, index: int, timing: RequestTiming | None = None
) -> RequestTiming:
    """One streamed request, timed into ``timing`` (a new one started now by default: an open loop watches its own
    while it runs)."""
    timing = timing or RequestTiming(started=time.perf_counter())
    try:
        response = await client.request(
            "POST", workload.path, json_body=workload.request_body(index), on_chunk=SseReader(timing)
        )
        timing.status = response.status
        if response.status != 200:
            timing.error = f"HTTP {response.status}: {response.text[:160]}"
        elif response.truncated:
            timing.error = f"the answer was cut at the byte cap ({response.size_text})"
    except TransportFailure as exc:  # RequestTimeout is one: an outcome of the load, not an error of the run
        timing.error = str(exc)
    timing.ended = time.perf_counter()
    return timing


def token_prompts(seed_ids: Sequence[int], length: int, count: int) -> tuple[tuple[int, ...], ...]:
    """``count`` prompts of exactly ``length`` token ids, no two opening with the same two ids (while
    ``count`` is at most the seed's distinct ids squared), the rest the seed cycled.

    Different openings keep vLLM's prefix cache from serving one request's prefill to another.
    """
    distinct = list(dict.fromkeys(seed_ids))
    if not distinct:
        raise ValueError("no token ids to build prompts from")
    size = len(distinct)
    prompts = []
    for number in range(count):
        opening = [distinct[number % size], distinct[(number // size) % size]]
        rest = [seed_ids[(number + i) % len(seed_ids)] for i in range(max(length - 2, 0))]
        prompts.append(tuple((opening + rest)[:length]))
    return tuple(prompts)
