"""Pictures for chapter 03 (token budgets, chunked prefill, SLOs), drawn from `servelab.simulator` results.

Plain functions, matplotlib's object API only (``fig, ax = plt.subplots(...)``), so they work under any
backend (Agg included); each returns the Figure it drew on. Times are drawn in milliseconds or seconds as
labelled; every function takes runs as a mapping ``{label: SimResult}`` so that "with and without
chunking" (or any other comparison) shares one set of axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from servelab.simulator import SimResult

__all__ = ["plot_batch_sweep", "plot_latency_cdfs", "plot_step_timeline"]

_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _runs(runs) -> list[tuple[str, SimResult]]:
    if isinstance(runs, SimResult):
        return [(runs.policy, runs)]
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError("runs must be a SimResult or a non-empty mapping {label: SimResult}")
    for label, res in runs.items():
        if not isinstance(res, SimResult):
            raise ValueError(f"runs[{label!r}] is a {type(res).__name__}, not a SimResult")
    return list(runs.items())


def _axes(ax, n: int, **subplots):
    if ax is None:
        fig, axes = plt.subplots(n, 1, layout="constrained", **subplots)
        return fig, list(np.atleast_1d(axes))
    axes = [ax] if hasattr(ax, "plot") else list(ax)
    if len(axes) != n:
        raise ValueError(f"ax must be None or {n} Axes")
    return axes[0].figure, axes


def plot_step_timeline(runs, ids=None, ax=None, t_range=None, log=True):
    """Each step's duration (top) and the inter-token gaps of requests `ids` (bottom) over time, one colour
    per run: the picture of a long prefill stalling decodes, and of chunking spreading it out.

    Top: a step is a horizontal segment from its start to its end at the height of its duration, so a
    long step is both high and wide. Bottom: one dot per gap, at the time the later token came out; with
    `ids=None`, every served request. `t_range=(t0, t1)` zooms both panels (seconds); `log` puts both
    y axes on a log scale (gaps from milliseconds to seconds). ``ax``: None or a pair of Axes.
    Returns the Figure.
    """
    items = _runs(runs)
    fig, (top, bottom) = _axes(ax, 2, figsize=(10, 5.2), sharex=True)
    for k, (label, res) in enumerate(items):
        color = _COLORS[k % len(_COLORS)]
        start, end = res.step_start_s, res.step_end_s
        dur_ms = (end - start) * 1e3
        keep = np.ones(start.size, dtype=bool)
        if t_range is not None:
            keep = (end >= t_range[0]) & (start <= t_range[1])
        top.hlines(dur_ms[keep], start[keep], end[keep], colors=color, linewidth=2.0,
                   label=f"{label}: longest step {dur_ms.max():.0f} ms" if dur_ms.size else label)
        t, gap = res.gap_timeline(ids)
        gap_ms = gap * 1e3
        if t_range is not None:
            inside = (t >= t_range[0]) & (t <= t_range[1])
            t, gap_ms = t[inside], gap_ms[inside]
        worst = f", worst {gap_ms.max():.0f} ms" if gap_ms.size else ""
        bottom.plot(t, gap_ms, ".", color=color, markersize=3, alpha=0.7, label=f"{label}{worst}")
    top.set_ylabel("step duration (ms)")
    top.set_title("every step: how long it ran", fontsize=10, loc="left")
    bottom.set_ylabel("inter-token gap (ms)")
    bottom.set_xlabel("time (s)")
    bottom.set_title("every inter-token gap, at the time of the later token", fontsize=10, loc="left")
    for a in (top, bottom):
        if log:
            a.set_yscale("log")
        a.grid(True, which="major", alpha=0.3)
        a.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if t_range is not None:
        bottom.set_xlim(*t_range)
    return fig


def _cdf(values: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and the fraction of all `total` requests at or below each one, starting from
    (smallest value, 0) so that the curve rises from the axis."""
    v = np.sort(values[~np.isnan(values)])
    if not v.size:
        return v, v
    return np.concatenate([[v[0]], v]), np.arange(0, v.size + 1) / max(total, 1)


