"""A serving run: warm-up discarded, then rounds on the target (and the baseline, interleaved), gauges sampled.

The target's rounds are sampled on its own ``/metrics`` (running and
waiting requests, KV-cache usage) while they run, so occupancy is judged
separately from throughput. With an ingress in front, one more round goes
straight to the server, so the latency the ingress adds is measured in the
same run rather than guessed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_vllm_conformance.connection.client import AsyncBoundedClient, BoundedClient, TransportFailure
from pytest_vllm_conformance.protocol import prometheus as metrics
from pytest_vllm_conformance.protocol.tokenize import TokenizeUnavailable, token_ids

from .loadgen import (
    LoadGenerator,
    RequestTiming,
    Round,
    SseReader,
    Workload,
    token_prompts,
)

SAMPLE_EVERY = 0.1
# Distinct prompts per workload: each round of each side takes the next ones (Workload.offset).
PROMPTS = 4096


@dataclass(frozen=True)
class Gauges:
    """One reading of the server's gauges during the load (None: not exported, or the page was unreadable)."""

    running: float | None
    waiting: float | None
    kv_cache_usage: float | None


@dataclass
class ServingRun:
    target: list[Round] = field(default_factory=list)
    baseline: list[Round] = field(default_factory=list)
    direct: list[Round] = field(default_factory=list)  # straight to the server, with an ingress in front
    warm_up: list[RequestTiming] = field(default_factory=list)
    gauges: list[Gauges] = field(default_factory=list)
    baseline_gauges: list[Gauges] = field(default_factory=list)
    direct_gauges: list[Gauges] = field(default_factory=list)  # the server's, while the direct rounds ran

    def requests(self, side: str) -> list[RequestTiming]:
        return [t for r in getattr(self, side) for t in r.timings]

    def so_far(self) -> str:
        """Where the measurement stands, for a progress line."""
        said = [f"{len(self.target)} round(s) on the target"]
        if self.baseline:
            said.append(f"{len(self.baseline)} on the baseline")
        load = sum(r.seconds for r in self.target + self.baseline + self.direct)
        return ", ".join(said) + f", {load:.0f} s of load"


def _gauges(server: BoundedClient, path: str, names: Sequence[str]) -> Gauges:
    reading = metrics.read(server, path)
    return Gauges(*(reading.total(name) for name in names))


def _sampled_round(
    generator: LoadGenerator,
    client: BoundedClient,
    workload: Workload,
    server: BoundedClient,
    metrics_path: str,
    gauge_names: Sequence[str],
    into: list[Gauges],
) -> Round:
    """One round on ``client``'s loop while another thread reads the server's gauges (its own client and loop)."""
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            into.append(_gauges(server, metrics_path, gauge_names))
            done.wait(SAMPLE_EVERY)

    sampler = threading.Thread(target=sample, name="vllm-conformance-gauges", daemon=True)
    sampler.start()
    try:
        return _round(generator, client, workload)
    finally:
        done.set()
        sampler.join()


