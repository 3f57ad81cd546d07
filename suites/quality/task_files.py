"""The lm-eval tasks the suite ships, written where lm-eval can load them offline.

The tasks are plain lm-eval YAML over JSONL (``tasks/``), loaded with
``dataset_path: json``. lm-eval hands ``data_files`` to ``datasets`` as
given, which reads a relative path against the working directory, so each
run writes a copy of the YAML with absolute paths into its own directory
and points lm-eval's ``include_path`` there. The copy also keeps the
``datasets`` cache in that directory, not in the user's home. The short-answer
and multiple-choice data are written there too, grown to the size asked for
(generated.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from pytest_vllm_conformance.catalogue import yaml_data
from pytest_vllm_conformance.catalogue.cases import CaseContext, Named

from . import generated

TASKS_DIR = Path(__file__).with_name("tasks")
SHORT_ANSWER = "vllm_conformance_short_answer"
MULTIPLE_CHOICE = "vllm_conformance_multiple_choice"
LONG_CONTEXT = "vllm_conformance_long_context"
SHIPPED = {SHORT_ANSWER: "short_answer", MULTIPLE_CHOICE: "multiple_choice"}
HAND_WRITTEN_ITEMS = 40  # in each tasks/*.jsonl: the size of a set before generated items are added


def long_context_task(percent: int) -> str:
    return f"{LONG_CONTEXT}_{percent}"


def _write_task(run_dir: Path, template: str, name: str, data_file: Path) -> None:
    config: dict[str, Any] = yaml_data.load_shipped((TASKS_DIR / f"{template}.yaml").read_text())
    config["task"] = name
    config["dataset_kwargs"] = {
        **config.get("dataset_kwargs", {}),
        "data_files": {"test": str(data_file.resolve())},
        "cache_dir": str((run_dir / "datasets-cache").resolve()),
    }
    (run_dir / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def write_shipped(run_dir: Path, items: int) -> Path:
    """The short-answer and multiple-choice tasks of ``items`` items each, ready for ``include_path=run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, template in SHIPPED.items():
        data_file = generated.write(template, items, TASKS_DIR / f"{template}.jsonl", run_dir / f"{name}.jsonl")
        _write_task(run_dir, template, name, data_file)
    return run_dir


def write_long_context(run_dir: Path, percent: int, docs: list[dict[str, Any]]) -> str:
    """A long-context task over generated documents; returns its name."""
    run_dir.mkdir(parents=True, exist_ok=True)
    name = long_context_task(percent)
    data_file = run_dir / f"{name}.jsonl"
    data_file.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    _write_task(run_dir, "long_context", name, data_file)
    return name


def user_eval_tasks(ctx: CaseContext) -> list[Named]:
    """Each --vllm-eval-task, gated like the shipped tasks."""
    return [Named(name) for name in ctx.settings.eval_task]
