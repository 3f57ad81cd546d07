"""One lm-eval run against one server, reduced to per-item results.

This is lm-eval's public Python API (``simple_evaluate``) on its own
OpenAI-compatible backends, with ``log_samples`` for the per-item values
the paired gate needs. What the suite adds is only what a gate must fix:
the tokenizer source (never a download), one request at a time (vLLM's
output can change with batch composition), a fixed seed, the context length
the server reports, and the API key passed as a header (never through
``OPENAI_API_KEY``, which lm-eval would otherwise send to any server).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_vllm_conformance.connection.client import BoundedClient, RequestTimeout, TransportFailure
from pytest_vllm_conformance.connection.secrets import Secret

from .offline import require_lm_eval

Backend = Literal["completions", "chat"]
SEED = 1234
DEFAULT_MAX_LENGTH = 2048  # lm-eval's own default, when the server does not say
# Requests in flight per eval run: a server batches them, so an eval set takes about half the time it takes one
# at a time (80 items x 7 runs on both sides of a tiny model on two cores: 39 s -> 22 s), while a canary under
# traffic sees no more than a few extra sequences.
EVAL_CONCURRENCY = 4


class EvalFailed(Exception):
    """lm-eval could not run the task against the server; the message says why."""


@dataclass(frozen=True)
class Endpoint:
    """A server as lm-eval is pointed at it."""

    role: str  # "target" or "baseline", for messages
    base_url: str
    model: str
    api_key: Secret | None = None
    max_model_len: int | None = None
    timeout: float = 300.0
    local_tokenizer: Path | None = None

    def tokenizer_source(self, client: BoundedClient) -> str:
        """``local``, ``tokenizer_info`` or ``tokenize``: see lm_eval_backends."""
        if self.local_tokenizer is not None:
            if not self.local_tokenizer.exists():
                raise EvalFailed(
                    f"--vllm-eval-tokenizer {self.local_tokenizer} does not exist (a local path, never a Hub id)"
                )
            return "local"
        try:
            info = client.get("/tokenizer_info")
        except (TransportFailure, RequestTimeout):
            return "tokenize"
        return "tokenizer_info" if info.status == 200 else "tokenize"


@dataclass(frozen=True)
class MetricResult:
    """One metric (``name,filter`` as lm-eval reports it) and its value on each item."""

    name: str
    higher_is_better: bool
    score: float
    items: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"higher_is_better": self.higher_is_better, "score": self.score, "items": self.items}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> MetricResult:
        return cls(
            name,
            bool(data["higher_is_better"]),
            float(data["score"]),
            {str(k): float(v) for k, v in data["items"].items()},
        )


@dataclass(frozen=True)
class TaskResult:
    task: str
    backend: str
    metrics: dict[str, MetricResult]
    prompt_hashes: dict[str, str] = field(repr=False)
    # Metrics lm-eval aggregates other than by a mean of items (bleu, perplexity): shown, never gated.
    not_comparable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "backend": self.backend,
            "metrics": {name: metric.to_dict() for name, metric in self.metrics.items()},
            "prompt_hashes": self.prompt_hashes,
            "not_comparable": list(self.not_comparable),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskResult:
        return cls(
            task=data["task"],
            backend=data["backend"],
            metrics={name: MetricResult.from_dict(name, metric) for name, metric in data["metrics"].items()},
            prompt_hashes={str(k): str(v) for k, v in data["prompt_hashes"].items()},
            not_comparable=tuple(data.get("not_comparable", ())),
        )


def task_manager(include_paths: Sequence[Path], names: Sequence[str]):
    """lm-eval's TaskManager; its ~20 s index of built-in tasks only when a name is not in ``include_paths``."""
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    paths = [str(path) for path in include_paths]
    if paths:
        manager = TaskManager(include_path=paths, include_defaults=False)
        if all(manager.match_tasks([name]) for name in names):
            return manager
    return TaskManager(include_path=paths or None, include_defaults=True)


