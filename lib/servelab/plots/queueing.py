"""Pictures for chapter 12 (queueing and overload): the p99 TTFT against utilization with the target it must meet,
a spike's backlog under each admission rule, and the arrivals of retrying clients with and without jitter.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_retry_storm", "plot_spike", "plot_ttft_vs_utilization"]


def plot_ttft_vs_utilization(rhos: Sequence[float], curves: Mapping[str, Sequence[float]], target_s: float,
                             simulated: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
                             ax=None, title: str | None = None):
    """One line per service-time distribution (label -> p99 TTFT in seconds at each utilization; inf or values
    past 4x the target not drawn), the target as a dashed horizontal line, and simulated points where given
    (label -> (utilizations, p99 TTFTs), drawn as dots in the matching line's colour)."""
    if not rhos or not curves:
        raise ValueError("give at least one utilization and one curve")
    for name, values in curves.items():
        if len(values) != len(rhos):
            raise ValueError(f"curve {name!r} has {len(values)} values for {len(rhos)} utilizations")
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(rhos, dtype=float)
    colours = {}
    for name, values in curves.items():
        y = np.array([v if math.isfinite(v) and v <= 4 * target_s else np.nan for v in values], dtype=float)
        (line,) = ax.plot(x, y, lw=1.8, label=name)
        colours[name] = line.get_color()
    for name, (xs, ys) in (simulated or {}).items():
        ax.plot(xs, ys, "o", ms=5, color=colours.get(name, "black"), label=f"{name}: simulated")
    ax.axhline(target_s, color="black", ls="--", lw=1, label=f"target {target_s:g} s")
    ax.set_xlabel("utilization of the prefill server (arrival rate x mean prefill time)")
    ax.set_ylabel("p99 time to first token (s)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 4 * target_s)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def plot_spike(times_s: Sequence[float], backlogs: Mapping[str, Sequence[float]], spike: tuple[float, float],
               ax=None, title: str | None = None, ylabel: str = "requests waiting"):
    """The waiting queue over time under each rule (label -> its length at each time), with the spike's interval
    `spike` = (start_s, end_s) shaded."""
    if not times_s or not backlogs:
        raise ValueError("give at least one time and one series")
    for name, values in backlogs.items():
        if len(values) != len(times_s):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(times_s)} times")
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    for name, values in backlogs.items():
        ax.step(times_s, values, where="post", lw=1.6, label=name)
    ax.axvspan(*spike, color="#d62728", alpha=0.1, label="spike")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def plot_retry_storm(arrivals: Mapping[str, Sequence[float]], bin_s: float, end_s: float, ax=None,
                     title: str | None = None):
    """How many attempts (first sends and retries) arrive in each `bin_s`-second bin up to `end_s`, one
    histogram outline per label (label -> the attempts' arrival times)."""
    if not arrivals:
        raise ValueError("give at least one series of arrival times")
    if not bin_s > 0 or not end_s > 0:
        raise ValueError(f"bin_s and end_s must be > 0, got {bin_s!r} and {end_s!r}")
    fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    edges = np.arange(0.0, end_s + bin_s, bin_s)
    for name, times in arrivals.items():
        counts, _ = np.histogram(np.asarray(times, dtype=float), bins=edges)
        ax.step(edges[:-1], counts, where="post", lw=1.6, label=name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"attempts arriving per {bin_s * 1000:g} ms")
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    if title:
        ax.set_title(title)
    return fig
