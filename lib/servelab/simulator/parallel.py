"""One engine spread over a tensor-parallel group, decoding (chapter 16).

Requests arrive with their prompts already in the KV cache (a decode pool, as chapter 14's); from the next step
boundary the group runs every sequence it holds in each step until each has made its output_len - 1 tokens. A step
is priced as `serving.check` prices it for `tp` GPUs: the shard's roofline (`model.shard(tp)`), two ring
all-reduces a layer over the batch's activations, and the fixed overhead; with `capture_sizes`, the batch is padded
up to the next captured CUDA-graph size, or run eagerly above the largest (`parallelism.launch_overhead_s`). The
closed form it is checked against: `parallelism.tp_decode_tpot`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel, parallelism
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec
from servelab.analytic.specs import DEFAULT_LINK_LATENCY_S, NVLINK_H100, LinkSpec
from servelab.simulator.arrivals import Requests, _is_int

__all__ = ["TPResult", "simulate_tp_decode"]


@dataclass(frozen=True)
class TPResult:
    """Per request: `tpot` ((finish - arrival) / (output_len - 1); nan for one-token outputs) and `finish_s`; the
    group's time-weighted mean running sequences while busy, its peak KV (tokens, per GPU: every GPU holds every
    token), and how many of its steps ran eagerly (above the largest CUDA graph)."""

    tpot: np.ndarray
    finish_s: np.ndarray
    mean_running: float
    peak_kv_tokens: int
    eager_steps: int


def simulate_tp_decode(requests: Requests, model: ModelSpec, gpu: GPUSpec, *, tp: int, link: LinkSpec = NVLINK_H100,
                       latency_s: float = DEFAULT_LINK_LATENCY_S, capture_sizes=None, mode: str = "full",
                       overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> TPResult:
    """Decode `requests` on one group of `tp` GPUs serving `model`.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> res = simulate_tp_decode(Requests([0.0], [1000], [3]), LLAMA31_8B, H100_SXM, tp=2)
    >>> from servelab.analytic import parallelism
    >>> steps = [parallelism.tp_decode(LLAMA31_8B, H100_SXM, 2, 1, c).step_s for c in (1000, 1001)]
    >>> bool(abs(res.tpot[0] - sum(steps) / 2) < 1e-12)
    True
    """
    if not _is_int(tp) or tp < 1:
        raise ValueError(f"tp must be an integer >= 1, got {tp!r}")
    n = len(requests)
    if n == 0:
        raise ValueError("no requests to simulate")
    shard = model.shard(int(tp))
    sizes = None if capture_sizes is None else sorted(capture_sizes)
    graph_extra = parallelism.launch_overhead_s(model, mode, tp) if sizes else 0.0
    eager_extra = parallelism.launch_overhead_s(model, "eager", tp)
    arrive, prompt, output = requests.arrival_s, requests.prompt_len, requests.output_len
    finish = np.where(output <= 1, arrive, np.nan)
    order = np.flatnonzero(output > 1)
    ctx = np.empty(0, dtype=np.int64)
    left = np.empty(0, dtype=np.int64)
    who = np.empty(0, dtype=np.int64)
    now, k, peak, busy, weighted, eager = 0.0, 0, 0, 0.0, 0.0, 0
    while k < order.size or who.size:
        if not who.size and arrive[order[k]] > now:
            now = arrive[order[k]]
        j = k
        while j < order.size and arrive[order[j]] <= now:
            j += 1
        new = order[k:j]
        k = j
        ctx = np.concatenate([ctx, prompt[new]])
        left = np.concatenate([left, output[new] - 1])
        who = np.concatenate([who, new])
        b, total = who.size, int(ctx.sum())
        rows, extra = b, 0.0
        if sizes is not None:
            padded = parallelism._pad(b, sizes)
            if padded is None:
                extra, eager = eager_extra, eager + 1
            else:
                rows, extra = padded, graph_extra
        # padding rows: decodes of an empty context, as `parallelism.graph_step` prices them
        step = (costmodel.roofline_s(shard, gpu, rows, rows, total + rows, total)
                + parallelism._comm_s(model, rows, tp, link.bandwidth, latency_s) + overhead_s + extra)
        peak = max(peak, total + b)
        busy += step
        weighted += step * b
        now += step
        ctx += 1
        left -= 1
        gone = left == 0
        if gone.any():
            finish[who[gone]] = now
            keep = ~gone
            ctx, left, who = ctx[keep], left[keep], who[keep]
    steps = output - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (finish - arrive) / np.maximum(steps, 1), np.nan)
    return TPResult(tpot=tpot, finish_s=finish, mean_running=weighted / busy if busy else 0.0, peak_kv_tokens=peak,
                    eager_steps=eager)
