"""One quality run: the target, its baseline, and the comparisons the suite asserts on.

The baseline is a second live server (``--vllm-baseline-url``: the old
version or config, asked the same requests in the same run, which is the
stronger comparison) or a file a previous run saved (``--vllm-eval-baseline-file``).
Each side's lm-eval runs are made once and shared by the tests: each shipped
set (short answers on each backend, multiple choice, the four long-context
lengths together) in one ``simple_evaluate`` call per server, each user task
in its own, so a run selected with ``-k`` evaluates only what it asserts.

The folder: ``runner`` drives lm-eval's own API backends (``lm_eval_backends``) offline
(``offline``) over tasks shipped in ``tasks/`` (``task_files``) or generated
to a context length (``long_context``); ``greedy`` compares temperature-0
tokens; ``paired`` is the statistics; ``baseline_file`` stores a run;
this module ties one run together for the suite. lm-eval is imported only
when an eval runs, so the plugin works without the ``quality`` extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_vllm_conformance.connection.client import BoundedClient, display_url
from pytest_vllm_conformance.connection.discovery import ServerFacts

from . import (
    greedy,
    logprob_drift,
    long_context,
    paired,
    task_files,
)
from .baseline_file import (
    BaselineFile,
    DriftRecording,
    run_key,
)
from .results import (  # re-exported: the suite reads them as session.X
    DriftFailed,
    DriftScores,
    GreedyOutcome,
    NoBaseline,
    NotComparable,
    Outcome,
)
from .runner import (
    Backend,
    Endpoint,
    TaskResult,
    evaluate,
    language_model,
    task_manager,
)

__all__ = ["DriftFailed", "DriftScores", "GreedyOutcome", "NoBaseline", "NotComparable", "Outcome", "QualityRun"]

LONG_CONTEXT_PERCENTS = (25, 50, 90, 100)
NO_BASELINE = (
    "no baseline to compare with: give --vllm-baseline-url=URL (a second server, e.g. the old version) "
    "or --vllm-eval-baseline-file=PATH (saved by an earlier run with --vllm-eval-save=PATH)"
)


@dataclass
class ServerSide:
    """A live server and the lm-eval results it has given in this run."""

    endpoint: Endpoint
    client: BoundedClient
    facts: ServerFacts
    results: dict[str, TaskResult] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return (
            f"{display_url(self.endpoint.base_url)} (vLLM {self.facts.version or '?'}, model {self.endpoint.model!r})"
        )

    def record(self) -> dict[str, object]:
        return {
            "url": display_url(self.endpoint.base_url),
            "vllm_version": self.facts.version,
            "model": self.endpoint.model,
            "max_model_len": self.endpoint.max_model_len,
        }


class QualityRun:
    def __init__(
        self,
        target: ServerSide,
        baseline: ServerSide | BaselineFile | None,
        *,
        run_dir: Path,
        tolerance: float,
        confidence: float,
        greedy_tokens: int,
        near_tie_gap: float = greedy.DEFAULT_NEAR_TIE_GAP,
        greedy_min_compared_tokens: int = greedy.DEFAULT_MIN_COMPARED_TOKENS,
        drift_thresholds: logprob_drift.Thresholds | None = None,
        limit: int | None = None,
        include_paths: Sequence[Path] = (),
        save_path: Path | None = None,
        max_detectable_drop: float | None = None,
        eval_items: int = task_files.HAND_WRITTEN_ITEMS,
        long_context_items: int = long_context.ITEMS_PER_LENGTH,
    ) -> None:
        # The settings were checked by assemble.open_declared_run, before any baseline connection was opened.
        self.max_detectable_drop = max_detectable_drop
        self.eval_items = eval_items
        self.long_context_items = long_context_items
        self.target = target
        self.baseline = baseline
        self.run_dir = run_dir
        self.tolerance = tolerance
        self.confidence = confidence
        self.greedy_tokens = greedy_tokens
        self.near_tie_gap = near_tie_gap
        self.greedy_min_compared_tokens = greedy_min_compared_tokens
        self.drift_thresholds = drift_thresholds or logprob_drift.Thresholds.from_profile(None)
        self._drift: DriftScores | None = None
        self.limit = limit
        self.include_paths = tuple(include_paths)
        self.save_path = save_path
        self.recording = BaselineFile(server=target.record())
        self._long_context_unavailable: dict[int, str] = {}
        self._batches_done: set[tuple[str, str]] = set()
        self._user_tasks: dict[str, dict[str, TaskResult]] = {}

    # ---- the baseline's answers --------------------------------------------

    def no_baseline_reason(self) -> str:
        saved = f"; the target's results are saved to {self.save_path}" if self.save_path else ""
        return f"{NO_BASELINE}{saved}"

    @property
    def baseline_label(self) -> str:
        return self.baseline.label if self.baseline is not None else "no baseline"

    def _baseline_result(self, key: str) -> TaskResult:
        if isinstance(self.baseline, BaselineFile):
            if key not in self.baseline.runs:
                raise NotComparable(
                    f"the baseline file {self.baseline.path} has no results for {key} "
                    f"(the run that saved it did not include it)"
                )
            return self.baseline.runs[key]
        assert self.baseline is not None, "compare() is called with a baseline"
        return self.baseline.results[key]

    def _sides(self) -> list[ServerSide]:
        return [self.target, self.baseline] if isinstance(self.baseline, ServerSide) else [self.target]

    # ---- lm-eval runs -------------------------------------------------------

    def _run(
        self, side: ServerSide, backend: Backend, tasks: list[str], manager, max_length: int | None = None
    ) -> None:
        lm = language_model(side.endpoint, backend, side.client, max_length=max_length)
        for task, result in evaluate(lm, tasks, manager, backend=backend, limit=self.limit).items():
            side.results[run_key(task, backend)] = result
            if side is self.target:
                self.recording.runs[run_key(task, backend)] = result

    def _long_context_tasks(self) -> list[str]:
        """Generate the documents from the target's max_model_len; the percents that cannot be built are noted."""
        names = []
        max_model_len = self.target.endpoint.max_model_len
        for percent in LONG_CONTEXT_PERCENTS:
            if not isinstance(max_model_len, int):
                self._long_context_unavailable[percent] = (
                    f"/v1/models gives no max_model_len for {self.target.endpoint.model!r}"
                )
                continue
            try:
                sizing = long_context.Sizing(percent, max_model_len)
                docs = long_context.documents(
                    self.target.client, self.target.endpoint.model, sizing, self.long_context_items
                )
            except long_context.LongContextUnavailable as exc:
                self._long_context_unavailable[percent] = str(exc)
                continue
            names.append(task_files.write_long_context(self.run_dir, percent, docs))
            baseline_len = self.baseline.endpoint.max_model_len if isinstance(self.baseline, ServerSide) else None
            if isinstance(baseline_len, int) and baseline_len < max_model_len * percent // 100:
                self._long_context_unavailable[percent] = (
                    f"the baseline serves max_model_len {baseline_len}, less than these prompts need "
                    f"({percent}% of the target's {max_model_len})"
                )
        return names

    def _batch(self, batch: str, backend: Backend) -> None:
        """Run one batch of shipped tasks on every live side, once: ``short_answer``, ``multiple_choice``
        or ``long_context`` (all four lengths in one lm-eval call)."""
        if (batch, backend) in self._batches_done:
            return
        self._batches_done.add((batch, backend))
        task_files.write_shipped(self.run_dir, self.eval_items)
        tasks = {
            "short_answer": [task_files.SHORT_ANSWER],
            "multiple_choice": [task_files.MULTIPLE_CHOICE],
        }.get(batch) or self._long_context_tasks()
        if not tasks:
            return
        manager = task_manager([self.run_dir], tasks)
        for side in self._sides():
            runnable = tasks
            if side is not self.target:
                unavailable = {task_files.long_context_task(percent) for percent in self._long_context_unavailable}
                runnable = [task for task in tasks if task not in unavailable]
            # lm-eval keeps max_length - 1 tokens for prompt plus answer; the 100% documents fill max_model_len exactly.
            length = side.endpoint.max_model_len
            if runnable:
                self._run(side, backend, runnable, manager, max_length=length + 1 if isinstance(length, int) else None)

    # ---- comparisons --------------------------------------------------------

    def _compare(self, label: str, key: str) -> Outcome:
        if self.baseline is None:
            raise NoBaseline(self.no_baseline_reason())
        target = self.target.results[key]
        baseline = self._baseline_result(key)
        same_prompt = {
            item for item, digest in target.prompt_hashes.items() if baseline.prompt_hashes.get(item) == digest
        }
        notes = [f"target {self.target.label}", f"baseline {self.baseline_label}"]
        differing = len(set(target.prompt_hashes) & set(baseline.prompt_hashes)) - len(same_prompt)
        if not same_prompt:
            raise NotComparable(
                f"{label}: no item has the same prompt on the target and in the baseline "
                f"({differing} differ): the baseline was made from other documents"
            )
        if differing:
            notes.append(f"{differing} item(s) left out: their prompts differ from the baseline's")
        if target.not_comparable:
            notes.append(f"not gated (not a mean of items): {', '.join(target.not_comparable)}")
        comparisons = []
        for name, metric in sorted(target.metrics.items()):
            if name not in baseline.metrics:
                notes.append(f"{name}: not in the baseline")
                continue
            comparisons.append(
                paired.compare(
                    name,
                    {item: value for item, value in metric.items.items() if item in same_prompt},
                    {item: value for item, value in baseline.metrics[name].items.items() if item in same_prompt},
                    higher_is_better=metric.higher_is_better,
                    tolerance=self.tolerance,
                    confidence=self.confidence,
                    max_detectable_drop=self.max_detectable_drop,
                )
            )
        if not comparisons:
            raise NotComparable(f"{label}: no metric of the task can be compared item by item")
        return Outcome(label, comparisons, notes)

    def shipped(self, task: str, backend: Backend) -> Outcome:
        self._batch(task_files.SHIPPED[task], backend)
        return self._compare(f"{task} ({backend})", run_key(task, backend))

    def long_context(self, percent: int) -> Outcome:
        self._batch("long_context", "completions")
        if percent in self._long_context_unavailable:
            raise NotComparable(
                f"long-context retrieval at {percent}% of max_model_len: {self._long_context_unavailable[percent]}"
            )
        task = task_files.long_context_task(percent)
        return self._compare(f"{task} (completions)", run_key(task, "completions"))

    def user_task(self, name: str) -> list[str]:
        """Run a user's task (a group gives several) on each live side; returns the run keys to compare."""
        if name not in self._user_tasks:
            manager = task_manager(self.include_paths, [name])
            before = set(self.target.results)
            for side in self._sides():
                self._run(side, "completions", [name], manager)
            self._user_tasks[name] = {key: self.target.results[key] for key in set(self.target.results) - before}
        return sorted(self._user_tasks[name])

    def user_task_outcome(self, key: str) -> Outcome:
        return self._compare(key, key)

    # ---- greedy equivalence ---------------------------------------------------

    def greedy(self) -> GreedyOutcome:
        notes = []
        if isinstance(self.baseline, BaselineFile):
            if not self.baseline.greedy:
                raise NotComparable(f"the baseline file {self.baseline.path} has no greedy continuations")
            prompts = [continuation.prompt_ids for continuation in self.baseline.greedy]
            baseline = self.baseline.greedy
            compared = min(self.greedy_tokens, self.baseline.greedy_max_tokens or self.greedy_tokens)
            texts = None
        else:
            texts = greedy.PROMPT_TEXTS
            prompts = greedy.prompt_ids(self.target.client, self.target.endpoint.model, texts)
            compared = self.greedy_tokens
            baseline = None
            if self.baseline is not None:
                theirs = greedy.prompt_ids(self.baseline.client, self.baseline.endpoint.model, texts)
                if theirs != prompts:
                    notes.append(
                        "the baseline's tokenizer splits the prompts differently; both continue the target's token ids"
                    )
                baseline = greedy.continue_greedily(
                    self.baseline.client, self.baseline.endpoint.model, prompts, compared
                )
        target = greedy.continue_greedily(self.target.client, self.target.endpoint.model, prompts, compared)
        self.recording.greedy, self.recording.greedy_max_tokens = target, compared
        if baseline is None:
            raise NoBaseline(self.no_baseline_reason())
        return GreedyOutcome(
            greedy.compare(target, baseline, compared, texts, self.near_tie_gap), notes, self.greedy_min_compared_tokens
        )

    # ---- teacher-forced logprob drift ------------------------------------------

    def _score_drift(self) -> DriftScores:
        target = self.target
        if isinstance(self.baseline, BaselineFile):
            recorded = self.baseline.drift
            if recorded is None:
                raise NotComparable(
                    f"the baseline file {self.baseline.path} has no logprob profile (saved by an older plugin, "
                    "or without the drift test): save it again with --vllm-eval-save"
                )
            room = target.endpoint.max_model_len
            texts = [text[: room - 1] for text in recorded.texts] if isinstance(room, int) else recorded.texts
            baseline_scores, again = recorded.scores, recorded.again
            baseline_len = recorded.max_model_len
        else:
            max_model_len = target.endpoint.max_model_len
            if not isinstance(max_model_len, int):
                raise NotComparable(f"/v1/models gives no max_model_len for {target.endpoint.model!r}")
            baseline_len = self.baseline.endpoint.max_model_len if self.baseline is not None else None
            length = min(max_model_len, baseline_len) if isinstance(baseline_len, int) else max_model_len
            texts = logprob_drift.text_ids(target.client, target.endpoint.model, length)
            baseline_scores, again = [], None
            if self.baseline is not None:
                model = self.baseline.endpoint.model
                baseline_scores = logprob_drift.score(self.baseline.client, model, texts)
                again_scored = logprob_drift.score(self.baseline.client, model, texts, among_others=True)
                again = [scored.actual for scored in again_scored]
        target_scores = logprob_drift.score(target.client, target.endpoint.model, texts)
        if self.save_path is not None:
            # The recording carries its own noise, for runs that judge against it when this server is gone.
            target_again = logprob_drift.score(target.client, target.endpoint.model, texts, among_others=True)
            self.recording.drift = DriftRecording(
                texts, target_scores, [scored.actual for scored in target_again], target.endpoint.max_model_len
            )
        return DriftScores(texts, target_scores, baseline_scores, again, baseline_len)

    def logprob_drift(self, bucket: logprob_drift.Bucket) -> logprob_drift.BucketDrift:
        """The drift in one bucket of the target's context, against the baseline's own noise."""
        if self.baseline is None and self.save_path is None:
            raise NoBaseline(self.no_baseline_reason())
        if self._drift is None:
            try:
                self._drift = self._score_drift()
            except logprob_drift.DriftUnavailable as exc:
                raise DriftFailed(str(exc)) from None
        if self.baseline is None:
            raise NoBaseline(self.no_baseline_reason())
        scores = self._drift
        scored_length = len(scores.texts[0]) + 1 if scores.texts else 0
        if bucket.end > scored_length:
            raise NotComparable(
                f"{bucket}: the baseline ({self.baseline_label}) serves max_model_len {scores.baseline_max_model_len}, "
                "shorter than these positions"
            )
        thresholds = self.drift_thresholds
        outcome = logprob_drift.compare(
            scores.target, scores.baseline, bucket, thresholds, scores.noise(bucket, thresholds.tail_abs)
        )
        if outcome is None:
            raise DriftFailed(f"{bucket}: no position was scored by both servers")
        return outcome

    # ---- saving ---------------------------------------------------------------

    def save(self) -> Path | None:
        if self.save_path is None:
            return None
        return self.recording.save(self.save_path)

    def close(self) -> None:
        """The baseline's client is ours; the target's belongs to the plugin."""
        if isinstance(self.baseline, ServerSide):
            self.baseline.client.close()
