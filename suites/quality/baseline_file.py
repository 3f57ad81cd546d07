"""A stored quality baseline: what one server answered, item by item.

``--vllm-eval-save PATH`` writes it from a run (typically against the
version in production); ``--vllm-eval-baseline-file PATH`` compares a later
target with it when the old server is no longer there to ask. It carries
the server's version, model and max_model_len, lm-eval's version, the
per-item value of every metric with each item's prompt hash (an item is
compared only with the same prompt), the greedy continuations with their
top-k logprobs, and the logprob profile of the drift texts (the server's
scores, and a second scoring that measures its own noise). A recording is
only compared with a target that tokenizes as the recorded server did, and
serves the same model unless ``--vllm-baseline-model`` names the recorded one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.reporting.saved_runs import SavedFormat, write_whole

from .greedy import Continuation
from .logprob_drift import Scored, top_from_json, top_to_json
from .runner import TaskResult

FORMAT = "pytest-vllm-conformance quality baseline"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: no logprobs; its greedy tokens are compared exactly, drift cannot be judged


class BaselineFileError(Exception):
    """The file is not a baseline this version can read; the message names the file and the problem."""


SAVED = SavedFormat(
    FORMAT,
    FORMAT_VERSION,
    readable=READABLE_VERSIONS,
    kind="quality",
    saved_by="--vllm-eval-save",
    error=BaselineFileError,
)


def run_key(task: str, backend: str) -> str:
    return f"{task}@{backend}"


def _lm_eval_version() -> str | None:
    try:
        return metadata.version("lm_eval")
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class DriftRecording:
    """The drift texts as token ids, the recorded server's scores, and its second scoring's actual logprobs."""

    texts: list[list[int]]
    scores: list[Scored]
    again: list[list[float | None]]
    max_model_len: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_model_len": self.max_model_len,
            "texts": self.texts,
            "scores": [scored.to_dict() for scored in self.scores],
            "again": self.again,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DriftRecording:
        return cls(
            texts=[list(text) for text in data["texts"]],
            scores=[Scored.from_dict(scored) for scored in data["scores"]],
            again=[list(actual) for actual in data["again"]],
            max_model_len=data.get("max_model_len"),
        )


@dataclass
class BaselineFile:
    server: dict[str, Any]
    runs: dict[str, TaskResult] = field(default_factory=dict)
    greedy: list[Continuation] | None = None
    greedy_max_tokens: int | None = None
    drift: DriftRecording | None = None
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
                "top_logprobs": [
                    None if continuation.top is None else top_to_json(continuation.top) for continuation in self.greedy
                ],
            }
        return {
            **SAVED.header(self.saved_at),
            "lm_eval_version": self.lm_eval_version or _lm_eval_version(),
            "server": self.server,
            "greedy": greedy,
            "drift": self.drift.to_dict() if self.drift is not None else None,
            "runs": {key: result.to_dict() for key, result in sorted(self.runs.items())},
        }

    def save(self, path: Path) -> Path:
        return write_whole(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> BaselineFile:
        data = SAVED.read(path)
        try:
            greedy_data = data.get("greedy")
            greedy = None
            if greedy_data:
                tops = greedy_data.get("top_logprobs") or [None] * len(greedy_data["prompts"])
                greedy = [
                    Continuation(list(prompt), list(output), None if top is None else top_from_json(top))
                    for prompt, output, top in zip(greedy_data["prompts"], greedy_data["outputs"], tops, strict=True)
                ]
            return cls(
                server=dict(data["server"]),
                runs={key: TaskResult.from_dict(run) for key, run in data.get("runs", {}).items()},
                greedy=greedy,
                greedy_max_tokens=greedy_data.get("max_tokens") if greedy_data else None,
                drift=DriftRecording.from_dict(data["drift"]) if data.get("drift") else None,
                path=Path(path),
                saved_at=data.get("saved_at"),
                lm_eval_version=data.get("lm_eval_version"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{path}: malformed baseline ({type(exc).__name__}: {exc})") from None


def refusal(
    recording: BaselineFile, model: str, tokenizer_probe: list[int] | None, named_model: str | None
) -> str | None:
    """Why a target cannot be judged against this recording, in one line; None when it can."""
    recorded_probe = recording.server.get("tokenizer_probe")
    if recorded_probe is not None and tokenizer_probe is not None and recorded_probe != tokenizer_probe:
        return (
            f"{recording.path}: recorded with another tokenizer than the target's ({model!r}): "
            "its token ids mean other text here, so no comparison holds"
        )
    recorded_model = recording.server.get("model")
    if recorded_model and recorded_model != model and named_model != recorded_model:
        return (
            f"{recording.path}: a recording of model {recorded_model!r}, the target serves {model!r}; "
            f"to compare them anyway, pass --vllm-baseline-model={recorded_model}"
        )
    return None
