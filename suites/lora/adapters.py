"""LoRA adapters judged by their answers: listed on their base, applied, kept apart, loaded and unloaded.

vLLM serves LoRA adapters and fails them silently: an adapter whose modules match no layer loads
"successfully" and applies nothing, logged at DEBUG only (vllm-project/vllm#55193, #34186, #48019), and a
gateway that drops or rewrites ``model`` answers an adapter's requests from the base model. Each check here
compares the server's greedy answers with each other (the adapter's with the base's, at once with alone), so
it holds for whatever model and adapter the server serves. Greedy completions are asked with top-5 logprobs:
two answers that part at a near-tie (each token in the other's top-5, within the gap on both sides) are
undecided, by the rule every greedy comparison shares (protocol/greedy_answers.py). /metrics is read with
Prometheus' parser (protocol/prometheus.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from pytest_vllm_conformance.connection.client import AsyncBoundedClient, BoundedClient, OpenStream
from pytest_vllm_conformance.connection.discovery import ModelCard, model_cards
from pytest_vllm_conformance.protocol import greedy_answers, prometheus
from pytest_vllm_conformance.protocol.generation_routes import COMPLETIONS
from pytest_vllm_conformance.protocol.greedy_answers import Divergence, Greedy, mean_logprob_drift

LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
MODELS_PATH = "/v1/models"
ANSWER_TOKENS = 8
# Plain text any tokenizer reads; four of them, so that an adapter that agrees with its base on one prompt (a
# narrow fine-tune may) is still seen to apply on another.
PROMPTS = (
    "The quick brown fox",
    "Once upon a time, in a kingdom by the sea,",
    "def fibonacci(n):",
    "The three primary colours are",
)
# How long an adapter's stream is held open (while /metrics is read, and while base and adapter requests are sent
# at once), and how often /metrics is read.
IN_FLIGHT_TOKENS = 400
METRICS_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Answer(Greedy):
    """A greedy answer, and the model and prompt that gave it."""

    model: str
    prompt: str


def greedy_body(model: str, prompt: str, max_tokens: int = ANSWER_TOKENS, **fields: Any) -> dict[str, Any]:
    return greedy_answers.greedy_body(model, prompt, max_tokens, **fields)


def read_greedy(model: str, prompt: str, status: int, payload: Any, described: str) -> Answer:
    assert status == 200, f"a greedy completion of {model!r} was not served: {described}"
    choice = payload["choices"][0]
    top = greedy_answers.top_logprobs((choice.get("logprobs") or {}).get("top_logprobs") or [])
    return Answer(list(choice.get("token_ids") or []), top, model, prompt)


def greedy(client: BoundedClient, model: str, prompt: str) -> Answer:
    response = client.post(COMPLETIONS.path, greedy_body(model, prompt))
    return read_greedy(model, prompt, response.status, response.json_or_none(), _described(response))


def _described(response: Any) -> str:
    return f"{response.describe()} {response.text[:300]!r}"


# ---- what /v1/models lists -------------------------------------------------------------


def listed(client: BoundedClient) -> dict[str, ModelCard]:
    response = client.get(MODELS_PATH)
    assert response.status == 200, f"GET {MODELS_PATH}: {_described(response)}"
    return {card.id: card for card in model_cards(response.json_or_none())}


def adapters_served(client: BoundedClient, base: str, declared: list[str] | None) -> list[str]:
    """The adapters the run judges: those the profile declares, then every card whose parent is ``base``."""
    found = [card.id for card in listed(client).values() if card.parent == base and card.id != base]
    return list(dict.fromkeys([*(declared or []), *found]))


def card_problems(cards: dict[str, ModelCard], name: str, base: str, expected_root: str | None = None) -> list[str]:
    """What is wrong with adapter ``name``'s card against the fact lora_model_card (parent: the served model's id;
    root: the path it was loaded from, ``expected_root`` where the caller knows it)."""
    card = cards.get(name)
    if card is None:
        return [f"{name!r} is not listed by {MODELS_PATH} (it lists {sorted(cards)})"]
    problems = []
    if card.parent != base:
        problems.append(f"{name!r} is listed with parent {card.parent!r}, not the served model {base!r}")
    base_card = cards.get(base)
    if not card.root:
        problems.append(f"{name!r} is listed with no root (the path it was loaded from)")
    elif expected_root is not None and card.root != expected_root:
        problems.append(f"{name!r} is listed with root {card.root!r}, not its load path {expected_root!r}")
    elif base_card is not None and card.root == base_card.root:
        problems.append(f"{name!r} is listed with the base model's root {card.root!r}")
    return problems


# ---- answers compared ----------------------------------------------------------------------


def parted(found: Divergence) -> str:
    """Where two answers part, in the words of the LoRA checks."""
    kind = "a near-tie" if found.near_tie else "not a near-tie"
    return (
        f"the answers part at token {found.position} ({kind}): "
        f"{found.window(found.first)} against {found.window(found.second)}"
    )


@dataclass(frozen=True)
class Applied:
    """How an adapter's answers compare with the base's, prompt by prompt."""

    differing_tokens: int  # prompts whose greedy tokens differ
    largest_shift: float | None  # over the prompts whose tokens agree: the largest mean logprob shift
    prompts: int

    def applies(self, min_shift: float) -> bool:
        return self.differing_tokens > 0 or (self.largest_shift is not None and self.largest_shift > min_shift)

    def __str__(self) -> str:
        shift = "no logprobs" if self.largest_shift is None else f"logprobs moved {self.largest_shift:.4f} at most"
        return f"{self.differing_tokens} of {self.prompts} prompts answered other tokens; where the same, {shift}"


def compare_with_base(client: BoundedClient, base: str, adapter: str) -> Applied:
    differing, shifts = 0, []
    for prompt in PROMPTS:
        of_base, of_adapter = greedy(client, base, prompt), greedy(client, adapter, prompt)
        if of_base.token_ids != of_adapter.token_ids:
            differing += 1
        elif (shift := mean_logprob_drift(of_base, of_adapter)) is not None:
            shifts.append(shift)
    return Applied(differing, max(shifts) if shifts else None, len(PROMPTS))


def interleaved(client: BoundedClient, base: str, adapter: str) -> list[tuple[Answer, Answer]]:
    """Each prompt's answer from the base and from the adapter alone, then all of them again at once, the base's
    and the adapter's requests interleaved: (alone, at once) pairs.

    A long stream of the adapter's stays open while they are sent, so every request shares the engine's batch with
    the adapter's, however the machine's load spreads their arrival: a leak across the batch shows every run."""
    alone = [greedy(client, model, prompt) for prompt in PROMPTS for model in (base, adapter)]

    async def together(session: AsyncBoundedClient) -> list[Any]:
        body = greedy_body(adapter, PROMPTS[0], IN_FLIGHT_TOKENS, stream=True, logprobs=None)
        companion = await session.open_stream("POST", COMPLETIONS.path, json_body=body)
        try:
            if companion.status != 200:
                raise AssertionError(f"the adapter's stream held open meanwhile answered {companion.status}")
            calls = (session.request("POST", COMPLETIONS.path, json_body=greedy_body(a.model, a.prompt)) for a in alone)
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await companion.close()

    pairs = []
    for first, response in zip(alone, client.run(together), strict=True):
        if isinstance(response, BaseException):
            raise AssertionError(f"a request of {first.model!r} sent at once failed: {response}")
        payload, described = response.json_or_none(), _described(response)
        pairs.append((first, read_greedy(first.model, first.prompt, response.status, payload, described)))
    return pairs


# ---- runtime load and unload -----------------------------------------------------------------


def fresh_name(prefix: str = "conformance-lora") -> str:
    """A name no deployment uses, so that a check never loads over or unloads a served adapter."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def missing_path() -> str:
    return f"/nonexistent/vllm-conformance/{uuid.uuid4().hex}"


