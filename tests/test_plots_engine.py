"""servelab.plots.engine: the engine's step timeline and the batched-vs-solo grid, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.engine import DECODE, PREFILL, plot_batched_vs_solo, plot_engine_steps  # noqa: E402


def test_step_timeline_draws_one_bar_per_step_coloured_by_kind_and_the_batch_size():
    steps = [("prefill", 12, 2), ("decode", 2, 2), ("prefill", 5, 1), ("decode", 3, 3)]
    fig = plot_engine_steps(steps)
    try:
        ax = fig.axes[0]
        bars = ax.patches
        assert [b.get_height() for b in bars] == [12, 2, 5, 3]
        colors = [matplotlib.colors.to_hex(b.get_facecolor()) for b in bars]
        assert colors == [PREFILL, DECODE, PREFILL, DECODE]
        assert list(ax.lines[0].get_ydata()) == [2, 2, 1, 3]
    finally:
        plt.close(fig)


def test_step_timeline_refuses_no_steps_and_unknown_kinds():
    with pytest.raises(ValueError, match="run the engine first"):
        plot_engine_steps([])
    with pytest.raises(ValueError, match="'verify'"):
        plot_engine_steps([("verify", 3, 1)])


def test_batched_vs_solo_marks_each_token_same_different_or_missing():
    fig = plot_batched_vs_solo([[1, 2, 3], [4, 5], [7]], [[1, 2, 3], [4, 6], [7, 8]])
    try:
        ax = fig.axes[0]
        grid = np.asarray(ax.images[0].get_array())
        assert grid.tolist() == [[0, 0, 0], [0, 1, 3], [0, 2, 3]]
        assert ax.get_title() == "1 of 3 requests generate exactly what they generate alone"
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="one output per request"):
        plot_batched_vs_solo([[1]], [[1], [2]])
