"""Files a run saves for a later run to judge against (the quality and the serving baselines).

One way to write them (whole or not at all: a run stopped half-way leaves the
old file) and one way to open them (a file of another kind or version is
refused with what to do, never half-read).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllm_conformance.connection import user_files


def write_whole(path: Path, data: dict[str, Any]) -> Path:
    """``data`` as JSON at ``path``, replacing an earlier file only once the new one is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(temporary, path)
    return path


@dataclass(frozen=True)
class SavedFormat:
    """One kind of saved file: its ``format`` name and version, the versions read back, and who writes it."""

    name: str  # "pytest-vllm-conformance serving baseline"
    version: int
    readable: Collection[int]
    kind: str  # "serving": a file of another format is "not a serving baseline"
    saved_by: str  # the option that writes one: "--vllm-perf-save"
    error: type[Exception]

    def header(self, saved_at: str | None) -> dict[str, Any]:
        """The fields a saved file opens with: its format, version and when it was saved (now unless given)."""
        return {
            "format": self.name,
            "format_version": self.version,
            "saved_at": saved_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    def read(self, path: Path) -> dict[str, Any]:
        """The saved object, checked to be a file of this format in a readable version; else ``error`` saying why."""
        try:
            data = user_files.load_json(Path(path), str(path))
        except user_files.UserFileError as exc:
            raise self.error(str(exc)) from None
        if not isinstance(data, dict) or data.get("format") != self.name:
            raise self.error(f"{path}: not a {self.kind} baseline (write one with {self.saved_by}=PATH)")
        if data.get("format_version") not in self.readable:
            readable = " and ".join(map(str, self.readable))
            raise self.error(f"{path}: format_version {data.get('format_version')!r}; this plugin reads {readable}")
        return data
