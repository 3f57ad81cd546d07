"""A saved serving run: the target's rounds, request by request, to judge a later target against.

``--vllm-perf-save PATH`` writes the target's measured rounds (typically of
the release in production); ``--vllm-perf-baseline-file PATH`` judges a later
target's throughput against them as against a live ``--vllm-baseline-url``,
when the old server is no longer there. A saving holds the server's version
and model and the workload (prompt and output tokens, concurrency, requests
per round): a file of another workload or model is refused, never compared,
because its figures measure something else. The hardware cannot be read
from the client; the saving states when and where from it was made, and the
operator keeps it to one machine kind (docs/serving.md).

The rounds were not interleaved with the target's, so a drift of the
machine between the saving and now lands on one side only: a comparison
needs at least ``MIN_ROUNDS`` rounds on each side, else it is undecided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.reporting.saved_runs import SavedFormat, write_whole

from .loadgen import RequestTiming, Round

FORMAT = "pytest-vllm-conformance serving baseline"
FORMAT_VERSION = 1
# The round-pair rule needs pairs; a saving's rounds were not interleaved with the target's, so one pair
# cannot tell the server's slowdown from the machine's moment.
MIN_ROUNDS = 2
# What makes two runs the same workload: any difference measures something else.
WORKLOAD_KEYS = ("prompt_tokens", "output_tokens", "concurrency", "requests")


class PerfFileError(Exception):
    """The file is not a serving baseline this version reads; the message names the file and the problem."""


SAVED = SavedFormat(
    FORMAT, FORMAT_VERSION, readable=(FORMAT_VERSION,), kind="serving", saved_by="--vllm-perf-save", error=PerfFileError
)


def _timing_to_dict(timing: RequestTiming, zero: float) -> dict[str, Any]:
    data = asdict(timing)
    data["started"] = timing.started - zero
    data["ended"] = timing.ended - zero
    data["token_times"] = [t - zero for t in timing.token_times]
    return data


def _round_to_dict(measured: Round) -> dict[str, Any]:
    zero = measured.started  # perf_counter readings mean nothing in another process: times from the round's start
    return {
        "seconds": measured.seconds,
        "requests": [_timing_to_dict(t, zero) for t in measured.timings],
    }


def _round_from_dict(data: dict[str, Any]) -> Round:
    timings = tuple(
        RequestTiming(
            started=float(t["started"]),
            ended=float(t["ended"]),
            status=t.get("status"),
            token_times=[float(x) for x in t.get("token_times", [])],
            prompt_tokens=t.get("prompt_tokens"),
            completion_tokens=t.get("completion_tokens"),
            error=t.get("error"),
            tokens_received=t.get("tokens_received"),
        )
        for t in data["requests"]
    )
    return Round(timings, 0.0, float(data["seconds"]))


@dataclass
class PerfRecording:
    server: dict[str, Any]  # vllm_version, model, url
    workload: dict[str, int]
    rounds: list[Round]
    saved_at: str | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        return (
            f"{self.path}: vLLM {self.server.get('vllm_version') or '?'}, model {self.server.get('model')!r}, "
            f"{len(self.rounds)} rounds saved {self.saved_at or '?'}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            **SAVED.header(self.saved_at),
            "server": self.server,
            "workload": self.workload,
            "rounds": [_round_to_dict(r) for r in self.rounds],
        }

    def save(self, path: Path) -> Path:
        return write_whole(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> PerfRecording:
        data = SAVED.read(path)
        try:
            return cls(
                server=dict(data["server"]),
                workload={key: int(value) for key, value in data["workload"].items()},
                rounds=[_round_from_dict(r) for r in data["rounds"]],
                saved_at=data.get("saved_at"),
                path=Path(path),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PerfFileError(f"{path}: malformed serving baseline ({type(exc).__name__}: {exc})") from None


def recording(
    rounds: Sequence[Round], *, version: str | None, model: str, url: str, workload: dict[str, int]
) -> PerfRecording:
    return PerfRecording({"vllm_version": version, "model": model, "url": url}, dict(workload), list(rounds))


def refusal(saved: PerfRecording, model: str, workload: dict[str, int], named_model: str | None) -> str | None:
    """Why a target cannot be judged against this saving, in one line; None when it can."""
    differ = [
        f"{key} {saved.workload.get(key)} saved, {workload[key]} now"
        for key in WORKLOAD_KEYS
        if saved.workload.get(key) != workload[key]
    ]
    if differ:
        return f"{saved.path}: saved from another workload ({'; '.join(differ)}): its figures measure something else"
    recorded_model = saved.server.get("model")
    if recorded_model and recorded_model != model and named_model != recorded_model:
        return (
            f"{saved.path}: a saving of model {recorded_model!r}, the target serves {model!r}; "
            f"to compare them anyway, pass --vllm-baseline-model={recorded_model}"
        )
    return None
