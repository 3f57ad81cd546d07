"""Files a run saves for a later run to judge against (the quality and the serving baselines).

One way to write them (whole or not at all: a run stopped half-way leaves the
old file) and one way to open them (a file of another kind or version is
refused with what to do, never half-read).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection
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


def read_saved(
    path: Path, *, format_name: str, kind: str, versions: Collection[int], saved_by: str, error: type[Exception]
) -> dict[str, Any]:
    """The saved object, checked to be a ``format_name`` file of one of ``versions``; else ``error`` saying why."""
    try:
        data = user_files.load_json(Path(path), str(path))
    except user_files.UserFileError as exc:
        raise error(str(exc)) from None
    if not isinstance(data, dict) or data.get("format") != format_name:
        raise error(f"{path}: not a {kind} baseline (write one with {saved_by}=PATH)")
    if data.get("format_version") not in versions:
        readable = " and ".join(map(str, versions))
        raise error(f"{path}: format_version {data.get('format_version')!r}; this plugin reads {readable}")
    return data
