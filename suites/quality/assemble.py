"""A quality run assembled from the options: the target, the baseline they name, the gate.

The baseline is a live server (``--vllm-baseline-url``) or a recording
(``--vllm-eval-baseline-file``); a recording is refused in one line when
the target tokenizes differently or serves another model than recorded.
The suite's fixture opens the run with ``suite_run``; ``NOT_COMPARED`` and
``NOT_ANSWERED`` sort a comparison's exceptions into a skip and a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.catalogue.expectations import Expectations
from pytest_vllm_conformance.connection.client import BoundedClient
from pytest_vllm_conformance.connection.discovery import ServerFacts
from pytest_vllm_conformance.connection.live_baseline import BaselineUnusable, client_key, connect_baseline
from pytest_vllm_conformance.connection.settings import Settings

from . import (
    baseline_file,
    generated,
    greedy,
    logprob_drift,
    long_context,
)
from .baseline_file import BaselineFile, BaselineFileError
from .runner import Endpoint, EvalFailed
from .session import (
    DriftFailed,
    NoBaseline,
    NotComparable,
    QualityRun,
    ServerSide,
)


def check_greedy(greedy_tokens: int, min_compared_tokens: int) -> None:
    most = len(greedy.PROMPT_TEXTS) * greedy_tokens
    if min_compared_tokens > most:
        raise ValueError(
            f"the quality greedy_min_compared_tokens {min_compared_tokens} can never be met: "
            f"{len(greedy.PROMPT_TEXTS)} prompts x greedy_tokens {greedy_tokens} compare at most {most}"
        )


def check_gate(tolerance: float, confidence: float) -> None:
    if not 0.5 < confidence < 1:
        raise ValueError(f"the quality confidence must be between 0.5 and 1, not {confidence}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"the quality tolerance must be at least 0 and below 1, not {tolerance}")


def check_power(max_detectable_drop: float | None, eval_items: int, long_context_items: int = 1) -> None:
    if max_detectable_drop is not None and not 0 < max_detectable_drop < 1:
        raise ValueError(f"the quality max_detectable_drop must be between 0 and 1, not {max_detectable_drop}")
    if not 1 <= eval_items <= generated.MAX_ITEMS:
        raise ValueError(f"the quality eval_items must be 1 to {generated.MAX_ITEMS}, not {eval_items}")
    if not 1 <= long_context_items <= long_context.MAX_ITEMS_PER_LENGTH:
        raise ValueError(
            f"the quality long_context_items must be 1 to {long_context.MAX_ITEMS_PER_LENGTH}, not {long_context_items}"
        )


def side_for(settings: Settings, role: str, client: BoundedClient, facts: ServerFacts) -> ServerSide:
    endpoint = Endpoint(
        role=role,
        base_url=client.base_url.rstrip("/"),
        model=facts.model,
        api_key=client_key(settings, role),
        max_model_len=facts.max_model_len,
        timeout=settings.timeout,
        local_tokenizer=settings.eval_tokenizer,
    )
    return ServerSide(endpoint, client, facts)


# Text whose token ids tell tokenizers apart: words, digits, code, accents, JSON.
TOKENIZER_PROBE = 'Tokenizer probe: naïve café, 1969 → 2026; def f(x): return {"k": [1, 2.5]}'


def tokenizer_probe(client: BoundedClient, model: str) -> list[int] | None:
    """The probe's token ids on this server; None where /tokenize does not answer (nothing is then checked)."""
    try:
        return greedy.prompt_ids(client, model, (TOKENIZER_PROBE,))[0]
    except greedy.GreedyUnavailable:
        return None


def open_baseline(
    settings: Settings, target_facts: ServerFacts, probe: list[int] | None
) -> ServerSide | BaselineFile | None:
    """--vllm-baseline-url first (the same requests, the same run), else --vllm-eval-baseline-file, else None."""
    if settings.baseline_url:
        live = connect_baseline(settings, target_facts)
        return side_for(settings, "baseline", live.client, live.facts)
    if settings.eval_baseline_file:
        try:
            recording = BaselineFile.load(settings.eval_baseline_file)
        except BaselineFileError as exc:
            raise BaselineUnusable(f"--vllm-eval-baseline-file: {exc}") from None
        refused = baseline_file.refusal(recording, target_facts.model, probe, settings.baseline_model)
        if refused:
            raise BaselineUnusable(f"--vllm-eval-baseline-file {refused}")
        return recording
    return None