def measure(
    generator: LoadGenerator,
    *,
    target: BoundedClient,
    target_workload: Workload,
    server: BoundedClient,
    baseline: BoundedClient | None,
    baseline_workload: Workload | None,
    direct: BoundedClient | None,
    rounds: int,
    warm_up_requests: int,
    metrics_path: str,
    gauge_names: Sequence[str],
    enough: Callable[[ServingRun], bool] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ServingRun:
    """Warm up each side, then rounds interleaved target, baseline, baseline, target... until ``enough(run)``
    says so after a pair (by default: after ``rounds`` of them). Through an ingress, ``rounds`` more rounds go
    straight to the server, one after each of the first pairs. ``progress`` is told after each round."""
    run = ServingRun()
    sides: list[tuple[BoundedClient, Workload]] = [(target, target_workload)]
    if baseline is not None and baseline_workload is not None:
        sides.append((baseline, baseline_workload))
    if direct is not None:
        sides.append((direct, target_workload))
    taken = 0

    def fresh(workload: Workload, requests: int | None = None) -> Workload:
        nonlocal taken
        count = workload.requests if requests is None else requests
        taken += count
        return replace(workload, requests=count, offset=taken - count)

    for client, workload in sides:
        if warm_up_requests:
            warmed = _round(generator, client, fresh(workload, warm_up_requests)).timings
            if client is target:  # the target's warm-up counts for load success; every side's is discarded
                run.warm_up += warmed
    enough = enough or (lambda measured: len(measured.target) >= rounds)
    # The gauges are read on clients of their own (the loaded ones are busy), on both sides alike: a scrape
    # costs the server time, so a side sampled alone would be the slower one.
    with server.twin() as reader, (baseline or server).twin() as baseline_reader:
        number = 0
        while True:
            target_round = (target, fresh(target_workload), reader, run.gauges, run.target)
            pairs = [target_round]
            if baseline is not None and baseline_workload is not None:
                pairs.append((baseline, fresh(baseline_workload), baseline_reader, run.baseline_gauges, run.baseline))
            # A, B then B, A: neither side always follows the other's load.
            for client, workload, gauges_from, gauges, rounds_of in pairs if number % 2 == 0 else pairs[::-1]:
                rounds_of.append(
                    _sampled_round(generator, client, workload, gauges_from, metrics_path, gauge_names, gauges)
                )
                if progress is not None:
                    progress(run.so_far())
            if direct is not None and len(run.direct) < rounds:
                run.direct.append(
                    _sampled_round(
                        generator, direct, target_workload, reader, metrics_path, gauge_names, run.direct_gauges
                    )
                )
            number += 1
            if enough(run):
                return run


def _round(generator: LoadGenerator, client: BoundedClient, workload: Workload) -> Round:
    return client.run(lambda c: generator.run(c, workload))


class NoPrompt(Exception):
    """/tokenize gave no token ids to build the prompts from."""


def plan(
    client: BoundedClient,
    model: str,
    *,
    request: dict[str, Any],
    seed: dict[str, Any],
    prompt_tokens: int,
    output_tokens: int,
    concurrency: int,
    requests: int,
) -> Workload:
    """The workload for ``model`` on this server: prompts of exactly ``prompt_tokens`` of its own token ids."""
    try:
        ids = token_ids(client, model, prompt=seed["text"], add_special_tokens=False)
    except TokenizeUnavailable as exc:
        raise NoPrompt(f"no token ids to build the prompts from: {exc}") from None
    prompts = token_prompts(ids, prompt_tokens, PROMPTS)
    return Workload(request["path"], model, prompts, output_tokens, concurrency, requests, dict(request["body"]))


@dataclass(frozen=True)
class Progress:
    health_status: int | None
    first_token_seconds: float | None  # None: no generated token within the bound
    detail: str = ""


def progress_while_healthy(client: BoundedClient, health_path: str, workload: Workload, within: float) -> Progress:
    """Ask /health, then stream one request: how long its first generated token took, if it came within ``within``.

    Progress is a data event whose choices carry text or token ids: a first byte that is an SSE comment (a
    keep-alive), an error event or an empty chunk is not, so a relay that answers at once in front of a hung
    engine does not pass for one that generates.
    """
    health = client.answer_or_none("GET", health_path)
    status = health.status if health is not None else None

    async def first_token(c: AsyncBoundedClient) -> Progress:
        timing = RequestTiming(started=time.perf_counter())
        reader = SseReader(timing)
        arrived = bytearray()

        def on_chunk(chunk: bytes) -> None:
            arrived.extend(chunk[: max(0, 160 - len(arrived))])
            reader(chunk)

        try:
            answer = await c.request(
                "POST",
                workload.path,
                json_body=workload.request_body(0),
                timeout=within,
                on_chunk=on_chunk,
                enough=lambda _: bool(timing.token_times),  # hang up at the first token: the engine stops
            )
        except TransportFailure as exc:  # RequestTimeout is one
            what = f"; what arrived meanwhile: {bytes(arrived)!r}" if arrived else ""
            return Progress(status, None, f"{exc}{what}")
        if timing.ttft is None:
            why = timing.error or "the stream ended with no event carrying generated tokens"
            return Progress(status, None, f"HTTP {answer.status}: {why}; first bytes {bytes(arrived)!r}")
        return Progress(status, timing.ttft)

    return client.run(first_token)
