"""servelab.plots.moe_mla: each figure draws its lines and refuses inputs that do not line up."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.moe_mla import plot_kv_per_gpu, plot_weights_read  # noqa: E402


def test_weights_read_draws_lines_and_sampled_markers():
    fig = plot_weights_read([1, 2, 4], {"a": [0.2, 0.4, 0.8]}, {"a, sampled": [0.2, 0.4, 0.8]}, title="t")
    assert len(fig.axes[0].lines) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="values for 3"):
        plot_weights_read([1, 2, 4], {"a": [0.2]})
    with pytest.raises(ValueError, match="at least one"):
        plot_weights_read([], {})


def test_kv_per_gpu_draws_one_line_a_layout():
    fig = plot_kv_per_gpu([1, 2], {"MLA": [70272, 70272], "GQA": [249856, 124928]})
    assert len(fig.axes[0].lines) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="values for 2"):
        plot_kv_per_gpu([1, 2], {"MLA": [1]})
