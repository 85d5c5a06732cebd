"""Two pools and a link: prefill GPUs hand each request's KV to decode GPUs (chapter 14).

Each request goes to a prefill GPU and a decode GPU drawn at random (seeded), as the closed forms of
`servelab.analytic.disaggregation` assume. A prefill GPU serves its queue in arrival order, one whole prompt a step
(`costmodel.step_time`); the prompt's KV then crosses that GPU's link one way (layer by layer while the prefill runs,
or whole after it), one transfer at a time. The first token counts when the KV lands on the decode GPU; from the
next step boundary the decode GPU runs every sequence it holds in each step, priced by the roofline, until each has
made its output_len - 1 remaining tokens. A mixed pool for comparison is `simulate` with `MixedBudget`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel, disaggregation
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec
from servelab.simulator.arrivals import Requests, _is_int
from servelab.simulator.decode_pool import decode_pool

__all__ = ["SplitResult", "simulate_split"]


@dataclass(frozen=True)
class SplitResult:
    """Per request: `ttft` (arrival to the KV landing on its decode GPU), `tpot` ((finish - first token) / (output
    - 1); nan for one-token outputs), `finish_s`, the GPUs it used; per decode GPU the peak KV it held (tokens) and
    its time-weighted mean number of running sequences while busy."""

    ttft: np.ndarray
    tpot: np.ndarray
    finish_s: np.ndarray
    prefill_gpu: np.ndarray
    decode_gpu: np.ndarray
    peak_kv_tokens: np.ndarray
    mean_running: np.ndarray


def _prefill_pool(requests: Requests, model, gpu, pg, gpus, link_bandwidth, layerwise, overhead_s) -> np.ndarray:
    """When each request's KV lands on the decode side."""
    land = np.empty(len(requests))
    free = np.zeros(gpus)        # when each prefill GPU is free
    link = np.zeros(gpus)        # when each prefill GPU's link is free
    prices: dict[int, tuple[float, float, float]] = {}
    for i in range(len(requests)):
        p = int(requests.prompt_len[i])
        if p not in prices:
            prices[p] = (costmodel.step_time(model, gpu, prefill_tokens=p, overhead_s=overhead_s),
                         disaggregation.kv_transfer_bytes(model, p) / link_bandwidth,
                         disaggregation._exposed_s(model, gpu, p, link_bandwidth, layerwise))
        service, whole, exposed = prices[p]
        g = pg[i]
        end = max(free[g], requests.arrival_s[i]) + service
        free[g] = end
        land[i] = max(end + exposed, link[g] + whole) if layerwise else max(end, link[g]) + whole
        link[g] = land[i]
    return land


def simulate_split(requests: Requests, model: ModelSpec, gpu: GPUSpec, *, prefill_gpus: int, decode_gpus: int,
                   link_bandwidth: float, layerwise: bool = True, seed: int = 0,
                   overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> SplitResult:
    """Run `requests` through `prefill_gpus` prefill GPUs, their links of `link_bandwidth` bytes/s (one way) and
    `decode_gpus` decode GPUs of the same `gpu` serving `model`.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> res = simulate_split(Requests([0.0, 0.0], [4000, 4000], [3, 3]), LLAMA31_8B, H100_SXM, prefill_gpus=1,
    ...                      decode_gpus=1, link_bandwidth=50e9)
    >>> float(round(res.ttft[1] / res.ttft[0], 2))    # the second prompt waits for the first, nearly doubling TTFT
    1.99
    """
    for name, value in (("prefill_gpus", prefill_gpus), ("decode_gpus", decode_gpus)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not link_bandwidth > 0:
        raise ValueError(f"link_bandwidth must be > 0 bytes/s, got {link_bandwidth!r}")
    n = len(requests)
    if n == 0:
        raise ValueError("no requests to simulate")
    rng = np.random.default_rng(seed)
    pg = rng.integers(prefill_gpus, size=n)
    dg = rng.integers(decode_gpus, size=n)
    land = _prefill_pool(requests, model, gpu, pg, prefill_gpus, link_bandwidth, layerwise, overhead_s)
    finish = np.empty(n)
    peak, running = np.zeros(decode_gpus, dtype=np.int64), np.zeros(decode_gpus)
    for g in range(decode_gpus):
        mine = np.flatnonzero(dg == g)
        if mine.size:
            f, peak[g], running[g] = decode_pool(
                land[mine], requests.prompt_len[mine], requests.output_len[mine],
                lambda b, kv: costmodel.roofline_s(model, gpu, b, b, kv + b, kv) + overhead_s)
            finish[mine] = f
    steps = requests.output_len - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(steps > 0, (finish - land) / np.maximum(steps, 1), np.nan)
    return SplitResult(ttft=land - requests.arrival_s, tpot=tpot, finish_s=finish, prefill_gpu=pg, decode_gpu=dg,
                       peak_kv_tokens=peak, mean_running=running)
