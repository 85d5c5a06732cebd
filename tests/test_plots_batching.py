"""servelab.plots.batching.plot_batch_slots: the Gantt chart of slots under static and continuous batching."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from servelab.plots import batching as plots  # noqa: E402


def _bars(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection)]  # what broken_barh draws


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_lesson_example_titles_and_bars():
    fig = plots.plot_batch_slots([20, 200, 50, 30], 2)
    assert isinstance(fig, Figure)
    static_ax, continuous_ax = fig.axes[:2]
    assert static_ax.get_title(loc="left") == "static batching: 250 steps, utilization 60%"
    assert continuous_ax.get_title(loc="left") == "continuous batching: 200 steps, utilization 75%"
    # one idle lane per slot plus one bar per request, in each panel
    assert len(_bars(static_ax)) == 2 + 4 and len(_bars(continuous_ax)) == 2 + 4
    assert [t.get_text() for t in continuous_ax.texts] == ["r0: 20", "r1: 200", "r2: 50", "r3: 30"]
    assert [t.get_text() for t in static_ax.get_yticklabels()] == ["slot 0", "slot 1"]
    assert static_ax.get_xlim() == continuous_ax.get_xlim() == (0.0, 250.0)


def test_idle_slots_are_visible():
    fig = plots.plot_batch_slots([5, 1, 1, 1], 2)
    lanes = [c for c in _bars(fig.axes[0]) if c.get_hatch()]
    assert len(lanes) == 2  # a hatched idle lane under each slot
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "idle slot"


def test_draws_on_given_axes_and_renders_to_png():
    fig, axes = plt.subplots(2, 1)
    assert plots.plot_batch_slots([3, 9, 4, 1, 7], 3, ax=axes) is fig
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_axes_and_empty_input():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="pair of Axes"):
        plots.plot_batch_slots([1, 2], 2, ax=ax)
    fig = plots.plot_batch_slots([], 2)
    assert fig.axes[0].get_title(loc="left") == "static batching: 0 steps, utilization 0%"
