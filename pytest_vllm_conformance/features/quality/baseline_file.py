"""A stored quality baseline: what one server answered, item by item.

``--vllm-eval-save PATH`` writes it from a run (typically against the
version in production); ``--vllm-eval-baseline-file PATH`` compares a later
target with it when the old server is no longer there to ask. It carries
the server's version, model and max_model_len, lm-eval's version, the
per-item value of every metric with each item's prompt hash (an item is
compared only with the same prompt), and the greedy continuations.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.features.quality.greedy import Continuation
from pytest_vllm_conformance.features.quality.runner import TaskResult

FORMAT = "pytest-vllm-conformance quality baseline"
FORMAT_VERSION = 1


class BaselineFileError(Exception):
    """The file is not a baseline this version can read; the message names the file and the problem."""


def run_key(task: str, backend: str) -> str:
    return f"{task}@{backend}"


def _lm_eval_version() -> str | None:
    try:
        return metadata.version("lm_eval")
    except metadata.PackageNotFoundError:
        return None


@dataclass
class BaselineFile:
    server: dict[str, Any]
    runs: dict[str, TaskResult] = field(default_factory=dict)
    greedy: list[Continuation] | None = None
    greedy_max_tokens: int | None = None
    path: Path | None = None
    saved_at: str | None = None
    lm_eval_version: str | None = None

    @property
    def label(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{where}vLLM {self.server.get('vllm_version') or '?'}, model {self.server.get('model')!r}"

    def to_dict(self) -> dict[str, Any]:
        greedy = None
        if self.greedy is not None:
            greedy = {
                "max_tokens": self.greedy_max_tokens,
                "prompts": [continuation.prompt_ids for continuation in self.greedy],
                "outputs": [continuation.output_ids for continuation in self.greedy],
            }
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "saved_at": self.saved_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "lm_eval_version": self.lm_eval_version or _lm_eval_version(),
            "server": self.server,
            "greedy": greedy,
            "runs": {key: result.to_dict() for key, result in sorted(self.runs.items())},
        }

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(temporary, path)
        return path

    @classmethod
    def load(cls, path: Path) -> BaselineFile:
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise BaselineFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BaselineFileError(f"{path}: not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BaselineFileError(f"{path}: not a quality baseline (write one with --vllm-eval-save=PATH)")
        if data.get("format_version") != FORMAT_VERSION:
            raise BaselineFileError(
                f"{path}: format_version {data.get('format_version')!r}; this plugin reads {FORMAT_VERSION}"
            )
        try:
            greedy_data = data.get("greedy")
            greedy = None
            if greedy_data:
                greedy = [
                    Continuation(list(prompt), list(output))
                    for prompt, output in zip(greedy_data["prompts"], greedy_data["outputs"], strict=True)
                ]
            return cls(
                server=dict(data["server"]),
                runs={key: TaskResult.from_dict(run) for key, run in data.get("runs", {}).items()},
                greedy=greedy,
                greedy_max_tokens=greedy_data.get("max_tokens") if greedy_data else None,
                path=Path(path),
                saved_at=data.get("saved_at"),
                lm_eval_version=data.get("lm_eval_version"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{path}: malformed baseline ({type(exc).__name__}: {exc})") from None
