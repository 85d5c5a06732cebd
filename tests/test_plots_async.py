"""servelab.plots.asynchronous: the CPU/GPU timeline and the overlap gain, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.asynchronous import plot_overlap_gain, plot_timeline  # noqa: E402


def _ends(fig):
    marks = [line for line in fig.axes[0].lines if line.get_marker() == "|"]
    return [float(m.get_xdata()[0]) for m in marks]


def test_the_timeline_ends_at_the_sum_synchronously_and_at_the_max_overlapped():
    fig = plot_timeline(1e-3, 3e-3, steps=4)
    try:
        sync_end, overlapped_end = _ends(fig)
        assert sync_end == pytest.approx(4 * 4.0) and overlapped_end == pytest.approx(1.0 + 4 * 3.0)
    finally:
        plt.close(fig)
    fig = plot_timeline(3e-3, 1e-3, steps=3)      # CPU-bound: the GPU waits for each step's inputs
    try:
        assert _ends(fig) == pytest.approx([12.0, 3 * 3.0 + 1.0])
    finally:
        plt.close(fig)
    with pytest.raises(ValueError):
        plot_timeline(1e-3, 0.0)


def test_the_gain_plot_draws_the_formula_the_points_and_the_2x_line():
    fig = plot_overlap_gain([0.5, 1.0, 2.0], [1.5, 2.0, 1.5], {1.0: 1.98})
    try:
        formula, sim, two = fig.axes[0].lines
        assert list(formula.get_ydata()) == [1.5, 2.0, 1.5]
        assert list(sim.get_xdata()) == [1.0] and list(sim.get_ydata()) == [1.98]
        assert list(two.get_ydata()) == [2.0, 2.0]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="one gain per ratio"):
        plot_overlap_gain([1.0], [])
