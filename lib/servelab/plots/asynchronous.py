"""Pictures for chapter 10 (asynchronous scheduling): a timeline of the CPU's and the GPU's work with and without
overlap, and the throughput gained against the CPU/GPU time ratio.

Plain functions, matplotlib's object API only, so they work under any backend; each returns the Figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["CPU", "GPU", "plot_overlap_gain", "plot_timeline"]

CPU, GPU = "#ff7f0e", "#1f77b4"


def plot_timeline(cpu_s: float, gpu_s: float, steps: int = 4, ax=None, title: str | None = None):
    """Two schedules of `steps` steps, in ms. Synchronous: each step's CPU part (schedule, prepare) then its GPU
    part, on one line. Overlapped: the CPU prepares step n+1 while the GPU runs step n, so the GPU line starts
    after the first CPU part and a step lasts max(cpu_s, gpu_s). The finish of each schedule is marked."""
    if steps < 1 or cpu_s < 0 or gpu_s <= 0:
        raise ValueError("steps >= 1, cpu_s >= 0 and gpu_s > 0")
    fig, ax = plt.subplots(figsize=(8, 2.6), layout="constrained") if ax is None else (ax.figure, ax)
    ms_cpu, ms_gpu = cpu_s * 1e3, gpu_s * 1e3
    # synchronous: one lane, CPU and GPU alternate
    t = 0.0
    for k in range(steps):
        ax.broken_barh([(t, ms_cpu)], (2.1, 0.7), color=CPU, edgecolor="white", linewidth=0.8)
        ax.broken_barh([(t + ms_cpu, ms_gpu)], (2.1, 0.7), color=GPU, edgecolor="white", linewidth=0.8)
        ax.text(t + ms_cpu + ms_gpu / 2, 2.45, str(k), ha="center", va="center", color="white", fontsize=8)
        t += ms_cpu + ms_gpu
    sync_end = t
    # overlapped: CPU lane and GPU lane; the GPU runs step k once its inputs are ready and the step before is done
    cpu_end, gpu_end = 0.0, 0.0
    for k in range(steps):
        cpu_start = max(cpu_end, gpu_end - ms_gpu if k else 0.0)   # one step in flight at most
        cpu_end = cpu_start + ms_cpu
        ax.broken_barh([(cpu_start, ms_cpu)], (1.0, 0.7), color=CPU, edgecolor="white", linewidth=0.8)
        gpu_start = max(cpu_end, gpu_end)
        gpu_end = gpu_start + ms_gpu
        ax.broken_barh([(gpu_start, ms_gpu)], (0.1, 0.7), color=GPU, edgecolor="white", linewidth=0.8)
        ax.text(gpu_start + ms_gpu / 2, 0.45, str(k), ha="center", va="center", color="white", fontsize=8)
    for end, y in ((sync_end, 2.45), (gpu_end, 0.45)):
        ax.plot([end], [y], marker="|", ms=18, color="black")
    ax.set_yticks([0.45, 1.35, 2.45], ["overlapped: GPU", "overlapped: CPU", "synchronous"])
    ax.set_xlabel("ms")
    ax.set_xlim(0, sync_end * 1.02)
    ax.set_ylim(0, 3)
    ax.bar([0], [0], color=CPU, label="CPU: schedule + prepare")
    ax.bar([0], [0], color=GPU, label="GPU: forward + sample")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title)
    return fig


def plot_overlap_gain(ratios: Sequence[float], formula: Sequence[float],
                      simulated: Mapping[float, float] | None = None, ax=None, title: str | None = None):
    """The gain (overlapped throughput over synchronous) against r = CPU time / GPU time per step, log x: the
    closed form at each ratio as a line, the simulator's measurements (ratio -> gain) as points, 2x dashed."""
    if len(ratios) != len(formula) or not len(ratios):
        raise ValueError(f"{len(ratios)} ratios and {len(formula)} gains: give one gain per ratio")
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained") if ax is None else (ax.figure, ax)
    ax.plot(np.asarray(ratios, dtype=float), np.asarray(formula, dtype=float), color="black", lw=1.6,
            label="(cpu + gpu) / max(cpu, gpu)")
    if simulated:
        xs = sorted(simulated)
        ax.plot(xs, [simulated[x] for x in xs], ls="none", marker="o", color=GPU, label="simulator")
    ax.axhline(2.0, color="grey", ls="--", lw=1, label="2x: CPU = GPU")
    ax.set_xscale("log")
    ax.set_ylim(0.95, 2.1)
    ax.set_xlabel("CPU time / GPU time per step")
    ax.set_ylabel("throughput gain")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    if title:
        ax.set_title(title)
    return fig
