"""servelab.plots.parallelism: the degree's two panels and the CUDA-graph cliff, checked through what they draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.parallelism import plot_cliff, plot_degree  # noqa: E402


def test_degree_draws_kv_in_millions_and_the_all_reduces_on_top():
    fig = plot_degree([2, 4], [1e6, 3e6], [0.020, 0.010], [0.001, 0.002])
    try:
        kv, step = fig.axes[0], fig.axes[1]
        assert [b.get_height() for b in kv.patches] == pytest.approx([1, 3])
        heights = [b.get_height() for b in step.patches]
        assert heights == pytest.approx([19, 8, 1, 2])
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="one KV capacity"):
        plot_degree([2], [1e6, 2e6], [0.1], [0.0])


def test_cliff_draws_one_line_per_launch_and_the_largest_graph():
    fig = plot_cliff([511, 512, 513], {"full": [0.015, 0.015, 0.018]}, largest=512)
    try:
        line, largest = fig.axes[0].lines
        assert list(line.get_ydata()) == pytest.approx([15, 15, 18]) and list(largest.get_xdata()) == [512, 512]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="2 values for 3"):
        plot_cliff([1, 2, 3], {"x": [0.1, 0.2]})
