"""servelab.plots.radix: the radix tree drawn (node states, layout, sizes) and hit rate against cache size."""

import doctest

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import servelab.plots.radix as plots_radix_module  # noqa: E402
from servelab.engine.prefix_compare import CacheRun  # noqa: E402
from servelab.plots.radix import (  # noqa: E402
    BOX_KEY,
    LEGEND_LABELS,
    NODE_COLORS,
    plot_hit_rate_vs_cache_size,
    plot_radix_tree,
    plot_radix_trees,
    tree_layout,
)
from servelab.schedulers.radix_cache import RadixCache  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _tree():
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5, 6], range(100, 106))
    cache.insert([1, 2, 3, 7, 8], range(200, 205))
    cache.insert([9, 9], range(400, 402))
    cache.inc_lock_ref(cache.match_prefix([1, 2, 3, 7, 8])[1])
    return cache


def _boxes(ax):
    return {t.get_text().splitlines()[0]: to_hex(t.get_bbox_patch().get_facecolor()) for t in ax.texts}


def test_docstring_examples():
    result = doctest.testmod(plots_radix_module)
    assert result.attempted >= 4 and result.failed == 0


def test_layout_puts_leaves_in_order_and_parents_over_their_children():
    views = _tree().snapshot()
    pos, parents = tree_layout(views)
    keys = [v.key for v in views]
    assert keys == [(), (1, 2, 3), (4, 5, 6), (7, 8), (9, 9)]
    assert parents == [None, 0, 1, 1, 0]
    assert [x for x, _ in pos] == [1.25, 0.5, 0.0, 1.0, 2.0] and [y for _, y in pos] == [0, -1, -2, -2, -1]


def test_each_node_is_a_box_coloured_by_its_state():
    fig = plot_radix_tree(_tree(), title="demo")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    boxes = _boxes(ax)
    assert boxes == {"root": NODE_COLORS["root"], "[1,2,3]": NODE_COLORS["locked"],
                     "[4,5,6]": NODE_COLORS["evictable leaf"], "[7,8]": NODE_COLORS["locked"],
                     "[9,9]": NODE_COLORS["evictable leaf"]}
    texts = {t.get_text() for t in ax.texts}
    assert "[7,8]\nkv 203..204\nr=1 t=8" in texts
    assert ax.get_title(loc="left") == "demo: 10 tokens (evictable 5, protected 5)"
    assert len(ax.lines) == 4                                             # one edge per non-root node
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [LEGEND_LABELS["locked"], LEGEND_LABELS["evictable leaf"], LEGEND_LABELS["unlocked"], BOX_KEY]
    assert [to_hex(h.get_facecolor()) for h in ax.get_legend().legend_handles[:3]] == \
        [NODE_COLORS["locked"], NODE_COLORS["evictable leaf"], NODE_COLORS["unlocked"]]


def test_the_legend_says_what_each_colour_and_each_line_of_a_box_means():
    assert "r \u2265 1" in LEGEND_LABELS["locked"] and "protected" in LEGEND_LABELS["locked"]
    assert "no children" in LEGEND_LABELS["evictable leaf"] and "evict()" in LEGEND_LABELS["evictable leaf"]
    assert "has children" in LEGEND_LABELS["unlocked"]
    assert all(w in BOX_KEY for w in ("tokens on the edge into the node", "KV slots", "lock_ref", "last access"))
    legend = plot_radix_tree(_tree(), show_kv=False).axes[0].get_legend()
    assert legend.get_texts()[-1].get_text() == BOX_KEY.replace(", kv = their KV slots", "")
    assert all(t.get_fontsize() >= 9 for t in legend.get_texts())


def test_a_snapshot_draws_the_tree_as_it_was():
    cache = _tree()
    before = cache.snapshot()
    cache.evict(10**6)
    old, new = plot_radix_tree(before).axes[0], plot_radix_tree(cache).axes[0]
    assert "[9,9]" in _boxes(old) and "[9,9]" not in _boxes(new)
    assert _boxes(new) == {"root": NODE_COLORS["root"], "[1,2,3]": NODE_COLORS["locked"],
                           "[7,8]": NODE_COLORS["locked"]}


def test_long_edges_are_shortened_and_scattered_slots_listed():
    cache = RadixCache()
    cache.insert(list(range(20)), [5, 9, 2] + list(range(50, 67)))
    label = plot_radix_tree(cache, max_tokens=4).axes[0].texts[1].get_text()
    assert label.splitlines()[:2] == ["[0,1,2,…(+17)]", "kv [5,9,2,…(+17)]"]
    cache.reset()
    assert [t.get_text() for t in plot_radix_tree(cache).axes[0].texts] == ["root"]


def test_trees_side_by_side_share_one_legend():
    cache = _tree()
    before = cache.snapshot()
    cache.evict(3)
    fig = plot_radix_trees([("before", before), ("after evict(3)", cache)])
    assert [ax.get_title(loc="left").split(":")[0] for ax in fig.axes] == ["before", "after evict(3)"]
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    with pytest.raises(ValueError, match="no trees to draw"):
        plot_radix_trees([])
    with pytest.raises(ValueError, match="pass a RadixCache or its snapshot"):
        plot_radix_tree([])


def _runs(label, points):
    return [CacheRun(label, size, 100, hits, pre, 10) for size, hits, pre in points]


def test_hit_rate_lines_one_panel_per_workload_hollow_markers_for_preemption():
    sweeps = {
        "chats": {"radix (page 1)": _runs("radix (page 1)", [(256, 30, 2), (1024, 80, 0)]),
                  "block hash (16)": _runs("block hash (16)", [(256, 20, 1), (1024, 70, 0)])},
        "few-shot": {"radix (page 1)": _runs("radix (page 1)", [(512, 50, 0), (2048, 75, 0)])},
    }
    fig = plot_hit_rate_vs_cache_size(sweeps)
    left, right = fig.axes
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["chats", "few-shot"]
    solid = [ln for ln in left.lines if ln.get_linestyle() == "-"]
    assert [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in solid] == [([256, 1024], [0.3, 0.8]),
                                                                               ([256, 1024], [0.2, 0.7])]
    hollow = [ln for ln in left.lines if ln.get_linestyle() == "None"]
    assert [list(ln.get_xdata()) for ln in hollow] == [[256], [256]]
    assert [to_hex(ln.get_markerfacecolor()) for ln in hollow] == ["#ffffff", "#ffffff"]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["radix (page 1)", "block hash (16)",
                                                                      "a run that preempted"]
    assert [t.get_text() for t in right.get_xticklabels()] == ["512", "2048"] and right.get_ylim() == (0, 1)
    with pytest.raises(ValueError, match="no sweeps to draw"):
        plot_hit_rate_vs_cache_size({})
    _, axes = plt.subplots(1, 3)
    with pytest.raises(ValueError, match="need 2 Axes, got 3"):
        plot_hit_rate_vs_cache_size(sweeps, axes=axes)
