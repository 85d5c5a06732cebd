"""Chapter 14's numbers: the mixed step's stretch, the one-way KV transfer, the pools, split against mixed."""

from __future__ import annotations

import math

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA31_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim

M, G = LLAMA31_8B, H100_SXM
A = "ch14_disaggregated_serving"
RATE, PROMPT, OUT, TTFT, TPOT = 100.0, 4000, 256, 0.2, 0.012


def _decode_point(rate_per_gpu: float, prompt: int, out: int, model=M) -> ServingPoint:
    """A decode GPU's step at its mean running batch (rounded up) and mean context."""
    from servelab.analytic import disaggregation as dg

    running = dg.decode_tpot(model, G, rate_per_gpu, prompt, out)[1]
    return ServingPoint.decode(model, G, math.ceil(running), prompt + (out - 2) // 2)


def ch14() -> list[Claim]:
    """Every number chapter 14 states, on the steps they describe."""
    return [*_stretch(), *_transfer(), *_pools(), *_simulated(), *_interview(), *_drills()]


def _stretch() -> list[Claim]:
    from servelab.analytic import disaggregation as dg

    decodes = (4000,) * 32
    alone = costmodel.step_time(M, G, decode_context_lens=decodes) * 1e3
    mixed = costmodel.step_time(M, G, prefill_tokens=4000, decode_context_lens=decodes) * 1e3
    stretch = dg.tpot_stretch(M, G, 4000, 32, 4000)
    prefill = costmodel.step_cost(M, G, prefill_tokens=4000)
    mixed_pt = ServingPoint(M, G, decode_contexts=decodes, prefill_chunks=(4000,))
    alone_pt = ServingPoint(M, G, decode_contexts=decodes)
    out = []
    for cell in ("cell-03", "cell-08", "cell-25"):
        out += [Claim(A, cell, "32 decodes' step alone, ms", alone, "{:.2f} ms", alone_pt),
                Claim(A, cell, "the same step with a 4,000-token prefill, ms", mixed, "{:.2f} ms", mixed_pt),
                Claim(A, cell, "the stretch", stretch, "{:.2f}", mixed_pt)]
    out += [
        Claim(A, "cell-03", "the weights' read, GB", M.weight_bytes / 1e9, "reads {:.0f} GB of weights", alone_pt),
        Claim(A, "cell-03", "a 4,000-token prefill's TFLOPs", prefill.flops / 1e12, "compute-bound ({:.0f} TFLOPs)",
              ServingPoint(M, G, prefill_chunks=(4000,))),
        Claim(A, "cell-03", "a 512-token chunk's stretch", dg.tpot_stretch(M, G, 512, 32, 4000),
              "almost free ({:.2f}x)", ServingPoint(M, G, decode_contexts=decodes, prefill_chunks=(512,))),
    ]
    return out


def _transfer() -> list[Claim]:
    from servelab.analytic import disaggregation as dg
    from servelab.analytic.kv_tiers import PCIE_GEN5_X16

    pre = ServingPoint(M, G, prefill_chunks=(4000,))
    rdma = dg.RDMA_400G.bandwidth
    whole = dg.exposed_transfer_s(M, G, 4000, rdma, False) * 1e3
    layered = dg.exposed_transfer_s(M, G, 4000, rdma, True) * 1e3
    compute = costmodel.step_time(M, G, prefill_tokens=4000, overhead_s=0.0)
    link = "a link's bandwidth: an assumption the library states with its source"
    mb = dg.kv_transfer_bytes(M, 4000) / 1e6
    out = [
        Claim(A, "cell-05", "KV bytes per token", M.kv_bytes_per_token, "2 x 2 =\n{:,} bytes", pre),
        Claim(A, "cell-05", "a 4,000-token prompt's KV, MB", mb, "moves {:.1f} MB", pre),
        Claim(A, "cell-05", "NVLink one way, GB/s", dg.NVLINK_H100.bandwidth / 1e9, "node, {:.0f} GB/s each way", None,
              link),
        Claim(A, "cell-05", "NVLink both ways, GB/s", 2 * dg.NVLINK_H100.bandwidth / 1e9, "({:.0f} GB/s", None, link),
        Claim(A, "cell-05", "a 400 Gb/s NIC, Gb/s", dg.RDMA_400G.bandwidth * 8 / 1e9, "one {:.0f} Gb/s NIC", None,
              link),
        Claim(A, "cell-05", "a 400 Gb/s NIC, GB/s", dg.RDMA_400G.bandwidth / 1e9, "NIC = {:.0f} GB/s", None, link),
        Claim(A, "cell-05", "PCIe, GB/s", PCIE_GEN5_X16.bandwidth / 1e9, "chapter 8's {:.0f} GB/s", None, link),
        Claim(A, "cell-11", "the example's KV, MB", mb, "is {:.1f} MB", pre),
        Claim(A, "cell-11", "sent whole over RDMA, ms", whole, "that is {:.2f} ms", pre),
        Claim(A, "cell-11", "sent layer by layer, ms", layered, "whole, and {:.3f} ms", pre),
        Claim(A, "cell-11", "the prefill's roofline time, ms", compute * 1e3, "behind a {:.1f} ms prefill", pre),
        Claim(A, "cell-14", "break-even whole, GB/s", dg.break_even_bandwidth(M, G, 4000, 0.020, False) / 1e9,
              "needs {:.1f} GB/s sent whole", pre),
        Claim(A, "cell-14", "break-even layer by layer, GB/s", dg.break_even_bandwidth(M, G, 4000, 0.020) / 1e9,
              "{:.2f} GB/s sent\n    layer by layer", pre),
        Claim(A, "cell-14", "one layer's compute, ms", compute / 32 * 1e3, "one layer's {:.2f} ms", pre),
        Claim(A, "cell-14", "break-even at 0.5 ms, GB/s", dg.break_even_bandwidth(M, G, 4000, 0.0005) / 1e9,
              "{:.2f} GB/s", pre),
    ]
    return out


def _pools() -> list[Claim]:
    from servelab.analytic import disaggregation as dg

    n_p, n_d = dg.pd_pools(M, G, RATE, PROMPT, OUT, TTFT, TPOT, dg.RDMA_400G.bandwidth)
    n_m = dg.mixed_gpus(M, G, RATE, PROMPT, OUT, TTFT, TPOT)
    split, mixed = RATE / (n_p + n_d), RATE / n_m
    pre = ServingPoint(M, G, prefill_chunks=(PROMPT,))
    dec = _decode_point(RATE / n_d, PROMPT, OUT)
    mp = dg.mixed_point(M, G, RATE / n_m, PROMPT, OUT)
    mixed_pt = ServingPoint(M, G, decode_contexts=(PROMPT + OUT // 2,) * math.ceil(mp.running),
                            prefill_chunks=(PROMPT,))
    why = "a count of GPUs or a rate per GPU: a fleet, not one step"

    def cross(prompt, tpot):
        a, b = dg.pd_pools(M, G, RATE, prompt, OUT, TTFT, tpot, dg.RDMA_400G.bandwidth)
        return a + b, dg.mixed_gpus(M, G, RATE, prompt, OUT, TTFT, tpot)

    s1000, m1000 = cross(1000, TPOT)
    s2000, m2000 = cross(2000, TPOT)
    s20, m20 = cross(PROMPT, 0.020)
    s15, m15 = cross(PROMPT, 0.015)
    assert s2000 == m2000 and s15 == m15 and s1000 > m1000 and s20 > m20 and cross(3000, TPOT)[0] < cross(3000, TPOT)[1]
    return [
        Claim(A, "cell-16", "a 4,000-token prefill, ms", dg.prefill_s(M, G, PROMPT) * 1e3, "{:.1f} ms for 4,000", pre),
        Claim(A, "cell-16", "decode steps a request takes", OUT - 1, "share\nof {} decode steps", dec),
        Claim(A, "cell-16", "the cache", costmodel.kv_capacity_tokens(M, G), "({:,} tokens on an H100)", dec),
        Claim(A, "cell-16", "steps in Little's law", OUT - 1, "x {} steps x TPOT", dec),
        Claim(A, "cell-17", "the example's pools", n_p, f"== ({{}}, {n_d})", None, why),
        Claim(A, "cell-19", "prefill GPUs", n_p, "the split needs\n{} prefill", pre),
        Claim(A, "cell-19", "decode GPUs", n_d, "and {} decode GPUs", dec),
        Claim(A, "cell-19", "split goodput per GPU", split, "GPUs, {:.2f} requests/s per GPU;", None, why),
        Claim(A, "cell-19", "mixed GPUs", n_m, "a mixed fleet needs {} GPUs", mixed_pt),
        Claim(A, "cell-19", "mixed goodput per GPU", mixed, "{:.2f} requests/s per GPU. The", None, why),
        Claim(A, "cell-19", "the split's lead", split / mixed - 1, "wins by {:.0%}", None, why),
        Claim(A, "cell-19", "1,000-token prompts: mixed GPUs", m1000, "({} GPUs against", None, why),
        Claim(A, "cell-19", "1,000-token prompts: split GPUs", s1000, "against {}), ties", None, why),
        Claim(A, "cell-19", "at 20 ms: split GPUs", s20, "20 ms ({} GPUs", None, why),
        Claim(A, "cell-19", "at 20 ms: mixed GPUs", m20, "GPUs against {})", None, why),
        Claim(A, "cell-19", "the P:D ratio", n_p // math.gcd(n_p, n_d), f"ratio of {{}}:{n_d // math.gcd(n_p, n_d)}",
              None, why),
        Claim(A, "cell-23", "DistServe's attainment share", 0.9, "a share of requests ({:.0%})", None,
              "DistServe's SLO attainment target, quoted from the paper (OSDI '24) as the cell says"),
    ]


def _simulated() -> list[Claim]:
    """The simulator against the closed forms (cell-22 prints them; cell-23 states the differences)."""
    from servelab.analytic import disaggregation as dg
    from servelab.simulator import MixedBudget, Requests, fixed_lengths, poisson_arrivals, simulate
    from servelab.simulator.disaggregated import simulate_split

    n = 8000
    reqs = Requests(poisson_arrivals(n, RATE, seed=1), fixed_lengths(n, PROMPT), fixed_lengths(n, OUT))
    res = simulate_split(reqs, M, G, prefill_gpus=8, decode_gpus=8, link_bandwidth=dg.RDMA_400G.bandwidth, seed=1)
    warm = slice(n // 10, None)
    ttft = res.ttft[warm].mean() / dg.split_ttft(M, G, RATE / 8, PROMPT, dg.RDMA_400G.bandwidth) - 1
    tpot = np.nanmean(res.tpot[warm]) / dg.decode_tpot(M, G, RATE / 8, PROMPT, OUT)[0] - 1
    m = 1500
    one = Requests(poisson_arrivals(m, RATE / 18, seed=1), fixed_lengths(m, PROMPT), fixed_lengths(m, OUT))
    mixed = simulate(one, MixedBudget(max_num_batched_tokens=8192), M, G)
    mp = dg.mixed_point(M, G, RATE / 18, PROMPT, OUT)
    w = slice(m // 10, None)
    why = "a mean over a simulated run of thousands of requests, against its closed form"
    assert abs(ttft) < 0.05 and abs(tpot) < 0.05 and np.mean(mixed.tpot[w]) <= TPOT
    return [
        Claim(A, "cell-23", "split TTFT, simulated vs closed form", ttft, "(TTFT {:+.1%},", None, why),
        Claim(A, "cell-23", "split TPOT, simulated vs closed form", tpot, "TPOT {:+.1%}). The", None, why),
        Claim(A, "cell-23", "mixed TTFT, simulated vs closed form", mixed.ttft[w].mean() / mp.ttft_s - 1,
              "(TTFT {:+.1%},", None, why),
        Claim(A, "cell-23", "mixed TPOT, simulated vs closed form", np.mean(mixed.tpot[w]) / mp.tpot_s - 1,
              "TPOT {:+.1%}): a mixed", None, why),
    ]


def _interview() -> list[Claim]:
    from servelab.analytic import disaggregation as dg

    rdma = dg.RDMA_400G.bandwidth
    pre = ServingPoint(M, G, prefill_chunks=(4000,))
    n_p, n_d = dg.pd_pools(M, G, RATE, PROMPT, OUT, TTFT, TPOT, rdma)
    n_m = dg.mixed_gpus(M, G, RATE, PROMPT, OUT, TTFT, TPOT)
    why = "a count of GPUs or a rate per GPU: a fleet, not one step"
    busy = 60 * dg.prefill_s(M, G, 8000) / 8
    n60 = dg.pd_pools(M, G, 60.0, 8000, 256, 0.5, 0.030, rdma)[0]
    return [
        Claim(A, "cell-25", "prefill GPUs", n_p, "needs {} prefill", pre),
        Claim(A, "cell-25", "decode GPUs", n_d, "and {} decode H100s", _decode_point(RATE / n_d, PROMPT, OUT)),
        Claim(A, "cell-25", "split goodput per GPU", RATE / (n_p + n_d), "H100s, {:.2f} requests/s", None, why),
        Claim(A, "cell-25", "mixed GPUs and goodput", RATE / n_m, f"mixed fleet {n_m}, {{:.2f}}.", None, why),
        Claim(A, "cell-25", "the KV of 4,000 tokens, MB", dg.kv_transfer_bytes(M, 4000) / 1e6, "{:.1f} MB for", pre),
        Claim(A, "cell-25", "sent whole over RDMA, ms", dg.exposed_transfer_s(M, G, 4000, rdma, False) * 1e3,
              "tokens: {:.2f} ms over", pre),
        Claim(A, "cell-25", "a NIC in GB/s", rdma / 1e9, "NIC ({:.0f} GB/s", None, "a link's bandwidth (assumed)"),
        Claim(A, "cell-25", "the prefill's roofline time, ms",
              costmodel.step_time(M, G, prefill_tokens=4000, overhead_s=0.0) * 1e3, "during a {:.1f} ms", pre),
        Claim(A, "cell-25", "layer by layer, ms", dg.exposed_transfer_s(M, G, 4000, rdma) * 1e3, "layer's {:.3f} ms",
              pre),
        Claim(A, "cell-25", "break-even whole", dg.break_even_bandwidth(M, G, 4000, 0.020, False) / 1e9,
              "needs {:.1f} GB/s sent whole", pre),
        Claim(A, "cell-25", "break-even layered", dg.break_even_bandwidth(M, G, 4000, 0.020) / 1e9,
              "and {:.2f} GB/s layer", pre),
        Claim(A, "cell-25", "LLaMA-2-7B at 5 GB/s, ms", dg.exposed_transfer_s(LLAMA2_7B, G, 4000, 5e9) * 1e3,
              "prefill and {:.1f} ms shows", ServingPoint(LLAMA2_7B, G, prefill_chunks=(4000,))),
        Claim(A, "cell-25", "8 prefill GPUs' utilization at 60/s", busy, "are busy {:.0%} of", None,
              "a utilization of a pool of prefill GPUs"),
        Claim(A, "cell-25", "prefill GPUs needed at 60/s", n60, "and {} are needed",
              ServingPoint(M, G, prefill_chunks=(8000,))),
    ]


def _drills() -> list[Claim]:
    from servelab.analytic import disaggregation as dg

    d1 = dg.exposed_transfer_s(M, G, 6000, dg.RDMA_400G.bandwidth, False) * 1e3
    d2 = dg.tpot_stretch(M, G, 2000, 64, 3000)
    d3 = dg.break_even_bandwidth(M, G, 8000, 0.015) / 1e9
    d4 = dg.pd_pools(M, G, 40.0, 8000, 1024, 1.0, 0.050, 50e9)[1]
    return [
        Claim(A, "cell-26", "drill 1", d1, "drill_1 = {:.2f} ms", ServingPoint(M, G, prefill_chunks=(6000,))),
        Claim(A, "cell-26", "drill 2", d2, "drill_2 = {:.2f}",
              ServingPoint(M, G, decode_contexts=(3000,) * 64, prefill_chunks=(2000,))),
        Claim(A, "cell-26", "drill 3", d3, "drill_3 = {:.2f} GB/s", ServingPoint(M, G, prefill_chunks=(8000,))),
        Claim(A, "cell-26", "drill 4", d4, "drill_4 = {}", _decode_point(40.0 / d4, 8000, 1024)),
    ]
