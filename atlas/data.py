"""The atlas's one machine-readable file: a record per release and flag set."""

from __future__ import annotations

import json
from pathlib import Path

ATLAS_DIR = Path(__file__).resolve().parents[1] / "docs" / "atlas"
DATA_FILE = ATLAS_DIR / "atlas.json"


def load(path: Path = DATA_FILE) -> dict:
    if not path.exists():
        return {"atlas": 1, "records": {}}
    return json.loads(path.read_text())


def save(data: dict, path: Path = DATA_FILE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data["records"] = dict(sorted(data["records"].items(), key=lambda kv: _order(kv[0])))
    path.write_text(json.dumps(data, indent=1, sort_keys=False, ensure_ascii=False) + "\n")


def key(release: str, flag_set: str) -> str:
    return f"{release}/{flag_set}"


def _order(record_key: str) -> tuple:
    from atlas.plan import FLAG_SETS, RELEASES

    release, flag_set = record_key.split("/")
    names = [f.name for f in FLAG_SETS]
    return (list(RELEASES).index(release), names.index(flag_set) if flag_set in names else len(names))
