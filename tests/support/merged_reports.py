"""What a merged report must share with the one run it stands for."""

from __future__ import annotations

from typing import Any

# Not the run's outcome: when it ran, where the shards came from, and (each run its own proxy) the URL.
RUN_ONLY = ("date", "shards")


def comparable(report: dict[str, Any], *, drop_url: bool = False) -> dict[str, Any]:
    kept = {key: value for key, value in report.items() if key not in RUN_ONLY}
    if drop_url:
        kept["target"] = {key: value for key, value in kept["target"].items() if key != "url"}
    return kept