def language_model(endpoint: Endpoint, backend: Backend, client: BoundedClient, max_length: int | None = None):
    """lm-eval's backend object for ``endpoint``; ``max_length`` defaults to the server's max_model_len."""
    require_lm_eval()
    from . import lm_eval_backends

    key = endpoint.api_key.reveal() if endpoint.api_key else None
    common: dict[str, Any] = {
        "model": endpoint.model,
        "num_concurrent": EVAL_CONCURRENCY,
        "batch_size": 1,
        "seed": SEED,
        "timeout": int(math.ceil(endpoint.timeout)),
        "max_length": max_length or endpoint.max_model_len or DEFAULT_MAX_LENGTH,
        # An empty header would make lm-eval send OPENAI_API_KEY from the environment to this server.
        "header": {"Authorization": f"Bearer {key}"} if key else {"Accept": "application/json"},
    }
    if backend == "chat":
        return lm_eval_backends.chat(endpoint.base_url, **common)
    source = endpoint.tokenizer_source(client)
    local = str(endpoint.local_tokenizer) if endpoint.local_tokenizer else None
    return lm_eval_backends.completions(endpoint.base_url, source, key, local, **common)


def evaluate(
    lm: Any,
    tasks: Sequence[str],
    manager: Any,
    *,
    backend: Backend,
    limit: int | None = None,
) -> dict[str, TaskResult]:
    """Run ``tasks`` with ``simple_evaluate`` and keep each task's per-item values."""
    require_lm_eval()
    from lm_eval import simple_evaluate

    try:
        results = simple_evaluate(
            model=lm,
            tasks=list(tasks),
            task_manager=manager,
            limit=limit,
            log_samples=True,
            bootstrap_iters=0,  # the gate computes its own paired interval
            apply_chat_template=backend == "chat",
            random_seed=SEED,
            numpy_random_seed=SEED,
            torch_random_seed=None,  # nothing here runs torch; do not import it for a seed
            fewshot_random_seed=SEED,
        )
    except Exception as exc:  # lm-eval raises whatever its backend or task raised
        raise EvalFailed(f"lm-eval could not run {', '.join(tasks)} ({backend}): {type(exc).__name__}: {exc}") from exc
    return {task: _task_result(task, backend, results) for task in results.get("samples", {})}


def _is_mean(aggregation: Any) -> bool:
    name = aggregation if isinstance(aggregation, str) else getattr(aggregation, "__name__", "")
    return name == "mean"


def _aggregations(task: str, results: dict[str, Any]) -> dict[str, Any]:
    from lm_eval.api.registry import get_metric_aggregation

    found = {}
    for entry in (results.get("configs", {}).get(task, {}) or {}).get("metric_list") or []:
        metric = entry.get("metric")
        if isinstance(metric, str):
            found[metric] = entry.get("aggregation") or get_metric_aggregation(metric)
    return found


def _task_result(task: str, backend: str, results: dict[str, Any]) -> TaskResult:
    samples = results["samples"][task]
    directions = results.get("higher_is_better", {}).get(task, {})
    aggregations = _aggregations(task, results)
    reported = results.get("results", {}).get(task, {})
    items: dict[str, dict[str, float]] = {}
    prompt_hashes: dict[str, str] = {}
    not_comparable: set[str] = set()
    for sample in samples:
        item = str(sample["doc_id"])
        prompt_hashes[item] = str(sample.get("prompt_hash", ""))
        for metric in sample.get("metrics", ()):
            name = f"{metric},{sample.get('filter', 'none')}"
            value = sample.get(metric)
            averaged = aggregations.get(metric) is None or _is_mean(aggregations[metric])
            if not averaged or not _is_number(value):
                not_comparable.add(name)
                continue
            items.setdefault(name, {})[item] = float(value)
    metrics = {}
    for name, values in items.items():
        if name in not_comparable:
            continue
        metric = name.split(",", 1)[0]
        score = reported.get(name)
        metrics[name] = MetricResult(
            name=name,
            higher_is_better=bool(directions.get(metric, True)),
            score=float(score) if _is_number(score) else sum(values.values()) / len(values),
            items=values,
        )
    return TaskResult(task, backend, metrics, prompt_hashes, tuple(sorted(not_comparable)))


def _is_number(value: Any) -> bool:
    try:
        return not isinstance(value, (str, bytes, tuple, list, dict)) and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
