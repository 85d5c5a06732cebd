"""Pictures for chapter 11 (speculative decoding): the speedup against the decode batch, one line per context,
with the simulator's points where given.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_speedup"]


def plot_speedup(batches: Sequence[int], speedups: Mapping[str, Sequence[float]],
                 simulated: Mapping[str, Mapping[int, float]] | None = None, ax=None, title: str | None = None):
    """One line per curve (label -> the speedup at each batch), log-2 batch axis, the break-even line at 1 and
    the region below it shaded; `simulated` (label -> {batch: speedup}) adds dots in the matching line's colour."""
    if len(batches) == 0 or not speedups:
        raise ValueError("give at least one batch and one curve")
    for label, values in speedups.items():
        if len(values) != len(batches):
            raise ValueError(f"curve {label!r} has {len(values)} values for {len(batches)} batches")
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(batches, dtype=float)
    colours = {}
    for label, values in speedups.items():
        (line,) = ax.plot(x, np.asarray(values, dtype=float), lw=1.8, label=label)
        colours[label] = line.get_color()
    for label, points in (simulated or {}).items():
        if label not in colours:
            raise ValueError(f"simulated points for {label!r}, which has no curve")
        bs = sorted(points)
        ax.plot(bs, [points[b] for b in bs], "o", ms=5, color=colours[label], mfc="white",
                label=f"{label}, simulated")
    ax.axhline(1.0, color="black", lw=1, ls="--")
    top = max(2.0, float(np.nanmax([np.nanmax(np.asarray(v, dtype=float)) for v in speedups.values()])) * 1.05)
    ax.axhspan(0, 1, color="#d62728", alpha=0.08, label="speculation loses")
    ax.set_ylim(0, top)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("decode batch (sequences)")
    ax.set_ylabel("tokens/s with speculation / without")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title)
    return fig
