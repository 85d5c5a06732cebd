"""servelab.plots.routing: the routers' hit rates and TTFTs, the keys a resize keeps, checked through what they
draw."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from servelab.plots.routing import plot_keys_kept, plot_routers  # noqa: E402


def test_routers_draw_the_hit_rate_and_ttft_in_ms():
    fig = plot_routers({"a": (0.5, 0.010, 0.020), "b": (0.8, 1.0, 2.0)})
    try:
        hits, ttft = fig.axes
        assert [p.get_width() for p in hits.patches] == [0.5, 0.8]
        assert [p.get_width() for p in ttft.patches] == pytest.approx([10, 1000, 20, 2000])
    finally:
        plt.close(fig)
    with pytest.raises(ValueError):
        plot_routers({})


def test_keys_kept_draws_one_line_per_scheme():
    fig = plot_keys_kept([2, 3], {"modulo": [1 / 3, 1 / 4], "ring": [2 / 3, 3 / 4]})
    try:
        mod, ring = fig.axes[0].lines
        assert list(ring.get_ydata()) == pytest.approx([2 / 3, 3 / 4])
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="1 values for 2"):
        plot_keys_kept([2, 3], {"x": [0.5]})
