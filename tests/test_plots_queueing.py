"""servelab.plots.queueing: the TTFT curves, a spike's queue and a retry storm, checked through what they draw."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.queueing import plot_retry_storm, plot_spike, plot_ttft_vs_utilization  # noqa: E402


def test_ttft_curves_cut_what_is_off_the_chart_and_mark_the_target():
    fig = plot_ttft_vs_utilization([0.5, 0.7, 0.9], {"equal prompts": [0.2, 0.8, math.inf]}, 0.8,
                                   simulated={"equal prompts": ([0.7], [0.75])})
    try:
        curve, sim, target = fig.axes[0].lines
        assert curve.get_ydata()[1] == 0.8 and np.isnan(curve.get_ydata()[2])
        assert list(sim.get_ydata()) == [0.75] and sim.get_color() == curve.get_color()
        assert list(target.get_ydata()) == [0.8, 0.8]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="3 utilizations"):
        plot_ttft_vs_utilization([0.1, 0.2, 0.3], {"x": [1.0]}, 1.0)


def test_spike_and_retry_storm_draw_one_outline_per_series():
    fig = plot_spike([0, 1, 2], {"accept all": [0, 5, 2], "cap": [0, 3, 0]}, (0.5, 1.5))
    try:
        assert [list(line.get_ydata()) for line in fig.axes[0].lines] == [[0, 5, 2], [0, 3, 0]]
    finally:
        plt.close(fig)
    fig = plot_retry_storm({"no jitter": [0.1, 0.1, 0.1, 1.2], "jitter": [0.1, 0.6, 1.1, 1.7]}, 0.5, 2.0)
    try:
        storm, spread = fig.axes[0].lines
        assert list(storm.get_ydata()) == [3, 0, 1, 0] and list(spread.get_ydata()) == [1, 1, 1, 1]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="bin_s"):
        plot_retry_storm({"x": [1.0]}, 0.0, 1.0)
