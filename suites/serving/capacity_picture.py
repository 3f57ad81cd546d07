"""The capacity search's trials, goodput against offered rate, target and baseline side by side, as a PNG.

One point per trial: x its offered (scheduled) Poisson rate, y the share of
its planned requests that met the goodput objective. The share, not
goodput in requests a second, because the share is what each trial is
judged by: the declared share is then one horizontal line, a trial above
it met and one below missed, and the capacity is where a side's points
cross it. Goodput in requests a second (share x rate) would turn that line
into a diagonal, and a trial stopped early (it hangs up once the share is
lost) has no completed rate to divide by. The share counts a request never
sent, or hung up on, as missed, as the outcome does: a stopped trial's
point is a lower bound, below the line either way.

The rate axis is logarithmic, as the search steps (by 2) and bisects (in
log space). Each side's capacity interval (``capacity.Side.bracket``) is
a dashed vertical line at its low end, the highest rate met below every
rate missed, and a band up to its high end. A trial whose client fell
behind its schedule is an x: left out of the search. Names and numbers sit
in the legend under the axes, where they cannot overlap the points.
matplotlib is optional (the ``serving`` extra): without it the picture is
not drawn and the figures say why.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .capacity import Search, Side
from .open_loop import Goodput, Trial
from .picture import INSTALL_HINT

if TYPE_CHECKING:  # matplotlib is optional: its types for the checker only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Per side: colour, marker, and how much larger the baseline's hollow marker is, so that two trials at one rate
# with one share (both sides start at the same rate) still show both.
STYLE = {"target": ("tab:blue", "o", 36), "baseline": ("tab:orange", "s", 90)}


def share(trial: Trial) -> float:
    """The share of the trial's planned requests that met the objective (one never sent did not)."""
    return trial.met_requests / trial.planned if trial.planned else 0.0


def capacity_label(side: Side) -> str:
    low, high = side.bracket()
    if low == 0:
        return f"{side.name}: no rate tried met the objective"
    if math.isinf(high):
        return f"{side.name} capacity at least {low:.2f}/s (no rate tried missed)"
    return f"{side.name} capacity [{low:.2f}, {high:.2f}] requests/s"


def draw(
    path: Path, trials: Mapping[str, Sequence[Trial]], search: Search, objective: Goodput, baseline_label: str
) -> str | None:
    """Draw the picture at ``path``; None when drawn, else why it was not."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: a file only
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not installed ({INSTALL_HINT})"
    drawn = figure(trials, search, objective, baseline_label)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        drawn.savefig(path, dpi=100)
    finally:
        plt.close(drawn)
    return None


def figure(trials: Mapping[str, Sequence[Trial]], search: Search, objective: Goodput, baseline_label: str) -> Figure:
    """The picture as a matplotlib figure (matplotlib imported; the caller closes it)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatter, PercentFormatter

    drawn, axis = plt.subplots(figsize=(9, 6), constrained_layout=True)
    rates = [t.rate for side in trials.values() for t in side] or [search.start]
    for side in (search.target, search.baseline):
        _side(axis, side, list(trials.get(side.name, ())), baseline_label)
    axis.axhline(
        objective.share,
        color="grey",
        linestyle=":",
        linewidth=1.2,
        label=f"declared share {objective.share:.0%} (a trial on or above it met)",
    )
    axis.set_xscale("log")
    # Rates as plain numbers (7, 10, 14), not powers of ten; minor ticks labelled only where a few decades fit.
    axis.xaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    axis.set_xlim(min(rates) / 1.3, max(rates) * 1.3)
    axis.set_ylim(-0.03, 1.05)
    axis.yaxis.set_major_formatter(PercentFormatter(1.0))
    axis.set_xlabel("offered rate, requests/s (Poisson arrivals, as scheduled)")
    axis.set_ylabel("requests of the trial meeting the objective")
    axis.grid(alpha=0.3, which="both")
    title = f"Goodput against offered rate; objective: {objective.describe()}"
    axis.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=11)
    _, labels = axis.get_legend_handles_labels()
    columns = 1 if any(len(label) > 45 for label in labels) else 2
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=columns, fontsize=8, frameon=False)
    return drawn


def _side(axis: Axes, side: Side, trials: list[Trial], baseline_label: str) -> None:
    """One side's trials, the curve through them, and its capacity interval."""
    colour, marker, size = STYLE[side.name]
    kept = [t for t in trials if not t.client_bound]
    behind = [t for t in trials if t.client_bound]
    name = side.name if side.name == "target" else f"baseline ({baseline_label})"
    axis.scatter(
        [t.rate for t in kept],
        [share(t) for t in kept],
        s=size,
        marker=marker,
        facecolors=colour if side.name == "target" else "none",
        edgecolors=colour,
        zorder=3,
        label=f"{name}: {len(kept)} trial(s)",
    )
    if behind:
        axis.scatter(
            [t.rate for t in behind],
            [share(t) for t in behind],
            s=size,
            marker="x",
            color=colour,
            zorder=3,
            label=f"{side.name}: {len(behind)} trial(s) the client fell behind (left out)",
        )
    # A thin line through each rate's mean share, in rate order: the curve the trials sample.
    by_rate: dict[float, list[float]] = {}
    for t in kept:
        by_rate.setdefault(t.rate, []).append(share(t))
    xs = sorted(by_rate)
    axis.plot(xs, [sum(by_rate[x]) / len(by_rate[x]) for x in xs], color=colour, alpha=0.4, linewidth=1)
    low, high = side.bracket()
    if low > 0:
        axis.axvline(low, color=colour, linestyle="--", linewidth=1.5, label=capacity_label(side))
        if math.isfinite(high):
            axis.axvspan(low, high, color=colour, alpha=0.12)
    else:
        axis.plot([], [], color=colour, linestyle="--", label=capacity_label(side))  # in the legend only
