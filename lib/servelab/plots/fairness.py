"""Pictures for chapter 13 (fairness and priority): a tenant's share of the GPU over a run under two schedulers,
and the interactive TPOT against the batch-class decodes sharing its steps.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_tenant_share", "plot_tpot_interference"]


def plot_tenant_share(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], fair: float | None = None,
                      ax=None, title: str | None = None, ylabel: str = "share of the GPU-seconds so far"):
    """One line per scheduler: label -> (times, the tenant's cumulative share of the GPU at each time); `fair`, if
    given, a dashed horizontal line (the share a fair scheduler owes it)."""
    if not curves:
        raise ValueError("give at least one curve")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    for label, (t, share) in curves.items():
        if len(t) != len(share):
            raise ValueError(f"curve {label!r}: {len(t)} times for {len(share)} shares")
        ax.plot(np.asarray(t, dtype=float), np.asarray(share, dtype=float), lw=1.8, label=label)
    if fair is not None:
        ax.axhline(fair, color="black", ls="--", lw=1, label=f"fair share = {fair:.0%}")
    ax.set_ylim(0, 1)
    ax.set_xlabel("seconds")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_tpot_interference(batch_decodes: Sequence[int], tpot_s: Mapping[str, Sequence[float]],
                           target_s: float | None = None, ax=None, title: str | None = None):
    """Interactive TPOT (drawn in ms) against the number of batch-class decodes in each step, one line per batch
    context (label -> seconds at each count); `target_s`, if given, a dashed horizontal line."""
    if not batch_decodes or not tpot_s:
        raise ValueError("give at least one batch count and one line")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(batch_decodes, dtype=float)
    for label, ys in tpot_s.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} batch counts")
        ax.plot(x, np.asarray(ys, dtype=float) * 1e3, marker="o", ms=3, lw=1.6, label=label)
    if target_s is not None:
        ax.axhline(target_s * 1e3, color="black", ls="--", lw=1, label=f"TPOT target {target_s * 1e3:g} ms")
    ax.set_xlabel("batch-class sequences decoding in the same step")
    ax.set_ylabel("interactive TPOT (ms)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
