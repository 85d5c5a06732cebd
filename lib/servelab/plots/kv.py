"""Pictures for chapter 08 (preemption and KV tiers): what one host copy delivers against the break-even, and
swap against recompute as a parameter sweeps past their crossover.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from servelab.analytic import kv_tiers

__all__ = ["plot_copy_bandwidth", "plot_swap_vs_recompute"]

LINK, SWAP, RECOMPUTE = "#333333", "#d62728", "#1f77b4"
MODEL_COLORS = ("#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def plot_copy_bandwidth(link_bandwidth: float, copy_latency_s: float, break_even: Mapping[str, float],
                        copy_sizes: Mapping[str, Mapping[int, float]], ax=None, title: str | None = None):
    """Effective bandwidth of one copy against its size (log-log, GB/s): size / (latency + size / link), with
    the link's own bandwidth dashed; one horizontal line per model at its break-even bandwidth (`break_even`,
    bytes/s by model name) and, on the curve, one marker per block size at that model's copy size
    (`copy_sizes[model][block_size]`, bytes). A marker under its model's line is a copy for which recomputing
    is cheaper."""
    if not break_even:
        raise ValueError("break_even is empty: give each model's break-even bandwidth (bytes/s)")
    if set(copy_sizes) - set(break_even):
        raise ValueError(f"copy_sizes names {sorted(set(copy_sizes) - set(break_even))[0]!r}, which has no "
                         "break-even bandwidth")
    sizes = [s for per in copy_sizes.values() for s in per.values()]
    lo, hi = min([1e3, *sizes]) / 2, max([1e8, *sizes]) * 2
    x = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained") if ax is None else (ax.figure, ax)
    eff = [kv_tiers.effective_copy_bandwidth(s, link_bandwidth, copy_latency_s) / 1e9 for s in x]
    ax.plot(x, eff, color=LINK, lw=2, label=f"one copy, {copy_latency_s * 1e6:g} us fixed cost")
    ax.axhline(link_bandwidth / 1e9, color=LINK, ls="--", lw=1, label=f"link, {link_bandwidth / 1e9:g} GB/s")
    for k, (name, be) in enumerate(break_even.items()):
        color = MODEL_COLORS[k % len(MODEL_COLORS)]
        ax.axhline(be / 1e9, color=color, lw=1.2, label=f"{name} break-even, {be / 1e9:.3g} GB/s")
        for block_size, size in sorted(copy_sizes.get(name, {}).items()):
            y = kv_tiers.effective_copy_bandwidth(size, link_bandwidth, copy_latency_s) / 1e9
            ax.plot([size], [y], "o" if k % 2 == 0 else "s", color=color, ms=6)
            # one model's labels above the curve, the next one's below, so equal copy sizes stay readable
            ax.annotate(str(block_size), (size, y), textcoords="offset points",
                        xytext=(-14, 6) if k % 2 == 0 else (5, -12), fontsize=8, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes in one copy (markers: one block of one layer's K, by block size)")
    ax.set_ylabel("effective bandwidth (GB/s)")
    ax.legend(fontsize=8, loc="lower right", frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_swap_vs_recompute(x: Sequence[float], swap_s: Sequence[float], recompute_s: float | Sequence[float],
                           xlabel: str, crossover: Mapping[str, float] | None = None, log_x: bool = False, ax=None,
                           title: str | None = None):
    """Run time (s) with swap preemption against a swept parameter `x` (red), beside recompute's (blue: one
    number, or one per x); each `crossover` entry (label -> x) is a vertical line where the two meet."""
    x, swap_s = np.asarray(x, dtype=float), np.asarray(swap_s, dtype=float)
    if x.ndim != 1 or x.size == 0 or swap_s.shape != x.shape:
        raise ValueError(f"x and swap_s must be 1-D and the same length, got {x.shape} and {swap_s.shape}")
    rec = np.broadcast_to(np.asarray(recompute_s, dtype=float), x.shape)
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    ax.plot(x, swap_s, "o-", color=SWAP, label="swap")
    ax.plot(x, rec, "-", color=RECOMPUTE, label="recompute")
    for k, (label, at) in enumerate((crossover or {}).items()):
        ax.axvline(at, color="black", ls=(":" if k else "--"), lw=1, label=label)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time to finish the workload (s)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
