"""Pictures for chapter 14 (disaggregated prefill and decode): a decode step's time with a prefill chunk in it, and
the goodput per GPU of a split fleet against a mixed one.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_goodput", "plot_stretch"]


def plot_stretch(chunks: Sequence[int], step_s: Mapping[str, Sequence[float]], decode_only_s: float | None = None,
                 ax=None, title: str | None = None):
    """The step every running decode waits for (drawn in ms) against the prefill chunk in it, one line per decode
    batch (label -> seconds at each chunk); `decode_only_s`, if given, a dashed line: the decodes' step alone."""
    if not chunks or not step_s:
        raise ValueError("give at least one chunk size and one line")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(chunks, dtype=float)
    for label, ys in step_s.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} chunk sizes")
        ax.plot(x, np.asarray(ys, dtype=float) * 1e3, marker="o", ms=3, lw=1.6, label=label)
    if decode_only_s is not None:
        ax.axhline(decode_only_s * 1e3, color="black", ls="--", lw=1, label="decode-only step")
    ax.set_xlabel("prefill tokens in the same step")
    ax.set_ylabel("step time = every decode's TPOT (ms)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_goodput(xs: Sequence[float], lines: Mapping[str, Sequence[float]], xlabel: str, ax=None,
                 title: str | None = None):
    """Requests/s per GPU meeting both targets against `xs` (prompt lengths, TPOT targets...), one line per fleet."""
    if not xs or not lines:
        raise ValueError("give at least one x and one line")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(xs, dtype=float)
    for label, ys in lines.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} points")
        ax.plot(x, np.asarray(ys, dtype=float), marker="o", ms=3, lw=1.6, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("goodput (requests/s per GPU)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