def load(client: BoundedClient, name: str, path: str) -> Any:
    return client.post(LOAD_PATH, {"lora_name": name, "lora_path": path})


def unload(client: BoundedClient, name: str) -> Any:
    return client.post(UNLOAD_PATH, {"lora_name": name})


def completion_status(client: BoundedClient, model: str) -> Any:
    return client.post(COMPLETIONS.path, {"model": model, "prompt": PROMPTS[0], "max_tokens": 1, "temperature": 0})


# ---- the LoRA gauge --------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraGauge:
    """vllm:lora_requests_info as one reading shows it (fact lora_requests_info)."""

    type: str
    samples: list[tuple[dict[str, str], float]]

    def latest(self) -> dict[str, str] | None:
        return max(self.samples, key=lambda sample: sample[1])[0] if self.samples else None


def lora_gauge(reading: prometheus.Reading, fact: dict[str, Any]) -> LoraGauge | None:
    family = reading.exposition.family(fact["name"]) if reading.exposition is not None else None
    if family is None:
        return None
    samples = zip(family.labels, family.values, strict=True)
    return LoraGauge(family.type, [(dict(labels), value) for labels, value in samples])


def names_in(labels: dict[str, str], label: str, separator: str) -> list[str]:
    return [name for name in labels.get(label, "").split(separator) if name]


@dataclass(frozen=True)
class InFlight:
    """What the gauge's latest sample said while an adapter's stream was open."""

    seen: dict[str, str] | None  # the first latest sample naming the adapter; None: never
    last: dict[str, str] | None
    readings: int
    problem: str = ""


def gauge_while_streaming(client: BoundedClient, adapter: str, fact: dict[str, Any], seconds: float) -> InFlight:
    """Opens a long greedy stream of ``adapter`` and reads /metrics until its latest LoRA sample names the adapter
    as running or waiting, the stream ends, or ``seconds`` pass."""
    separator = fact["separator"]

    async def work(session: AsyncBoundedClient) -> InFlight:
        body = greedy_body(adapter, PROMPTS[0], IN_FLIGHT_TOKENS, stream=True, logprobs=None)
        stream = await session.open_stream("POST", COMPLETIONS.path, json_body=body)
        last, readings = None, 0
        try:
            if stream.status != 200:
                return InFlight(None, None, 0, f"the adapter's stream answered {stream.status}")
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and _open(stream):
                page = await session.request("GET", "/metrics")
                readings += 1
                gauge = lora_gauge(prometheus.reading_of(page), fact)
                last = gauge.latest() if gauge is not None else None
                if last is not None and adapter in (
                    names_in(last, fact["running_label"], separator) + names_in(last, fact["waiting_label"], separator)
                ):
                    return InFlight(last, last, readings)
                await asyncio.sleep(METRICS_POLL_SECONDS)
            return InFlight(None, last, readings, "" if _open(stream) else "the stream ended first")
        finally:
            await stream.close()

    return client.run(work)


def _open(stream: OpenStream) -> bool:
    return stream.ended_at is None