def plot_latency_cdfs(runs, ttft_target_s=None, tpot_target_s=None, ax=None):
    """Empirical CDFs of TTFT (left) and TPOT (right), in seconds and milliseconds, one curve per run.

    The fraction is over *all* requests of a run: a rejected request (admission control) never gets a
    first token, so its run's curve tops out below 1 by the share turned away. Dashed lines mark the
    targets; the legend gives each run's SLO attainment when both targets are given. ``ax``: None or a
    pair of Axes. Returns the Figure.
    """
    items = _runs(runs)
    if ax is None:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    else:
        fig, (left, right) = _axes(ax, 2)
    for k, (label, res) in enumerate(items):
        color = _COLORS[k % len(_COLORS)]
        n = len(res.requests)
        name = label
        if ttft_target_s is not None and tpot_target_s is not None:
            name = f"{label}: {res.slo_met(ttft_target_s, tpot_target_s).mean():.0%} meet both"
        x, y = _cdf(res.ttft, n)
        left.step(x, y, where="post", color=color, label=name)
        served_multi = res.served & (res.requests.output_len > 1)
        x, y = _cdf(res.tpot * 1e3, int(served_multi.sum() + res.rejected.sum()))
        right.step(x, y, where="post", color=color, label=label)
    for a, target, scale, what in ((left, ttft_target_s, 1.0, "TTFT (s)"), (right, tpot_target_s, 1e3, "TPOT (ms)")):
        if target is not None:
            a.axvline(target * scale, color="black", linestyle="--", linewidth=1.0,
                      label=f"target {target * scale:g}")
        a.set_xlabel(what)
        a.set_ylim(0, 1.02)
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8, loc="best")
    left.set_ylabel("fraction of requests")
    left.set_title("time to first token", fontsize=10, loc="left")
    right.set_title("time per output token", fontsize=10, loc="left")
    return fig


def plot_batch_sweep(batch_sizes: Sequence[int], throughput_tok_s, goodput_tok_s, tpot_s=None,
                     tpot_target_s=None, ax=None):
    """Throughput and goodput (output tokens per second) against the decode batch size; with `tpot_s`, the
    TPOT of each batch size on a second axis, and the target as a dashed line.

    Throughput keeps rising with the batch (the weights are read once per step whatever the batch);
    goodput counts only the tokens of requests that met their SLO, so it falls to zero once the shared
    step time passes the TPOT target. The best batch for users is where goodput peaks. ``ax``: None or
    one Axes. Returns the Figure.
    """
    b = np.asarray(batch_sizes, dtype=float)
    thr, good = np.asarray(throughput_tok_s, dtype=float), np.asarray(goodput_tok_s, dtype=float)
    if not (b.size == thr.size == good.size) or b.size == 0:
        raise ValueError("batch_sizes, throughput_tok_s and goodput_tok_s need one entry per batch size")
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
    else:
        fig = ax.figure
    ax.plot(b, thr, "o-", color=_COLORS[1], label="throughput (all tokens)")
    ax.plot(b, good, "s-", color=_COLORS[2], label="goodput (tokens of requests meeting the SLO)")
    best = int(np.argmax(good))
    ax.annotate(f"best for users: batch {b[best]:g}", (b[best], good[best]), textcoords="offset points",
                xytext=(-30, -60), ha="right", fontsize=8, arrowprops=dict(arrowstyle="->", linewidth=0.8))
    ax.set_xlabel("decode batch size (max_num_seqs)")
    ax.set_ylabel("output tokens / s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if tpot_s is not None:
        tpot_ms = np.asarray(tpot_s, dtype=float) * 1e3
        if tpot_ms.size != b.size:
            raise ValueError("tpot_s needs one entry per batch size")
        twin = ax.twinx()
        twin.plot(b, tpot_ms, "^:", color=_COLORS[0], label="TPOT (ms, right axis)")
        if tpot_target_s is not None:
            twin.axhline(tpot_target_s * 1e3, color=_COLORS[0], linestyle="--", linewidth=1.0,
                         label=f"TPOT target {tpot_target_s * 1e3:g} ms")
        twin.set_ylabel("TPOT (ms)")
        twin.set_ylim(bottom=0)
        h2, l2 = twin.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize=8, loc="upper left")
    ax.set_title("every sequence in the batch shares one step time", fontsize=10, loc="left")
    return fig
