"""Pictures for chapter 07 (the engine): what each step computed, and batched output against solo output.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

__all__ = ["plot_batched_vs_solo", "plot_engine_steps"]

PREFILL, DECODE = "#d62728", "#1f77b4"


def plot_engine_steps(steps: Sequence[tuple[str, int, int]], ax=None, title: str | None = None):
    """One bar per engine step (`LLM.steps`: kind, tokens computed, sequences in the batch): its height the
    tokens the model ran, red for a prefill step and blue for a decode step; the black line is the batch size."""
    if not steps:
        raise ValueError("steps is empty: run the engine first (LLM.generate or LLM.step)")
    kinds = [k for k, _, _ in steps]
    if not set(kinds) <= {"prefill", "decode"}:
        raise ValueError(f"a step is 'prefill' or 'decode', not {sorted(set(kinds) - {'prefill', 'decode'})[0]!r}")
    fig, ax = plt.subplots(figsize=(9, 3), layout="constrained") if ax is None else (ax.figure, ax)
    x = np.arange(len(steps))
    ax.bar(x, [t for _, t, _ in steps], width=0.85, color=[PREFILL if k == "prefill" else DECODE for k in kinds])
    ax.plot(x, [n for _, _, n in steps], color="black", lw=1.2, drawstyle="steps-mid")
    ax.set_xlabel("engine step")
    ax.set_ylabel("tokens computed")
    ax.set_xlim(-0.6, len(steps) - 0.4)
    ax.set_ylim(0, 1.3 * max(max(t for _, t, _ in steps), max(n for _, _, n in steps)))
    ax.legend(handles=[Patch(color=PREFILL, label="prefill step"), Patch(color=DECODE, label="decode step"),
                       plt.Line2D([], [], color="black", label="sequences in the batch")], loc="upper center",
              ncol=3, frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_batched_vs_solo(batched: Sequence[Sequence[int]], solo: Sequence[Sequence[int]], ax=None,
                         title: str | None = None):
    """A grid with one row per request and one column per generated token: green where the batched engine gave
    the token generating the request alone gives, red where it differs, grey where one of the two is shorter."""
    if len(batched) != len(solo) or not solo:
        raise ValueError(f"one output per request on each side: {len(batched)} batched, {len(solo)} solo")
    width = max(max(len(b), len(s)) for b, s in zip(batched, solo, strict=True))
    grid = np.full((len(solo), max(width, 1)), 3)     # 3: neither side has a token here
    for i, (b, s) in enumerate(zip(batched, solo, strict=True)):
        for j in range(max(len(b), len(s))):
            grid[i, j] = 2 if j >= min(len(b), len(s)) else 0 if b[j] == s[j] else 1
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(solo) + 1.2), layout="constrained") if ax is None else \
        (ax.figure, ax)
    ax.imshow(grid, cmap=ListedColormap(["#2ca02c", "#d62728", "#7f7f7f", "white"]), vmin=0, vmax=3,
              aspect="auto", interpolation="nearest")
    ax.set_xticks(np.arange(-0.5, grid.shape[1]), minor=True)
    ax.set_yticks(np.arange(-0.5, grid.shape[0]), minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel("generated token")
    ax.set_ylabel("request")
    same = sum(list(b) == list(s) for b, s in zip(batched, solo, strict=True))
    ax.set_title(title or f"{same} of {len(solo)} requests generate exactly what they generate alone")
    ax.legend(handles=[Patch(color="#2ca02c", label="same token"), Patch(color="#d62728", label="different"),
                       Patch(color="#7f7f7f", label="one side shorter")], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig
