"""Pictures for the workbook chapters.

A flat module of plain functions. Each one draws with matplotlib's object API (``fig, ax =
plt.subplots(...)``), so it works under any backend (Agg included), and returns the Figure it drew on.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from servelab.analytic import batching

__all__ = ["plot_batch_slots"]

_IDLE_FACE, _IDLE_EDGE = "#eeeeee", "#b0b0b0"


def _request_color(i: int):
    return plt.get_cmap("tab20")(i % 20)


def plot_batch_slots(out_lens, B, ax=None):
    """Gantt chart of which request occupies each of the ``B`` slots over time, static batching on top and
    continuous batching below, on the same step axis. Hatched grey is an idle slot: under static batching
    a slot idles from the end of its request until the batch's longest request ends.

    ``ax``: ``None`` (a new figure) or a pair of Axes ``(static_ax, continuous_ax)``. Returns the Figure.

    >>> fig = plot_batch_slots([20, 200, 50, 30], 2)   # top: 250 steps, 60%; bottom: 200 steps, 75%
    """
    lens = list(out_lens)
    total = {p: (batching.simulate_static if p == "static" else batching.simulate_continuous)(lens, B)[0]
             for p in ("static", "continuous")}
    n_slots = min(B, len(lens))
    if ax is None:
        fig, axes = plt.subplots(2, 1, figsize=(8, 1.3 + 0.7 * max(n_slots, 1) * 2), sharex=True,
                                 layout="constrained")
    else:
        axes = list(ax) if not hasattr(ax, "plot") else [ax]
        if len(axes) != 2:
            raise ValueError("ax must be None or a pair of Axes (static, continuous)")
        fig = axes[0].figure
    horizon = max(max(total.values()), 1)

    for a, policy in zip(axes, ("static", "continuous")):
        for k in range(n_slots):  # the whole lane starts idle; requests are painted over it
            a.broken_barh([(0, total[policy])], (k - 0.4, 0.8), facecolors=_IDLE_FACE,
                          edgecolors=_IDLE_EDGE, hatch="///", linewidth=0.5)
        for pl in batching.slot_assignments(lens, B, policy):
            width = pl.finish - pl.start
            a.broken_barh([(pl.start, width)], (pl.slot - 0.4, 0.8), facecolors=_request_color(pl.request),
                          edgecolors="black", linewidth=0.6)
            if width >= 0.04 * horizon:
                a.text(pl.start + width / 2, pl.slot, f"r{pl.request}: {lens[pl.request]}", ha="center",
                       va="center", fontsize=8)
        u = batching.utilization(lens, B, total[policy]) if lens else 0.0
        a.set_title(f"{policy} batching: {total[policy]} steps, utilization {u:.0%}", fontsize=10, loc="left")
        a.set_yticks(range(n_slots), [f"slot {k}" for k in range(n_slots)])
        a.set_ylim(max(n_slots, 1) - 0.5, -0.5)
        a.set_xlim(0, horizon)
    axes[-1].set_xlabel("decode step")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    idle = Patch(facecolor=_IDLE_FACE, edgecolor=_IDLE_EDGE, hatch="///", label="idle slot")
    axes[0].legend(handles=[idle], loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return fig


# --------------------------------------------------------------------------------------------------------
# chapter 02: the scheduler's KV blocks over time

_PREFILL_FACE, _DECODE_FACE = "#cfe3f7", "#fde2c4"


def plot_free_blocks(trace, num_blocks, ax=None):
    """Free KV blocks after each ``schedule()`` call of a ``servelab.engine.driver.Engine`` trace.

    The line is the number of free blocks read right after ``schedule()`` (the shape table's "free blocks");
    each step's background says its kind (blue: prefill, orange: decode); a red cross marks a step that
    preempted, labelled with the names of the sequences it preempted ("preempted seq C"); the dashed line is
    the cache's ``num_blocks``.

    ``ax``: ``None`` (a new figure) or the Axes to draw on. Returns the Figure.

    >>> from servelab.engine.driver import Engine
    >>> from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence
    >>> sch = Scheduler(num_blocks=5, block_size=4, max_num_batched_tokens=8, enable_prefix_caching=False)
    >>> reqs = [Sequence(list(range(n)), SamplingParams(max_tokens=4, ignore_eos=True), name=c)
    ...         for c, n in [("A", 6), ("B", 5), ("C", 3)]]
    >>> fig = plot_free_blocks(Engine(sch).run(reqs), num_blocks=5)   # C is preempted at step 3
    """
    from matplotlib.lines import Line2D

    records = list(trace)
    if num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
    if any(r.free_blocks > num_blocks for r in records):
        raise ValueError(f"a step has more free blocks than num_blocks={num_blocks}: pass the cache's size")
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 3), layout="constrained")
    else:
        fig = ax.figure
    steps = [r.step for r in records]
    free = [r.free_blocks for r in records]
    for r in records:
        ax.axvspan(r.step - 0.5, r.step + 0.5, facecolor=_PREFILL_FACE if r.is_prefill else _DECODE_FACE,
                   edgecolor="none")
    ax.axhline(num_blocks, color="gray", linestyle="--", linewidth=1)
    ax.plot(steps, free, color="black", marker="o", markersize=4, linewidth=1.2)
    top = num_blocks + 1.2
    for r in records:
        if r.preempted:
            ax.plot([r.step], [r.free_blocks], linestyle="none", marker="X", markersize=10, color="#d62728",
                    markeredgecolor="white", zorder=3)
            label = f"preempted seq{'s' if len(r.preempted) > 1 else ''} {', '.join(r.preempted)}"
            ax.annotate(label, (r.step, r.free_blocks), xytext=(0, 10),
                        textcoords="offset points", ha="center", fontsize=8, color="#d62728")
    n_pre = sum(len(r.preempted) for r in records)
    n_prefill = sum(r.is_prefill for r in records)
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"
    ax.set_title(f"free KV blocks: {plural(len(records), 'step')} ({n_prefill} prefill), "
                 f"{plural(n_pre, 'preemption')}", fontsize=10, loc="left")
    ax.set_xlabel("step (one schedule() call)")
    ax.set_ylabel("free blocks")
    ax.set_ylim(-0.3, top)
    ax.set_xlim(-0.5, max(len(records), 1) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles=[Patch(facecolor=_PREFILL_FACE, label="prefill step"),
                       Patch(facecolor=_DECODE_FACE, label="decode step"),
                       Line2D([], [], linestyle="none", marker="X", color="#d62728", label="preemption"),
                       Line2D([], [], color="gray", linestyle="--", label=f"num_blocks = {num_blocks}")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


__all__.append("plot_free_blocks")
