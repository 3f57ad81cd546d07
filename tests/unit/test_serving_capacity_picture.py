"""The capacity picture: goodput against offered rate, both sides, drawn beside the report from synthetic trials, or
said why not (docs/serving.md)."""

from __future__ import annotations

import builtins

import matplotlib

from suites.serving import capacity, capacity_picture
from suites.serving.capacity_run import Capacity
from suites.serving.loadgen import RequestTiming
from suites.serving.open_loop import MAX_IN_FLIGHT, Goodput, Sent, Trial

matplotlib.use("Agg")
import matplotlib.pyplot as plt

OBJECTIVE = Goodput(ttft_seconds=1.0, tpot_seconds=0.1, share=0.9)
PNG = b"\x89PNG\r\n\x1a\n"


def _trial(rate: float, knee: float, *, behind: bool = False) -> Trial:
    """20 requests on time; all meet up to the knee, fewer the further past it."""
    met = 20 if rate <= knee else max(0, int(20 * knee / rate) - 4)
    sent = tuple(Sent(i / rate, RequestTiming(started=i / rate), i < met) for i in range(20))
    return Trial(rate, 20, sent, 20 / rate, met < 20, MAX_IN_FLIGHT if behind else 4, OBJECTIVE.share)


def _found(target_knee: float = 9.0, baseline_knee: float = 10.0) -> Capacity:
    """A search over synthetic trials, as ``capacity_run.measure`` keeps it."""
    found = Capacity(baseline="http://old:8000 (interleaved in this run)", trials={"target": [], "baseline": []})

    def trial(side: str, rate: float, seed: int) -> Trial:
        ran = _trial(rate, target_knee if side == "target" else baseline_knee)
        found.trials[side].append(ran)
        return ran

    found.search = capacity.search(trial, start=7.0, budget_seconds=40, max_slowdown=0.2)
    return found


def test_the_picture_is_a_png_beside_the_report_and_the_figures_name_it(tmp_path):
    found = _found()
    found.draw(tmp_path / "run.yaml", OBJECTIVE)
    assert found.picture == "run.serving-capacity.png" and found.picture_not_drawn is None
    assert (tmp_path / found.picture).read_bytes()[:8] == PNG
    assert "not drawn" not in found.line()


def test_both_sides_their_trials_their_capacities_and_the_declared_share_are_in_it():
    found = _found()
    assert found.search is not None
    found.trials["target"].append(_trial(40.0, 9.0, behind=True))  # a trial the client fell behind in
    drawn = capacity_picture.figure(found.trials, found.search, OBJECTIVE, found.baseline)
    try:
        axis = drawn.axes[0]
        labels = [text.get_text() for text in axis.get_legend().get_texts()]
        kept = {side: sum(not t.client_bound for t in trials) for side, trials in found.trials.items()}
        assert f"target: {kept['target']} trial(s)" in labels
        assert f"baseline (http://old:8000 (interleaved in this run)): {kept['baseline']} trial(s)" in labels
        assert "target: 1 trial(s) the client fell behind (left out)" in labels
        for side in (found.search.target, found.search.baseline):
            low, high = side.bracket()
            assert f"{side.name} capacity [{low:.2f}, {high:.2f}] requests/s" in labels
            assert 0 < low < high
        assert "declared share 90% (a trial on or above it met)" in labels
        # Every trial is a point at its offered rate and its share met.
        points = sorted((round(x, 6), round(y, 6)) for c in axis.collections for x, y in c.get_offsets())
        shares = [(t.rate, capacity_picture.share(t)) for trials in found.trials.values() for t in trials]
        assert points == sorted((round(x, 6), round(y, 6)) for x, y in shares)
        assert axis.get_xscale() == "log"
        assert "90% of requests with TTFT <= 1 s" in axis.get_title()
    finally:
        plt.close(drawn)


def test_a_side_that_met_no_rate_says_so_in_the_legend():
    found = _found(target_knee=0.01)
    assert found.search is not None
    drawn = capacity_picture.figure(found.trials, found.search, OBJECTIVE, found.baseline)
    try:
        labels = [text.get_text() for text in drawn.axes[0].get_legend().get_texts()]
        assert "target: no rate tried met the objective" in labels
    finally:
        plt.close(drawn)


def test_without_a_report_or_a_search_there_is_no_picture(tmp_path):
    found = _found()
    found.draw(None, OBJECTIVE)
    assert found.picture is None and found.picture_not_drawn is None
    empty = Capacity(cannot="no warm-up request completed on the baseline")
    empty.draw(tmp_path / "run.yaml", OBJECTIVE)
    assert empty.picture is None and empty.picture_not_drawn is None
    assert list(tmp_path.iterdir()) == []


def test_without_matplotlib_the_picture_is_not_drawn_and_the_figures_say_why(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    found = _found()
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    found.draw(tmp_path / "run.yaml", OBJECTIVE)
    assert found.picture is None
    assert found.picture_not_drawn and "[serving]" in found.picture_not_drawn
    assert f"the capacity picture was not drawn: {found.picture_not_drawn}" in found.line()
    assert list(tmp_path.iterdir()) == []
