"""servelab.plots.capacity: the ceilings, the fixed point against the simulator, the fleet's split, checked through
what they draw."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.capacity import DECODE, PREFILL, plot_ceilings, plot_fleet_split, plot_resident  # noqa: E402


def test_ceilings_draw_one_line_each_and_skip_a_missing_ridge():
    fig = plot_ceilings([256, 2048], {"KV cache": [1667, 208], "compute ridge": [912, math.inf]}, default=1024)
    try:
        ax = fig.axes[0]
        kv, ridge, cap = ax.lines
        assert list(kv.get_ydata()) == [1667, 208]
        assert ridge.get_ydata()[0] == 912 and np.isnan(ridge.get_ydata()[1])
        assert list(cap.get_ydata()) == [1024, 1024]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="2 contexts"):
        plot_ceilings([1, 2], {"x": [1]})


def test_resident_draws_the_fixed_point_the_naive_line_and_the_simulator():
    fig = plot_resident([10, 20, 30], [5, 12, math.inf], [4, 8, 12], {20: 11.5}, wall=25)
    try:
        ax = fig.axes[0]
        fixed, naive, sim, wall = ax.lines
        assert np.isnan(fixed.get_ydata()[2]) and list(naive.get_ydata()) == [4, 8, 12]
        assert list(sim.get_xdata()) == [20] and list(sim.get_ydata()) == [11.5]
        assert list(wall.get_xdata()) == [25, 25]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="as long as each other"):
        plot_resident([1, 2], [1], [1, 2])


def test_fleet_split_stacks_prefill_then_decode():
    fig = plot_fleet_split(["a", "b"], [30.0, 10.0], [10.0, 10.0])
    try:
        ax = fig.axes[0]
        bars = ax.patches
        assert [b.get_width() for b in bars] == [30.0, 10.0, 10.0, 10.0]
        assert [matplotlib.colors.to_hex(b.get_facecolor()) for b in bars] == [PREFILL] * 2 + [DECODE] * 2
        assert [t.get_text().strip() for t in ax.texts] == ["75% prefill", "50% prefill"]
    finally:
        plt.close(fig)
