"""servelab.plots.spec: the speedup against the batch, checked through what it draws."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.spec import plot_speedup  # noqa: E402


def test_one_line_per_curve_the_break_even_and_the_simulated_points():
    fig = plot_speedup([1, 64, 512], {"256 tokens": [2.8, 2.7, 0.8], "4096 tokens": [2.8, 2.6, 2.0]},
                       simulated={"256 tokens": {512: 0.82, 64: 2.65}})
    try:
        ax = fig.axes[0]
        short, long_, sim, even = ax.lines
        assert list(short.get_ydata()) == [2.8, 2.7, 0.8] and list(long_.get_ydata()) == [2.8, 2.6, 2.0]
        assert list(sim.get_xdata()) == [64, 512] and list(sim.get_ydata()) == [2.65, 0.82]
        assert sim.get_color() == short.get_color()
        assert list(even.get_ydata()) == [1.0, 1.0]
        assert ax.get_xscale() == "log" and np.isclose(ax.get_ylim()[1], 2.8 * 1.05)
    finally:
        plt.close(fig)


def test_bad_inputs():
    with pytest.raises(ValueError, match="3 batches"):
        plot_speedup([1, 2, 3], {"x": [1, 2]})
    with pytest.raises(ValueError, match="no curve"):
        plot_speedup([1], {"x": [1]}, simulated={"y": {1: 1.0}})
    with pytest.raises(ValueError, match="at least one"):
        plot_speedup([], {})
