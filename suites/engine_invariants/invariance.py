"""The engine's invariants: a greedy answer does not change with the prefix cache, the batch, or a cancellation.

Users report answers that change with the cache or a busy server (vllm-project/vllm#5543, #22808, #21609).
Each check compares the server's greedy answer to itself, sent as token ids with top-5 logprobs, so the
verdict does not depend on the model. A divergence where the two tokens are nearly tied is undecided, by
the rule every greedy comparison shares (protocol/greedy_answers.py): each side's token in the other side's
top-k and, on both sides, the two logprobs within the gap. Counters and gauges are read from /metrics with
prometheus_client's parser (protocol/prometheus.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.catalogue.applicability import MOST_PREEMPTION_REQUESTS
from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import AsyncBoundedClient, BoundedClient, OpenStream
from pytest_vllm_conformance.protocol import greedy_answers, prometheus
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS
from pytest_vllm_conformance.protocol.greedy_answers import Greedy

ANSWER_TOKENS = 16
# Longer than two KV-cache blocks at every default block size (16 on GPU, up to 128 on CPU), short of 512.
CACHED_PROMPT_TOKENS = 288
BURST_REQUESTS = 6
# The burst's and the cancelled stream's answers: as long as the context lets a prompt of 32 tokens at most
# run (a tiny model decodes 400 tokens in under 0.2 s on two cores), up to 2000.
LONGEST_ANSWER = 2000


def long_answer_tokens(max_model_len: int | None) -> int:
    return min((max_model_len or 512) - 32, LONGEST_ANSWER)


def token_prompt(tokens: int, *, fresh: bool = False) -> list[int]:
    """A prompt of token ids valid in any vocabulary of 300 ids or more; ``fresh``: four random ids first, so
    that no earlier request (of this run or another) left it in the prefix cache."""
    head = [random.randrange(10, 290) for _ in range(4)] if fresh else []
    return head + [10 + (index * 37) % 280 for index in range(tokens - len(head))]


@dataclass(frozen=True)
class Answer(Greedy):
    """A greedy answer, and the prompt tokens the server says it took from its prefix cache."""

    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens, where the server sends it


def greedy_body(model: str, prompt: list[int], max_tokens: int = ANSWER_TOKENS, **fields: Any) -> dict[str, Any]:
    return greedy_answers.greedy_body(model, prompt, max_tokens, **fields)


def read_greedy(status: int, payload: Any, described: str) -> Answer:
    assert status == 200, f"a greedy completion was not served: {described}"
    choice = payload["choices"][0]
    top = greedy_answers.top_logprobs((choice.get("logprobs") or {}).get("top_logprobs") or [])
    details = (payload.get("usage") or {}).get("prompt_tokens_details") or {}
    return Answer(list(choice.get("token_ids") or []), top, details.get("cached_tokens"))


def greedy(client: BoundedClient, model: str, prompt: list[int], **fields: Any) -> Answer:
    response = client.post(COMPLETIONS.path, greedy_body(model, prompt, **fields))
    return read_greedy(response.status, response.json_or_none(), f"{response.describe()} {response.text[:300]!r}")


def metric_names(expect: Expectations) -> dict[str, Any]:
    names: dict[str, Any] = expect.fact("engine_invariant_metrics")
    return names


def read_total(client: BoundedClient, expect: Expectations, family: str) -> tuple[float | None, str]:
    reading = prometheus.read(client, expect.release.metrics_path)
    if reading.exposition is None:
        return None, f"GET {expect.release.metrics_path}: {reading.problem}"
    value = reading.total(family)
    return value, "" if value is not None else f"{expect.release.metrics_path} has no {family}"


def cache_counters(
    client: BoundedClient, expect: Expectations, since: float | None = None
) -> tuple[float, float] | str:
    """(prefix-cache queries, hits) in tokens, once the queries moved past ``since`` (vLLM records a request's
    lookup with its engine step's stats, as its answer leaves), or after a second; why not, when unread."""
    names = metric_names(expect)
    deadline = time.monotonic() + 1.0
    while True:
        reading = prometheus.read(client, expect.release.metrics_path)
        if reading.exposition is None:
            return f"GET {expect.release.metrics_path}: {reading.problem}"
        queries = reading.total(names["prefix_cache_queries"])
        hits = reading.total(names["prefix_cache_hits"])
        if queries is None or hits is None:
            return (
                f"{expect.release.metrics_path} has no {names['prefix_cache_queries']} or {names['prefix_cache_hits']}"
            )
        if since is None or queries > since or time.monotonic() > deadline:
            return queries, hits
        time.sleep(0.05)


def counted_hits(
    client: BoundedClient, expect: Expectations, send: Callable[[], Answer]
) -> tuple[Answer, float | None, str]:
    """``send()``'s answer, and the prefix-cache hits (tokens) the server counted meanwhile, or None and why."""
    before = cache_counters(client, expect)
    answer = send()
    if isinstance(before, str):
        return answer, None, before
    after = cache_counters(client, expect, since=before[0])
    if isinstance(after, str):
        return answer, None, after
    return answer, after[1] - before[1], ""


# ---- batch invariance ---------------------------------------------------------------


def in_a_burst(client: BoundedClient, model: str, prompt: list[int], tokens: int) -> tuple[Answer, int]:
    """The greedy answer sent at once with BURST_REQUESTS streams of other prompts and lengths, each asking
    ``tokens``, and how many of them were still decoding when it came back."""

    async def work(session: AsyncBoundedClient) -> tuple[Answer, int]:
        others = [
            greedy_body(model, token_prompt(8 + 4 * index, fresh=True), tokens, stream=True)
            for index in range(BURST_REQUESTS)
        ]
        opening = asyncio.gather(
            *(session.open_stream("POST", COMPLETIONS.path, json_body=body) for body in others),
            return_exceptions=True,
        )
        response, opened = await asyncio.gather(session.post(COMPLETIONS.path, greedy_body(model, prompt)), opening)
        answered = time.perf_counter()
        streams = [stream for stream in opened if isinstance(stream, OpenStream)]
        overlapping = sum(stream.status == 200 and stream.running_at(answered) for stream in streams)
        await asyncio.gather(*(stream.close() for stream in streams), return_exceptions=True)
        described = f"{response.describe()} {response.text[:300]!r}"
        return read_greedy(response.status, response.json_or_none(), described), overlapping

    return client.run(work)


# ---- cancellation -------------------------------------------------------------------


@dataclass(frozen=True)
class Cancelled:
    level: float | None  # running requests before the stream
    while_streaming: float | None
    after: float | None  # the last reading: at or under the level, or the deadline's
    freed_after: float | None  # seconds from the hang-up to the gauge back at its level; None: never
    ended_by_itself: bool
    problem: str = ""
    # The tokens the engine generated from before the stream to the last reading (vllm:generation_tokens): the
    # whole answer (``ignore_eos``, so only an abort stops it short) means the hang-up never reached the engine.
    generated: float | None = None
    answer_tokens: int = 0


def cancel_mid_stream(
    client: BoundedClient, expect: Expectations, model: str, prompt: list[int], tokens: int
) -> Cancelled:
    """Stream a long greedy answer, read the running gauge while it decodes, hang up, and wait for the gauge back
    at its level; the engine's generated-token counter then says whether the answer was cut short (aborted) or
    generated whole (the hang-up never reached the engine: a relay kept reading)."""
    names = metric_names(expect)
    gauge, counter = names["requests_running"], names["generated_tokens"]
    within = float(expect.declared("engine_invariants", "slot_freed_within_seconds").value)
    reading = prometheus.read(client, expect.release.metrics_path)
    level, generated_before = reading.total(gauge), reading.total(counter)
    if level is None or generated_before is None:
        missing = gauge if level is None else counter
        return Cancelled(
            None, None, None, None, False, reading.problem or f"{expect.release.metrics_path} has no {missing}"
        )

    async def running(session: AsyncBoundedClient) -> tuple[float | None, float | None]:
        page = prometheus.reading_of(await session.get(expect.release.metrics_path))
        return page.total(gauge), page.total(counter)

    async def work(session: AsyncBoundedClient) -> Cancelled:
        body = greedy_body(model, prompt, tokens, stream=True)
        stream = await session.open_stream("POST", COMPLETIONS.path, json_body=body)
        during, _ = await running(session)
        await stream.close()
        ended = stream.ended_at is not None and stream.last_bytes.rstrip().endswith(b"[DONE]")
        hung_up = time.monotonic()
        after, generated = during, None
        while time.monotonic() - hung_up < within:
            after, total = await running(session)
            generated = None if total is None else total - generated_before
            if after is not None and after <= level:
                return Cancelled(level, during, after, time.monotonic() - hung_up, ended, "", generated, tokens)
            await asyncio.sleep(0.1)
        return Cancelled(level, during, after, None, ended, "", generated, tokens)

    return client.run(work)


# ---- preemption ---------------------------------------------------------------------

PREEMPTION_PROMPT_TOKENS = 24


@dataclass(frozen=True)
class KvCache:
    """The tokens the server's KV cache holds (None: not read), and how that was read."""

    tokens: int | None
    described: str


def kv_cache(reading: prometheus.Reading, expect: Expectations) -> KvCache:
    """The cache's capacity from vllm:cache_config_info: its blocks, less the one the pool holds back, by their
    size (fact kv_cache_capacity)."""
    fact = expect.fact("kv_cache_capacity")
    size = prometheus.kv_cache_size(reading, fact)
    if size is None:
        problem = reading.problem or f"no {fact['blocks']} and {fact['block_size']} labels on {fact['info']}"
        return KvCache(None, f"its size unread ({problem})")
    return KvCache(size.tokens, str(size))


def preemption_load(cache: KvCache, request_tokens: int) -> int | None:
    """How many requests of ``request_tokens`` (prompt and answer) to send at once: enough to need twice what the
    cache holds, at least two, at most MOST_PREEMPTION_REQUESTS; the most when its size is unknown; None: a cache
    that holds the most whole."""
    if cache.tokens is None:
        return MOST_PREEMPTION_REQUESTS
    if cache.tokens >= MOST_PREEMPTION_REQUESTS * request_tokens:
        return None
    return min(MOST_PREEMPTION_REQUESTS, max(2, -(-2 * cache.tokens // request_tokens)))


@dataclass(frozen=True)
class Preemption:
    alone: list[Answer]
    together: list[Answer]
    preempted_alone: float | None  # vllm:num_preemptions's rise while the answers were sent one by one
    preempted_together: float | None  # and while they were sent at once; None: the counter was not read
    problem: str = ""


def preemptions(client: BoundedClient, expect: Expectations, since: float | None = None) -> tuple[float | None, str]:
    """vllm:num_preemptions now, once it moved past ``since`` or after a second (vLLM counts an engine step's
    preemptions with its stats); None and why, when unread."""
    deadline = time.monotonic() + 1.0
    while True:
        value, problem = read_total(client, expect, metric_names(expect)["preemptions"])
        if value is None or since is None or value > since or time.monotonic() > deadline:
            return value, problem
        time.sleep(0.05)


def under_preemption(
    client: BoundedClient, expect: Expectations, model: str, prompts: list[list[int]], tokens: int
) -> Preemption:
    """Each prompt's greedy answer of ``tokens`` sent alone, one after another, then all at once, with the
    preemption counter read around each."""
    start, problem = preemptions(client, expect)
    alone = [greedy(client, model, prompt, max_tokens=tokens) for prompt in prompts]
    between, _ = preemptions(client, expect, since=start)

    async def work(session: AsyncBoundedClient) -> list[Answer]:
        bodies = [greedy_body(model, prompt, tokens) for prompt in prompts]
        responses = await asyncio.gather(*(session.post(COMPLETIONS.path, body) for body in bodies))
        return [read_greedy(r.status, r.json_or_none(), f"{r.describe()} {r.text[:300]!r}") for r in responses]

    together = client.run(work)
    end, later_problem = preemptions(client, expect, since=between)
    if start is None or between is None or end is None:
        return Preemption(alone, together, None, None, problem or later_problem)
    return Preemption(alone, together, between - start, end - between)
