"""Pictures for chapter 16 (parallelism and CUDA graphs): what the TP degree does to the KV cache and the step, and
the step-time cliff past the largest CUDA graph.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_cliff", "plot_degree"]


def plot_degree(degrees: Sequence[int], kv_tokens: Sequence[float], step_s: Sequence[float],
                comm_s: Sequence[float], title: str | None = None):
    """Two panels against the TP degree: the KV tokens the group holds (millions), and the decode step (ms) with
    its all-reduce share drawn beneath it."""
    if not degrees or not len(degrees) == len(kv_tokens) == len(step_s) == len(comm_s):
        raise ValueError("give one KV capacity, one step and one all-reduce time per degree")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    x = np.arange(len(degrees))
    left.bar(x, np.asarray(kv_tokens, dtype=float) / 1e6, color="tab:blue")
    left.set_ylabel("KV tokens the group holds (millions)")
    step, comm = np.asarray(step_s, dtype=float) * 1e3, np.asarray(comm_s, dtype=float) * 1e3
    right.bar(x, step - comm, color="tab:gray", label="roofline + overhead")
    right.bar(x, comm, bottom=step - comm, color="tab:red", label="all-reduces")
    right.set_ylabel("decode step (ms)")
    right.legend(fontsize=8, frameon=False)
    for ax in (left, right):
        ax.set_xticks(x, [f"TP{d}" for d in degrees])
    if title:
        fig.suptitle(title)
    return fig


def plot_cliff(batches: Sequence[int], step_s: Mapping[str, Sequence[float]], largest: int | None = None,
               title: str | None = None):
    """The decode step (ms) against the batch, one line per way of launching it (label -> seconds at each batch);
    `largest`, if given, a dotted line at the largest captured CUDA-graph size."""
    if not batches or not step_s:
        raise ValueError("give at least one batch size and one line")
    fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    x = np.asarray(batches, dtype=float)
    for label, ys in step_s.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} batch sizes")
        ax.step(x, np.asarray(ys, dtype=float) * 1e3, where="post", lw=1.6, label=label)
    if largest is not None:
        ax.axvline(largest, color="black", ls=":", lw=1, label=f"largest graph ({largest})")
    ax.set_xlabel("decoding sequences in the step")
    ax.set_ylabel("step time (ms)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
