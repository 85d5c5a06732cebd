"""servelab.plots.disaggregation: the stretch of a mixed step and goodput per GPU, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.disaggregation import plot_goodput, plot_stretch  # noqa: E402


def test_stretch_draws_milliseconds_and_the_decode_only_step():
    fig = plot_stretch([0, 4000], {"32 decodes": [0.010, 0.060]}, decode_only_s=0.010)
    try:
        line, alone = fig.axes[0].lines
        assert list(line.get_ydata()) == pytest.approx([10, 60]) and list(alone.get_ydata()) == [10, 10]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="1 values for 2"):
        plot_stretch([0, 1], {"x": [0.1]})


def test_goodput_draws_one_line_per_fleet():
    fig = plot_goodput([1000, 4000], {"split": [20, 6.25], "mixed": [25, 5.56]}, xlabel="prompt tokens")
    try:
        split, mixed = fig.axes[0].lines
        assert list(split.get_ydata()) == [20, 6.25] and fig.axes[0].get_ylim()[0] == 0
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="at least one"):
        plot_goodput([], {}, xlabel="x")
