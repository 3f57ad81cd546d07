"""The matrix at a glance: contracts down, releases across, one colour per outcome (matplotlib, SVG).

The SVG is made reproducible (no date, a fixed hash salt, text kept as text) so that the stale-page
test can compare it byte for byte with the committed one.
"""

from __future__ import annotations

import io

from atlas.cells import OUTCOMES, cell, contract_ids
from atlas.plan import RELEASES

COLOURS = {
    "failed": "#d7301f",
    "undecided": "#fdae61",
    "known departure": "#fee08b",
    "passed": "#1a9850",
    "not claimed": "#d9d9d9",
    "not available": "#737373",
    "not measured": "#ffffff",
}


def heatmap_svg(data: dict) -> str:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    rows = [contract for ids in contract_ids(data).values() for contract in ids]
    releases = list(RELEASES)
    grid = [
        [OUTCOMES.index("not measured" if RELEASES[r] else cell(data, r, contract)[0]) for r in releases]
        for contract in rows
    ]
    matplotlib.rcParams.update({"svg.hashsalt": "atlas", "svg.fonttype": "none", "font.size": 7})
    figure, axes = plt.subplots(figsize=(7.5, 0.16 * len(rows) + 1.6))
    axes.imshow(
        grid, cmap=ListedColormap([COLOURS[o] for o in OUTCOMES]), vmin=0, vmax=len(OUTCOMES) - 1, aspect="auto"
    )
    axes.set_xticks(range(len(releases)), [f"{r}\n(no CPU build)" if RELEASES[r] else r for r in releases])
    axes.set_yticks(range(len(rows)), rows)
    axes.xaxis.tick_top()
    axes.set_xticks([x - 0.5 for x in range(1, len(releases))], minor=True)
    axes.set_yticks([y - 0.5 for y in range(1, len(rows))], minor=True)
    axes.grid(which="minor", color="white", linewidth=0.6)
    axes.tick_params(which="minor", length=0)
    figure.legend(
        handles=[Patch(facecolor=COLOURS[o], edgecolor="#999999", label=o) for o in OUTCOMES],
        loc="lower center",
        ncol=len(OUTCOMES),
        frameon=False,
    )
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    return out.getvalue()
