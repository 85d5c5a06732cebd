"""Pictures for chapter 15 (routing across replicas): each router's prefix-cache hit rate and TTFT side by side,
and the fraction of keys a resize keeps under hash-mod-n and a consistent-hash ring.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_keys_kept", "plot_routers"]


def plot_routers(rows: Mapping[str, tuple[float, float, float]], title: str | None = None):
    """Two panels, one bar a router: label -> (hit rate, mean TTFT in seconds, p90 TTFT in seconds). The TTFT
    panel is drawn in ms on a log scale (an overloaded replica's queue is orders of magnitude above the rest)."""
    if not rows:
        raise ValueError("give at least one router")
    labels = list(rows)
    hit, mean, p90 = (np.array([rows[k][i] for k in labels], dtype=float) for i in range(3))
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    y = np.arange(len(labels))
    a.barh(y, hit, color="tab:green")
    a.set_yticks(y, labels, fontsize=8)
    a.invert_yaxis()
    a.set_xlim(0, 1)
    a.set_xlabel("prefix-cache hit rate (prompt tokens)")
    b.barh(y - 0.2, mean * 1e3, height=0.4, label="mean")
    b.barh(y + 0.2, p90 * 1e3, height=0.4, label="p90")
    b.set_yticks(y, [""] * len(labels))
    b.invert_yaxis()
    b.set_xscale("log")
    b.set_xlabel("TTFT (ms, log scale)")
    b.legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_keys_kept(replicas: Sequence[int], lines: Mapping[str, Sequence[float]], ax=None, title: str | None = None):
    """Fraction of keys kept when n replicas become n + 1, one line per scheme (label -> fraction at each n)."""
    if not replicas or not lines:
        raise ValueError("give at least one replica count and one line")
    fig, ax = plt.subplots(figsize=(6, 3.2), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(replicas, dtype=float)
    for label, ys in lines.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} replica counts")
        ax.plot(x, np.asarray(ys, dtype=float), marker="o", ms=3, lw=1.6, label=label)
    ax.set_ylim(0, 1)
    ax.set_xlabel("replicas before one is added (n)")
    ax.set_ylabel("keys kept on their replica")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
