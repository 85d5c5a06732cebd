"""Pictures for chapter 09 (capacity): the ceilings on running sequences against context length, Little's law's
fixed point against the simulator, and a fleet's bill split by phase.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_ceilings", "plot_fleet_split", "plot_resident"]

PREFILL, DECODE = "#d62728", "#1f77b4"


def plot_ceilings(contexts: Sequence[int], ceilings: Mapping[str, Sequence[float]], default: int | None = None,
                  ax=None, title: str | None = None, cliff: int | None = None):
    """One line per ceiling (name -> its value at each context; `math.inf` where there is none, not drawn), log
    axes; the lowest at each context shaded below; `default`, if given, a dashed horizontal line (a scheduler's
    max_num_seqs); `cliff`, if given, a dotted line that is no ceiling (the largest CUDA-graph batch: bigger
    batches run, eagerly, with slower steps)."""
    if not contexts or not ceilings:
        raise ValueError("give at least one context and one ceiling")
    for name, values in ceilings.items():
        if len(values) != len(contexts):
            raise ValueError(f"ceiling {name!r} has {len(values)} values for {len(contexts)} contexts")
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(contexts, dtype=float)
    lowest = np.full(len(x), np.inf)
    for name, values in ceilings.items():
        y = np.array([v if math.isfinite(v) else np.nan for v in values], dtype=float)
        ax.plot(x, y, marker="o", ms=3, lw=1.6, label=name)
        lowest = np.fmin(lowest, y)
    ax.fill_between(x, 1, lowest, color="#2ca02c", alpha=0.12, label="sequences that can run")
    if default is not None:
        ax.axhline(default, color="black", ls="--", lw=1, label=f"max_num_seqs = {default:,}")
    if cliff is not None:
        ax.axhline(cliff, color="gray", ls=":", lw=1.2, label=f"CUDA graphs up to {cliff:,}: eager, slower steps above")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("tokens of context per sequence")
    ax.set_ylabel("running sequences")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title)
    return fig


def plot_resident(rates: Sequence[float], fixed_point: Sequence[float], naive: Sequence[float],
                  simulated: Mapping[float, float] | None = None, wall: float | None = None, ax=None,
                  title: str | None = None, limits: Mapping[str, float] | None = None):
    """Resident sequences against the arrival rate: the fixed point (a line, cut where it is infinite), the
    naive batch-1 answer (dashed), the simulator's time-weighted means (dots: rate -> mean, where given), the
    rate where the fixed point diverges (a vertical line, where given) and, where given, each rate at which the
    steady state ends by cause (`limits`: name -> rate, dotted vertical lines)."""
    if not (len(rates) == len(fixed_point) == len(naive)) or len(rates) == 0:
        raise ValueError("rates, fixed_point and naive must be as long as each other, and not empty")
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(rates, dtype=float)
    y = np.array([v if math.isfinite(v) else np.nan for v in fixed_point], dtype=float)
    ax.plot(x, y, color="black", lw=1.8, label="fixed point N = rate L a / (1 - rate L b)")
    ax.plot(x, np.asarray(naive, dtype=float), color="#7f7f7f", ls="--", lw=1.4, label="naive: rate L t(1)")
    if simulated:
        ax.plot(list(simulated), list(simulated.values()), "o", color="#ff7f0e", ms=6,
                label="simulator (time-weighted mean)")
    if wall is not None:
        ax.axvline(wall, color="#d62728", lw=1, label=f"no fixed point past {wall:.0f} requests/s")
    for (name, rate), color in zip((limits or {}).items(), ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b")):
        ax.axvline(rate, color=color, ls=":", lw=1.4, label=f"{name}: {rate:.0f} requests/s")
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("running sequences")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def plot_fleet_split(labels: Sequence[str], prefill: Sequence[float], decode: Sequence[float], unit: str = "$/day",
                     ax=None, title: str | None = None):
    """One horizontal stacked bar per configuration: the prefill part (red) and the decode part (blue) of its
    cost, with the prefill share written at the end of the bar."""
    if not (len(labels) == len(prefill) == len(decode)) or not labels:
        raise ValueError("labels, prefill and decode must be as long as each other, and not empty")
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.2), layout="constrained") if ax is None else \
        (ax.figure, ax)
    y = np.arange(len(labels))[::-1]
    p, d = np.asarray(prefill, dtype=float), np.asarray(decode, dtype=float)
    ax.barh(y, p, color=PREFILL, label="prefill")
    ax.barh(y, d, left=p, color=DECODE, label="decode")
    for yi, pi, di in zip(y, p, d, strict=True):
        ax.text(pi + di, yi, f"  {pi / (pi + di):.0%} prefill", va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_xlabel(unit)
    ax.set_xlim(0, 1.25 * float((p + d).max()))
    ax.legend(fontsize=8, frameon=False, loc="lower right")
    if title:
        ax.set_title(title)
    return fig
