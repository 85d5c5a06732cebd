"""Pictures for chapters 04 and 05: the radix tree, and prefix-cache hit rate against cache size.

Plain functions drawing with matplotlib's object API; each returns the Figure it drew on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from servelab.schedulers.radix_cache import NodeView, RadixCache

__all__ = ["BOX_KEY", "LEGEND_LABELS", "NODE_COLORS", "plot_hit_rate_vs_cache_size", "plot_radix_tree",
           "plot_radix_trees", "tree_layout"]

# face colours by node state
NODE_COLORS = {
    "root": "#dddddd",
    "locked": "#f4b183",          # lock_ref > 0: protected, on some running request's path
    "evictable leaf": "#a9d18e",  # unlocked, no children: what evict() takes first
    "unlocked": "#bdd7ee",        # unlocked internal node: evictable once its children are gone
}

# what the legend says of each colour, and of the lines in a box
LEGEND_LABELS = {
    "locked": "locked (r \u2265 1): on a running request's path, protected",
    "evictable leaf": "evictable leaf (r = 0, no children): evict() frees these, oldest t first",
    "unlocked": "unlocked inner node (r = 0, has children): evictable once its children are gone",
}
BOX_KEY = "a box: [tokens on the edge into the node], kv = their KV slots, r = lock_ref, t = last access time"


def _views(tree) -> list[NodeView]:
    if isinstance(tree, RadixCache):
        return tree.snapshot()
    views = list(tree)
    if not views or views[0].depth != 0:
        raise ValueError("pass a RadixCache or its snapshot() (root first)")
    return views


def node_state(v: NodeView) -> str:
    if v.depth == 0:
        return "root"
    if v.lock_ref > 0:
        return "locked"
    return "evictable leaf" if v.evictable_leaf else "unlocked"


def tree_layout(views: Sequence[NodeView]) -> tuple[list[tuple[float, float]], list[int | None]]:
    """(x, y) per node and each node's parent index. Leaves sit at x = 0, 1, 2, ... in the printer's order,
    a parent above the middle of its children; y is minus the depth."""
    parents: list[int | None] = []
    stack: list[int] = []
    for i, v in enumerate(views):
        while len(stack) > v.depth:
            stack.pop()
        parents.append(stack[-1] if stack else None)
        stack.append(i)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        if p is not None:
            children.setdefault(p, []).append(i)
    xs = [0.0] * len(views)
    next_leaf = 0
    for i in range(len(views)):                # leaves left to right in pre-order
        if i not in children:
            xs[i] = float(next_leaf)
            next_leaf += 1
    for i in reversed(range(len(views))):      # in pre-order a node comes before its descendants
        if i in children:
            kids = children[i]
            xs[i] = (xs[kids[0]] + xs[kids[-1]]) / 2
    return [(xs[i], -float(v.depth)) for i, v in enumerate(views)], parents


def _label(v: NodeView, max_tokens: int, show_kv: bool) -> str:
    if v.depth == 0:
        return "root"

    def short(seq):
        if len(seq) <= max_tokens:
            return ",".join(map(str, seq))
        return ",".join(map(str, seq[:max_tokens - 1])) + f",…(+{len(seq) - max_tokens + 1})"

    lines = [f"[{short(v.key)}]"]
    if show_kv:
        kv = v.value
        lines.append(f"kv {kv[0]}" if len(kv) == 1 else (
            f"kv {kv[0]}..{kv[-1]}" if list(kv) == list(range(kv[0], kv[0] + len(kv))) else f"kv [{short(kv)}]"))
    lines.append(f"r={v.lock_ref} t={v.last_access_time}")
    return "\n".join(lines)


def plot_radix_tree(tree, ax=None, title: str | None = None, max_tokens: int = 6, show_kv: bool = True,
                    legend: bool = True):
    """Draw a radix tree: one box per node with its edge's tokens, KV slots, lock_ref and last access time.

    Orange: locked (on a running request's path); green: an evictable leaf (unlocked, no children), what
    `evict` takes first; blue: an unlocked internal node. `tree` is a RadixCache or a `snapshot()` of one
    (take a snapshot to draw a tree as it was before it changed). `legend`: explain the colours and the lines
    of a box below the tree.

    >>> cache = RadixCache()
    >>> cache.insert([1, 2, 3], [10, 11, 12]), cache.insert([1, 2, 9], [20, 21, 22])
    (0, 2)
    >>> fig = plot_radix_tree(cache, title="two inserts")
    """
    views = _views(tree)
    pos, parents = tree_layout(views)
    if ax is None:
        width = max(4.0, 1.6 * (1 + max(x for x, _ in pos)))
        height = max(2.0, 1.1 * (1 + max(-y for _, y in pos)))
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    else:
        fig = ax.figure
    for i, p in enumerate(parents):
        if p is not None:
            (x0, y0), (x1, y1) = pos[p], pos[i]
            ax.plot([x0, x1], [y0, y1], color="#808080", linewidth=1, zorder=1)
    for v, (x, y) in zip(views, pos):
        ax.text(x, y, _label(v, max_tokens, show_kv), ha="center", va="center", fontsize=8, zorder=2,
                bbox={"boxstyle": "round,pad=0.3", "facecolor": NODE_COLORS[node_state(v)], "edgecolor": "#404040",
                      "linewidth": 0.6})
    xs, ys = [x for x, _ in pos], [y for _, y in pos]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.axis("off")
    total = sum(len(v.value) for v in views)
    protected = sum(len(v.value) for v in views if v.depth and v.lock_ref > 0)
    head = f"{title}: " if title else ""
    ax.set_title(f"{head}{total} tokens (evictable {total - protected}, protected {protected})", fontsize=9,
                 loc="left")
    if legend:
        ax.legend(handles=_legend_handles(show_kv), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=1,
                  fontsize=9, frameon=False, handlelength=1.6)
    return fig


def _legend_handles(show_kv: bool = True):
    """One patch per colour, then a blank one whose label says what the lines in a box are."""
    key = BOX_KEY if show_kv else BOX_KEY.replace(", kv = their KV slots", "")
    return [*(Patch(facecolor=NODE_COLORS[k], edgecolor="#404040", label=LEGEND_LABELS[k])
              for k in ("locked", "evictable leaf", "unlocked")),
            Patch(facecolor="white", edgecolor="#404040", label=key)]


def plot_radix_trees(panels: Sequence[tuple[str, object]], max_tokens: int = 6, show_kv: bool = True):
    """Several trees side by side: `panels` is a list of (title, RadixCache or snapshot). Shares one legend.

    >>> cache = RadixCache()
    >>> _ = cache.insert([1, 2, 3], [10, 11, 12]); before = cache.snapshot(); _ = cache.evict(1)
    >>> fig = plot_radix_trees([("before", before), ("after evict(1)", cache)])
    """
    panels = list(panels)
    if not panels:
        raise ValueError("no trees to draw")
    all_views = [_views(t) for _, t in panels]
    widths = [1 + max(x for x, _ in tree_layout(v)[0]) for v in all_views]
    depth = max(max(v.depth for v in views) for views in all_views)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.0, 1.6 * sum(widths)), max(2.2, 1.1 * (depth + 1) + 0.6)),
                             gridspec_kw={"width_ratios": widths}, layout="constrained", squeeze=False)
    for ax, (title, _), views in zip(axes[0], panels, all_views):
        plot_radix_tree(views, ax=ax, title=title, max_tokens=max_tokens, show_kv=show_kv, legend=False)
    fig.legend(handles=_legend_handles(show_kv), loc="outside lower center", ncol=1, fontsize=9, frameon=False,
               handlelength=1.6)
    return fig


_LINE_STYLES = ({"color": "#1f77b4", "marker": "o"}, {"color": "#d62728", "marker": "s"},
                {"color": "#2ca02c", "marker": "^"}, {"color": "#9467bd", "marker": "D"})


def plot_hit_rate_vs_cache_size(sweeps: Mapping[str, Mapping[str, Sequence]], axes=None):
    """Prefix-cache hit rate against KV-cache size, one panel per workload.

    `sweeps`: workload name -> `servelab.engine.prefix_compare.sweep_cache_sizes(...)` (label -> CacheRuns). Each
    line is one cache; a hollow marker is a run in which some request was preempted.

    >>> from servelab.engine.prefix_compare import few_shot_prompts, sweep_cache_sizes
    >>> w = few_shot_prompts(n_requests=8)
    >>> fig = plot_hit_rate_vs_cache_size({w.name: sweep_cache_sizes(w, [256, 512, 1024])})
    """
    sweeps = dict(sweeps)
    if not sweeps:
        raise ValueError("no sweeps to draw")
    if axes is None:
        fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.2), layout="constrained",
                                 squeeze=False)
        axes = list(axes[0])
    else:
        axes = [axes] if hasattr(axes, "plot") else list(axes)
        if len(axes) != len(sweeps):
            raise ValueError(f"need {len(sweeps)} Axes, got {len(axes)}")
        fig = axes[0].figure
    for ax, (name, runs_by_label) in zip(axes, sweeps.items()):
        for style, (label, runs) in zip(_LINE_STYLES * 4, runs_by_label.items()):
            runs = sorted(runs, key=lambda r: r.cache_tokens)
            xs = [r.cache_tokens for r in runs]
            ys = [r.hit_rate for r in runs]
            ax.plot(xs, ys, label=label, linewidth=1.4, markersize=5, **style)
            pre = [(x, y) for x, y, r in zip(xs, ys, runs) if r.preemptions]
            if pre:
                ax.plot([x for x, _ in pre], [y for _, y in pre], linestyle="none", marker=style["marker"],
                        markersize=7, markerfacecolor="white", markeredgecolor=style["color"], zorder=3)
        ax.set_xscale("log", base=2)
        sizes = sorted({r.cache_tokens for runs in runs_by_label.values() for r in runs})
        ax.set_xticks(sizes, [str(x) for x in sizes], fontsize=7, rotation=45)
        ax.minorticks_off()
        ax.set_ylim(0, 1)
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_xlabel("KV cache size (tokens)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("prefill tokens from the cache")
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="gray"))
    labels.append("a run that preempted")
    axes[0].legend(handles, labels, fontsize=8, loc="lower right", frameon=False)
    return fig
