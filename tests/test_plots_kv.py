"""servelab.plots.kv: the copy-bandwidth picture and the swap-vs-recompute sweep, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from servelab.analytic import kv_tiers  # noqa: E402
from servelab.plots.kv import RECOMPUTE, SWAP, plot_copy_bandwidth, plot_swap_vs_recompute  # noqa: E402


def test_copy_bandwidth_draws_the_curve_the_link_each_break_even_and_a_marker_per_block_size():
    fig = plot_copy_bandwidth(64e9, 10e-6, {"A": 20e9, "B": 4.5e9}, {"A": {16: 131072, 32: 262144}, "B": {16: 32768}})
    try:
        ax = fig.axes[0]
        curve, *rest = ax.lines
        xs, ys = curve.get_data()
        assert np.allclose(ys, [kv_tiers.effective_copy_bandwidth(s, 64e9, 10e-6) / 1e9 for s in xs])
        flat = sorted(ln.get_ydata()[0] for ln in rest if len(set(ln.get_ydata())) == 1 and len(ln.get_xdata()) == 2)
        assert flat == pytest.approx([4.5, 20.0, 64.0])                   # break-evens and the link
        markers = [ln for ln in rest if len(ln.get_xdata()) == 1]
        assert sorted(m.get_xdata()[0] for m in markers) == [32768, 131072, 262144]
        assert sorted(t.get_text() for t in ax.texts) == ["16", "16", "32"]
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    finally:
        plt.close(fig)


def test_copy_bandwidth_refuses_a_model_without_a_break_even():
    with pytest.raises(ValueError, match="break_even is empty"):
        plot_copy_bandwidth(64e9, 1e-5, {}, {})
    with pytest.raises(ValueError, match="'C'"):
        plot_copy_bandwidth(64e9, 1e-5, {"A": 1e9}, {"C": {16: 1e4}})


def test_swap_vs_recompute_draws_both_runs_and_the_crossovers():
    fig = plot_swap_vs_recompute([1, 2, 4], [3.0, 2.0, 1.0], 2.5, "block size", {"simulated": 1.6, "closed form": 1.5})
    try:
        ax = fig.axes[0]
        swap, rec, *vlines = ax.lines
        assert list(swap.get_ydata()) == [3.0, 2.0, 1.0] and matplotlib.colors.to_hex(swap.get_color()) == SWAP
        assert list(rec.get_ydata()) == [2.5] * 3 and matplotlib.colors.to_hex(rec.get_color()) == RECOMPUTE
        assert [v.get_xdata()[0] for v in vlines] == [1.6, 1.5]
        assert ax.get_xlabel() == "block size"
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="same length"):
        plot_swap_vs_recompute([1, 2], [1.0], 1.0, "x")
