"""servelab.plots.fairness: the tenant's share under two schedulers, the TPOT against batch decodes, checked through
what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.fairness import plot_tenant_share, plot_tpot_interference  # noqa: E402


def test_tenant_share_draws_one_line_per_scheduler_and_the_fair_share():
    fig = plot_tenant_share({"turns": ([0, 1, 2], [0.9, 0.95, 0.96]), "counter": ([0, 1], [0.4, 0.5])}, fair=0.5)
    try:
        turns, counter, fair = fig.axes[0].lines
        assert list(turns.get_ydata()) == [0.9, 0.95, 0.96] and list(counter.get_xdata()) == [0, 1]
        assert list(fair.get_ydata()) == [0.5, 0.5]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="2 times for 1"):
        plot_tenant_share({"x": ([0, 1], [0.5])})


def test_tpot_interference_draws_milliseconds_and_the_target():
    fig = plot_tpot_interference([0, 8], {"16K": [0.010, 0.015]}, target_s=0.025)
    try:
        line, target = fig.axes[0].lines
        assert list(line.get_ydata()) == pytest.approx([10, 15]) and list(target.get_ydata()) == [25, 25]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="1 values for 2"):
        plot_tpot_interference([0, 8], {"x": [1]})
