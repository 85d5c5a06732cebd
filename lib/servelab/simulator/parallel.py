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
from servelab.simulator.decode_pool import decode_pool

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
    eager = 0

    def step_s(b: int, kv: int) -> float:
        nonlocal eager
        rows, extra = b, 0.0
        if sizes is not None:
            padded = parallelism._pad(b, sizes)
            if padded is None:
                extra, eager = eager_extra, eager + 1
            else:
                rows, extra = padded, graph_extra
        # padding rows: decodes of an empty context, as `parallelism.graph_step` prices them
        return (costmodel.roofline_s(shard, gpu, rows, rows, kv + rows, kv)
                + parallelism._comm_s(model, rows, tp, link.bandwidth, latency_s) + overhead_s + extra)

    finish, peak, running = decode_pool(arrive, prompt, output, step_s)
    steps = output - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (finish - arrive) / np.maximum(steps, 1), np.nan)
    return TPResult(tpot=tpot, finish_s=finish, mean_running=running, peak_kv_tokens=peak, eager_steps=eager)