class RunNotSafe(ValueError):
    """The options ask for what this run's layout cannot do safely."""


def open_declared_run(
    settings: Settings,
    expect: Expectations,
    target_facts: ServerFacts,
    target_client: BoundedClient,
    run_dir: Path,
    *,
    spread_over_workers: bool,
) -> QualityRun:
    """The run the quality suite shares: the target, the baseline the options name, the gate; each setting from its
    option, else the profile, else its default, checked before a baseline connection is opened."""
    if settings.eval_save and spread_over_workers:
        raise RunNotSafe(
            "--vllm-eval-save under pytest-xdist needs the quality tests on one worker: add --dist loadfile"
        )

    def setting(option: Any, name: str, key: str) -> Any:
        return expect.setting(option, name, "quality", key).value

    tolerance = setting(settings.eval_tolerance, "--vllm-eval-tolerance", "tolerance")
    confidence = setting(settings.eval_confidence, "--vllm-eval-confidence", "confidence")
    greedy_tokens = expect.declared("quality", "greedy_tokens").value
    near_tie_gap = expect.declared("quality", "near_tie_gap").value
    greedy_min_compared_tokens = expect.declared("quality", "greedy_min_compared_tokens").value
    drift_thresholds = logprob_drift.Thresholds.from_profile(expect.declared("quality", "logprob_drift").value)
    max_detectable_drop = setting(
        settings.eval_max_detectable_drop, "--vllm-eval-max-detectable-drop", "max_detectable_drop"
    )
    eval_items = setting(settings.eval_items, "--vllm-eval-items", "eval_items")
    long_context_items = setting(
        settings.eval_long_context_items, "--vllm-eval-long-context-items", "long_context_items"
    )
    check_gate(tolerance, confidence)  # before a baseline connection is opened
    check_greedy(greedy_tokens, greedy_min_compared_tokens)
    check_power(max_detectable_drop, eval_items, long_context_items)
    recorded = settings.eval_save or settings.eval_baseline_file
    probe = tokenizer_probe(target_client, target_facts.model) if recorded else None
    run = QualityRun(
        side_for(settings, "target", target_client, target_facts),
        open_baseline(settings, target_facts, probe),
        run_dir=run_dir,
        tolerance=tolerance,
        confidence=confidence,
        greedy_tokens=greedy_tokens,
        near_tie_gap=near_tie_gap,
        greedy_min_compared_tokens=greedy_min_compared_tokens,
        drift_thresholds=drift_thresholds,
        limit=settings.eval_limit,
        include_paths=[Path(path) for path in settings.eval_include_path],
        save_path=settings.eval_save,
        max_detectable_drop=max_detectable_drop,
        eval_items=eval_items,
        long_context_items=long_context_items,
    )
    if probe is not None:
        run.recording.server["tokenizer_probe"] = probe
    return run


class QualityRunRefused(Exception):
    """The run could not be opened as the options ask (its baseline unusable, a setting never met), or not saved."""


@contextmanager
def suite_run(
    settings: Settings,
    expect: Expectations,
    target_facts: ServerFacts,
    target_client: BoundedClient,
    run_dir: Path,
    *,
    spread_over_workers: bool,
) -> Iterator[QualityRun]:
    """The run the suite's tests share, closed and saved (``--vllm-eval-save``) after the last of them."""
    try:
        run = open_declared_run(
            settings, expect, target_facts, target_client, run_dir, spread_over_workers=spread_over_workers
        )
    except (BaselineUnusable, ValueError) as exc:
        raise QualityRunRefused(str(exc)) from None
    yield run
    run.close()
    try:
        run.save()
    except OSError as exc:
        raise QualityRunRefused(f"cannot write --vllm-eval-save {settings.eval_save}: {exc.strerror or exc}") from None


# A comparison that cannot be made (no baseline, nothing comparable) is skipped; one a server could not answer fails.
NOT_COMPARED = (NoBaseline, NotComparable)
NOT_ANSWERED = (EvalFailed, greedy.GreedyUnavailable, DriftFailed)
