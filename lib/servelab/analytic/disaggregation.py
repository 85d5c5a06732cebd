"""Prefill and decode on separate GPUs: the interference a split removes, the KV it must move, the pools it needs.

A mixed step holds a prefill chunk beside the running decodes, so every decode waits for the chunk (`tpot_stretch`).
A split serves prompts on a prefill pool and hands each request's KV over a link to a decode pool. The rule for the
link, stated once: a P -> D transfer crosses it **one way, once** (prompt_len x KV bytes per token, over one
direction's bandwidth), where chapter 8's swap is a round trip (out, then back in). Sent layer by layer while the
prefill runs, only the last layer's share, or what exceeds the prefill's compute, is exposed (`exposed_transfer_s`).
Pools: M/D/1 per prefill GPU (random routing splits a Poisson stream into Poisson streams), Little's law on the
roofline's step line per decode GPU; SLOs are means. The simulator: servelab.simulator.disaggregated.

>>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
>>> round(kv_transfer_bytes(LLAMA31_8B, 8000) / 1e9, 3)                       # GB one way
1.049
>>> round(exposed_transfer_s(LLAMA31_8B, H100_SXM, 8000, RDMA_400G.bandwidth, layerwise=False) * 1e3, 2)
20.97
>>> round(exposed_transfer_s(LLAMA31_8B, H100_SXM, 8000, RDMA_400G.bandwidth) * 1e3, 3)   # the last layer's
0.655
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.analytic import capacity, costmodel, queueing
from servelab.analytic.checks import count as _count
from servelab.analytic.checks import positive as _positive
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec
from servelab.analytic.kv_tiers import PCIE_GEN5_X16
from servelab.analytic.specs import NVLINK_H100, RDMA_400G

__all__ = [
    "LINKS",
    "MixedPoint",
    "NVLINK_H100",
    "RDMA_400G",
    "break_even_bandwidth",
    "decode_tpot",
    "exposed_transfer_s",
    "goodput_per_gpu",
    "kv_transfer_bytes",
    "mixed_gpus",
    "mixed_point",
    "pd_pools",
    "prefill_s",
    "split_ttft",
    "tpot_stretch",
]

# NVLink 4 and a 400 Gb/s NIC: servelab.analytic.specs says where the figures come from. PCIe through host memory:
# chapter 8's figure.
LINKS = (NVLINK_H100, RDMA_400G, PCIE_GEN5_X16)


def prefill_s(model: ModelSpec, gpu: GPUSpec, prompt_len: int, overhead_s: float = DEFAULT_STEP_OVERHEAD_S) -> float:
    """Seconds one GPU takes to prefill a whole prompt in one step (`costmodel.step_time`): a prefill GPU's service
    time per request. Llama-3.1-8B on an H100, 8,000 tokens: 129.9 ms of compute plus 0.5 ms.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> round(prefill_s(LLAMA31_8B, H100_SXM, 8000) * 1e3, 1)
    130.4
    """
    return costmodel.step_time(model, gpu, prefill_tokens=_count("prompt_len", prompt_len, 1), overhead_s=overhead_s)


def tpot_stretch(model: ModelSpec, gpu: GPUSpec, prefill_tokens: int, num_decodes: int, context_len: int) -> float:
    """How many times longer a decode step gets when a prefill chunk of `prefill_tokens` rides in it: the mixed step
    (the chunk and `num_decodes` decodes at `context_len`, one roofline step) over the decodes' step alone.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> round(tpot_stretch(LLAMA31_8B, H100_SXM, 4000, 32, 4000), 2)
    5.99
    """
    decodes = [context_len] * _count("num_decodes", num_decodes, 1)
    mixed = costmodel.step_time(model, gpu, prefill_tokens=prefill_tokens, decode_context_lens=decodes)
    return mixed / costmodel.step_time(model, gpu, decode_context_lens=decodes)


def kv_transfer_bytes(model: ModelSpec, prompt_len: int) -> float:
    """Bytes a request's prompt KV takes over the link, one way: layers x KV heads x head_dim x 2 (K and V) x bytes
    per element x prompt tokens (`model.kv_bytes_per_token` x prompt_len)."""
    return model.kv_bytes_per_token * _count("prompt_len", prompt_len, 0)


def exposed_transfer_s(model: ModelSpec, gpu: GPUSpec, prompt_len: int, link_bandwidth: float,
                       layerwise: bool = True) -> float:
    """Seconds the one-way KV transfer adds to a request's TTFT after its prefill ends.

    Whole (`layerwise=False`): all of it, bytes / bandwidth. Layer by layer: layer i's KV leaves when layer i's
    compute ends (the prefill's roofline time, no overhead, split evenly over the layers), one layer at a time on
    the link; what is left when the prefill ends is max(one layer's share, whole transfer - (layers - 1) x one
    layer's compute).
    """
    return _exposed_s(model, gpu, prompt_len, link_bandwidth, layerwise)


def _exposed_s(model: ModelSpec, gpu: GPUSpec, prompt_len: int, link_bandwidth: float, layerwise: bool) -> float:
    """`exposed_transfer_s`'s work, which `split_ttft` and the simulator call: the exercise's reference is not
    available while chapter 14 grades, and `pd_pools`, graded beside it, goes through `split_ttft`."""
    link_bandwidth = _positive("link_bandwidth", link_bandwidth)
    whole = kv_transfer_bytes(model, prompt_len) / link_bandwidth
    if not layerwise or prompt_len == 0:
        return whole
    layers = model.num_layers
    compute = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0)
    return max(whole / layers, whole - (layers - 1) * compute / layers)


def break_even_bandwidth(model: ModelSpec, gpu: GPUSpec, prompt_len: int, budget_s: float,
                         layerwise: bool = True) -> float:
    """The least one-way link bandwidth (bytes/s) whose exposed transfer (`exposed_transfer_s`) is at most
    `budget_s`. Whole: bytes / budget. Layer by layer both terms of the max must fit: bytes / (layers x budget)
    and bytes / (budget + (layers - 1) x one layer's compute).

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> round(break_even_bandwidth(LLAMA31_8B, H100_SXM, 8000, 0.010, layerwise=False) / 1e9, 1)
    104.9
    >>> round(break_even_bandwidth(LLAMA31_8B, H100_SXM, 8000, 0.010) / 1e9, 2)
    7.72
    """
    budget_s = _positive("budget_s", budget_s)
    nbytes = kv_transfer_bytes(model, prompt_len)
    if not layerwise:
        return nbytes / budget_s
    layers = model.num_layers
    compute = costmodel.step_time(model, gpu, prefill_tokens=_count("prompt_len", prompt_len, 1), overhead_s=0.0)
    return max(nbytes / (layers * budget_s), nbytes / (budget_s + (layers - 1) * compute / layers))


def split_ttft(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, link_bandwidth: float,
               layerwise: bool = True) -> float:
    """Mean TTFT on one prefill GPU that receives `rate` requests/s (Poisson), one prompt a step: the M/D/1 wait
    (`queueing.mg1_mean_wait`), the prefill and the exposed transfer. `math.inf` at utilization 1 or more."""
    service = prefill_s(model, gpu, prompt_len)
    rho = _positive("rate", rate, allow_zero=True) * service
    if rho >= 1:
        return math.inf
    return (queueing.mg1_mean_wait(rho, service) + service
            + _exposed_s(model, gpu, prompt_len, link_bandwidth, layerwise))


def decode_tpot(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, output_len: int) -> tuple[float, float]:
    """(mean TPOT, mean running sequences) of one decode GPU that receives `rate` requests/s: each stays for
    output_len - 1 steps (the prefill made the first token) at a mean context of prompt_len + (output_len - 2) / 2.
    Little's law N = rate x (output_len - 1) x TPOT on the roofline's two step lines (`capacity.resident_at`), with
    TPOT = t(N + 1): a request's steps hold the N others on average and itself. (inf, inf) past the wall."""
    steps = _count("output_len", output_len, 2) - 1
    context = _count("prompt_len", prompt_len, 1) + (steps - 1) / 2
    # a request sees the others (n on average, Poisson) and itself: each line's intercept takes one sequence more
    lines = tuple((c + d, d) for c, d in (capacity.step_line(model, gpu, context),
                                          capacity.compute_line(model, gpu, context)))
    n = capacity.resident_at(_positive("rate", rate, allow_zero=True), steps, lines)
    if math.isinf(n):
        return math.inf, math.inf
    return max(c + d * n for c, d in lines), n


def pd_pools(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, output_len: int, ttft_target_s: float,
             tpot_target_s: float, link_bandwidth: float) -> tuple[int, int]:
    """(prefill GPUs, decode GPUs): the fewest of each that meet the mean TTFT and mean TPOT targets at `rate`
    requests/s, requests split evenly at random. Prefill: `split_ttft` at rate / n_p (layer-by-layer transfer).
    Decode: `decode_tpot` at rate / n_d, and its running sequences' final KV, n x (prompt_len + output_len) tokens,
    within the GPU's cache. ValueError when no pool size meets a target.

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
    >>> pd_pools(LLAMA31_8B, H100_SXM, 10.0, 8000, 256, 0.5, 0.030, RDMA_400G.bandwidth)
    (2, 2)
    """
    rate, ttft_target_s = _positive("rate", rate), _positive("ttft_target_s", ttft_target_s)
    tpot_target_s = _positive("tpot_target_s", tpot_target_s)
    if split_ttft(model, gpu, 0.0, prompt_len, link_bandwidth) > ttft_target_s:
        raise ValueError(f"one prefill and its transfer take longer than the TTFT target {ttft_target_s} s")
    if decode_tpot(model, gpu, 0.0, prompt_len, output_len)[0] > tpot_target_s:
        raise ValueError(f"a decode step of one sequence takes longer than the TPOT target {tpot_target_s} s")
    n_p = math.ceil(rate * prefill_s(model, gpu, prompt_len))
    while split_ttft(model, gpu, rate / n_p, prompt_len, link_bandwidth) > ttft_target_s:
        n_p += 1
    cap = costmodel.kv_capacity_tokens(model, gpu)
    n_d = 1

    def fits(n: int) -> bool:
        tpot, running = decode_tpot(model, gpu, rate / n, prompt_len, output_len)
        return tpot <= tpot_target_s and running * (prompt_len + output_len) <= cap

    while not fits(n_d):
        n_d += 1
    return n_p, n_d


@dataclass(frozen=True)
class MixedPoint:
    """One GPU serving prompts and decodes together, each prompt prefilled whole in one mixed step: mean TTFT, mean
    TPOT (the time over the steps, mixed ones included), mean running decodes, and the two steps' times."""

    ttft_s: float
    tpot_s: float
    running: float
    mixed_step_s: float
    decode_step_s: float


def _step(model: ModelSpec, gpu: GPUSpec, prompt_len: int, decodes: float, context: float) -> float:
    pairs = prompt_len * (prompt_len + 1) // 2 + decodes * (context + 1)
    seqs = decodes + (1 if prompt_len else 0)
    cost = costmodel.cost_from_totals(model, gpu, num_tokens=prompt_len + decodes, num_seqs=seqs,
                                      attention_pairs=pairs, kv_read_tokens=decodes * context)
    return cost.seconds()


def mixed_point(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, output_len: int) -> MixedPoint:
    """A mixed GPU receiving `rate` requests/s (Poisson). Per second it runs `rate` mixed steps (a prompt beside the
    running decodes) and decode steps in the rest: n = rate + (1 - rate x mixed) / decode steps, one token for
    every running sequence in each, so TPOT = 1 / n; Little: running = rate x (output_len - 1) x TPOT (solved by
    iteration). TTFT: the step in flight (half a decode step), the M/D/1 wait for mixed steps, one mixed step.
    None of the ratios means anything past rate x mixed step = 1: then TTFT and TPOT are `math.inf`."""
    rate = _positive("rate", rate, allow_zero=True)
    steps = _count("output_len", output_len, 2) - 1
    prompt_len = _count("prompt_len", prompt_len, 1)
    context = prompt_len + (steps - 1) / 2
    running, tpot = 0.0, 0.0
    for _ in range(200):
        # a request's steps hold the others (running on average) and itself, as in `decode_tpot`
        mixed = _step(model, gpu, prompt_len, running + 1, context)
        decode = _step(model, gpu, 0, running + 1, context)
        if rate * mixed >= 1:
            return MixedPoint(math.inf, math.inf, math.inf, mixed, decode)
        tpot = 1 / (rate + (1 - rate * mixed) / decode)
        new = rate * steps * tpot
        if abs(new - running) < 1e-9 * max(1.0, new):
            running = new
            break
        running = new
        if running > 1e7:
            return MixedPoint(math.inf, math.inf, math.inf, mixed, decode)
    ttft = decode / 2 + queueing.mg1_mean_wait(rate * mixed, mixed) + mixed
    return MixedPoint(ttft, tpot, running, mixed, decode)


def mixed_gpus(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, output_len: int, ttft_target_s: float,
               tpot_target_s: float) -> int:
    """The fewest mixed GPUs that meet both mean targets at `rate` (requests split evenly at random), with the
    running sequences' final KV in the cache. ValueError when one request alone misses a target."""
    rate = _positive("rate", rate)
    cap = costmodel.kv_capacity_tokens(model, gpu)

    def fits(n: int) -> bool:
        p = mixed_point(model, gpu, rate / n, prompt_len, output_len)
        return (p.ttft_s <= ttft_target_s and p.tpot_s <= tpot_target_s
                and p.running * (prompt_len + output_len) <= cap)

    alone = mixed_point(model, gpu, 1e-9, prompt_len, output_len)
    if alone.ttft_s > ttft_target_s or alone.tpot_s > tpot_target_s:
        raise ValueError("one request alone on a mixed GPU misses a target")
    n = 1
    while not fits(n):
        n += 1
    return n


def goodput_per_gpu(model: ModelSpec, gpu: GPUSpec, rate: float, prompt_len: int, output_len: int,
                    ttft_target_s: float, tpot_target_s: float, link_bandwidth: float) -> tuple[float, float]:
    """(split, mixed) requests/s per GPU that meet both targets at `rate`: rate over each fleet's GPU count."""
    n_p, n_d = pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth)
    n_m = mixed_gpus(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s)
    return rate / (n_p + n_d), rate / n_m
