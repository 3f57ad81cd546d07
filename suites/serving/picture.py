"""The serving run's latency distributions, target and baseline side by side, as a PNG beside the report.

People compare distributions by looking: one panel for time to first token,
one for time per output token (per request), each a box plot with the points over it, target
and baseline (live or saved) next to each other. matplotlib is optional (the
``serving`` extra); without it the picture is not drawn and the report says
why, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .loadgen import Round

INSTALL_HINT = "pip install 'pytest-vllm-conformance[serving]'"


def picture_path(report: Path, name: str) -> Path:
    """Beside the report: ``report.yaml`` gives ``report.serving-<name>.png``."""
    return report.with_name(f"{report.stem}.serving-{name}.png")


def _latencies(rounds: Sequence[Round]) -> tuple[list[float], list[float]]:
    timings = [t for r in rounds for t in r.timings if not t.error]
    ttft = [t.ttft * 1000 for t in timings if t.ttft is not None]
    # Per request, decode time over the tokens after the first: event gaps are not token gaps (vLLM and the
    # network fold several tokens into one read, so half of them were a few microseconds).
    itl = [v * 1000 for v in (t.time_per_output_token for t in timings) if v is not None]
    return ttft, itl


def draw(path: Path, target: Sequence[Round], baseline: Sequence[Round], baseline_label: str) -> str | None:
    """Draw the picture at ``path``; None when drawn, else why it was not."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: a file only
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not installed ({INSTALL_HINT})"
    sides = [("target", _latencies(target))]
    if baseline:
        sides.append(("baseline", _latencies(baseline)))
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.8), constrained_layout=True)
    try:
        if baseline:
            # The baseline's name (a URL, a saved file) under the panels, not in a tick label it would overlap.
            figure.supxlabel(f"baseline: {baseline_label}", fontsize=9)
        panels = (("time to first token", 0), ("time per output token (decode time over tokens after the first)", 1))
        for panel, (title, which) in enumerate(panels):
            axis = axes[panel]
            values = [side[1][which] or [0.0] for side in sides]
            axis.boxplot(values, showfliers=False)
            for position, points in enumerate(values, start=1):
                # Spread the points sideways, evenly, so a dense distribution still shows its mass.
                offsets = [position - 0.15 + 0.3 * i / max(len(points) - 1, 1) for i in range(len(points))]
                axis.scatter(offsets, points, s=6, alpha=0.35)
            axis.set_xticks(range(1, len(sides) + 1), [f"{name} ({len(side[which])})" for name, side in sides])
            axis.set_title(title, fontsize=10)
            if all(v > 0 for points in values for v in points) and max(map(max, values)) > 20 * min(map(min, values)):
                # A few ms under a tail of stalls hundreds of ms long: a linear axis flattens the box.
                axis.set_yscale("log")
            axis.set_ylabel("milliseconds")
            axis.grid(axis="y", alpha=0.3)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
    return None
