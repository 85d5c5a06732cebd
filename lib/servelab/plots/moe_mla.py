"""Pictures for chapter 17 (quantization, mixture of experts, latent KV): the share of a model's weights a decode step
reads against the batch, and the KV bytes a token costs per GPU against the tensor-parallel degree.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_kv_per_gpu", "plot_weights_read"]


def plot_weights_read(batches: Sequence[int], lines: Mapping[str, Sequence[float]],
                      sampled: Mapping[str, Sequence[float]] | None = None, ax=None, title: str | None = None):
    """The share of each model's weights one decode step reads (label -> shares at each batch), on a log batch axis;
    `sampled` (label -> shares at the same batches), if given, as markers: a simulation of the same steps."""
    if not batches or not lines:
        raise ValueError("give at least one batch size and one line")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(batches, dtype=float)
    for label, ys in lines.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} batch sizes")
        ax.plot(x, np.asarray(ys, dtype=float) * 100, lw=1.6, label=label)
    for label, ys in (sampled or {}).items():
        if len(ys) != len(x):
            raise ValueError(f"sampled {label!r} has {len(ys)} values for {len(x)} batch sizes")
        ax.plot(x, np.asarray(ys, dtype=float) * 100, ls="none", marker="o", ms=4, mfc="none", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(int(b)) for b in batches])
    ax.set_ylim(0, 105)
    ax.set_xlabel("decoding sequences in the step")
    ax.set_ylabel("weights read a step (% of all)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_kv_per_gpu(degrees: Sequence[int], kv_bytes: Mapping[str, Sequence[float]], ax=None,
                    title: str | None = None):
    """KV bytes one token costs on each GPU (drawn in KiB, log scale) against the tensor-parallel degree, one line
    per attention layout (label -> bytes at each degree)."""
    if not degrees or not kv_bytes:
        raise ValueError("give at least one degree and one line")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.asarray(degrees, dtype=float)
    for label, ys in kv_bytes.items():
        if len(ys) != len(x):
            raise ValueError(f"line {label!r} has {len(ys)} values for {len(x)} degrees")
        ax.plot(x, np.asarray(ys, dtype=float) / 1024, marker="o", ms=3, lw=1.6, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x, [str(int(d)) for d in degrees])
    ax.set_xlabel("tensor-parallel GPUs")
    ax.set_ylabel("KV per token per GPU (KiB)")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    return fig
