"""Chapter 08's numbers: what a swap's round trip costs against a recompute, per token and per copy."""

from __future__ import annotations

import math

from servelab.analytic import costmodel, kv_tiers, serving
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B
from servelab.analytic.kv_tiers import DEFAULT_COPY_LATENCY_S, PCIE_GEN5_X16
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim

LINK = PCIE_GEN5_X16.bandwidth
_LINK_WHY = "a host link's delivery: a copy over PCIe, no GPU step"


def _prefill(model, gpu=H100_SXM, tokens: int = 1024, **settings) -> ServingPoint:
    """The recompute the break-even prices: one prefill of `tokens` tokens."""
    return ServingPoint(model, gpu, prefill_chunks=(tokens,), **settings)


def _crossover_latency() -> float:
    """The closed form's fixed cost per copy at which swapping one victim (the walkthrough's pair of 6,000-token
    prompts, 12,100 tokens of KV) costs what recomputing it does, out and back in at 16-token blocks."""
    from servelab.simulator import MixedBudget, Requests, simulate

    rec = simulate(Requests([0.0, 0.0], [6000, 6000], [200, 200]), MixedBudget(max_num_batched_tokens=16384),
                   LLAMA3_8B, H100_SXM, kv_capacity_tokens=12_100)
    (victim,) = rec.victim_tokens
    copies = kv_tiers.swap_copies(LLAMA3_8B, int(victim), 16)
    return (kv_tiers.recompute_time(LLAMA3_8B, H100_SXM, int(victim), mfu=1.0) / 2
            - copies * kv_tiers.swap_copy_bytes(LLAMA3_8B, 16) / LINK) / copies


def ch08() -> list[Claim]:
    a = "ch08_preemption_and_kv_tiers"
    be3, be2 = (kv_tiers.break_even_bandwidth(m, H100_SXM) for m in (LLAMA3_8B, LLAMA2_7B))
    per_token3 = kv_tiers.recompute_time(LLAMA3_8B, H100_SXM, 1024) / 1024
    copy16 = kv_tiers.swap_copy_bytes(LLAMA3_8B, 16)
    delivers = kv_tiers.effective_copy_bandwidth(copy16, LINK, DEFAULT_COPY_LATENCY_S)
    smallest = {m.name: kv_tiers.break_even_copy_bytes(kv_tiers.break_even_bandwidth(m, H100_SXM), LINK,
                                                       DEFAULT_COPY_LATENCY_S) for m in (LLAMA2_7B, LLAMA3_8B)}
    l3, l2 = _prefill(LLAMA3_8B), _prefill(LLAMA2_7B)
    return [
        Claim(a, "cell-04", "the link, one direction", LINK / 1e9, "link, one direction                 {:.0f} GB/s",
              None, _LINK_WHY),
        Claim(a, "cell-05", "Llama-3-8B's recompute per token, us", per_token3 * 1e6, "costs about {:.0f} µs", l3),
        Claim(a, "cell-05", "Llama-3-8B's round-trip break-even, GB/s", be3 / 1e9, "is about {:.1f} GB/s", l3),
        Claim(a, "cell-05", "the link in the opening", LINK / 1e9, "the {:.0f} GB/s PCIe Gen5 reaches", None,
              _LINK_WHY),
        Claim(a, "cell-05", "the link over Llama-3-8B's break-even", LINK / be3, "**{:.1f}× break-even**", l3),
        Claim(a, "cell-05", "one 16-token block of one layer's keys, KiB", copy16 / 1024, "time, {:.0f} KiB", l3),
        Claim(a, "cell-05", "what that copy delivers, GB/s", delivers / 1e9, "delivers about {:.1f} GB/s", None,
              _LINK_WHY),
        Claim(a, "cell-06", "LLaMA-2-7B's break-even in the table", be2 / 1e9, "{:.2f} GB/s", l2),
        Claim(a, "cell-06", "Llama-3-8B's break-even in the table", be3 / 1e9, "{:.2f} GB/s", l3),
        Claim(a, "cell-07", "the smallest copy that beats recompute, LLaMA-2-7B", smallest[LLAMA2_7B.name] / 1024,
              "at least {:.0f} KiB", l2),
        Claim(a, "cell-07", "the smallest copy that beats recompute, Llama-3-8B", smallest[LLAMA3_8B.name] / 1024,
              "Llama-3-8B: a copy must hold at least {:.0f} KiB", l3),
        Claim(a, "cell-08", "the link over LLaMA-2-7B's break-even", LINK / be2, "({:.2f}× for LLaMA-2-7B", l2),
        Claim(a, "cell-08", "the link over Llama-3-8B's break-even", LINK / be3, "{:.1f}× for Llama-3-8B", l3),
        Claim(a, "cell-30", "the closed form's crossover cost per copy, us", _crossover_latency() * 1e6,
              "under about {:.1f} µs", _prefill(LLAMA3_8B, tokens=6050, max_num_batched_tokens=16384)),
        Claim(a, "cell-32", "LLaMA-2-7B's break-even in the interview", be2 / 1e9, "about {:.0f} GB/s for LLaMA-2-7B",
              l2),
        Claim(a, "cell-32", "Llama-3-8B's break-even in the interview", be3 / 1e9, "about {:.0f} GB/s for GQA", l3),
        Claim(a, "cell-32", "the link in the interview", LINK / 1e9, "reach about {:.0f} GB/s each way", None,
              _LINK_WHY),
        *_drills(a),
    ]


def _drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them."""
    fp8 = serving.priced(LLAMA3_8B, H200, kv_dtype="fp8")[0]
    d1 = kv_tiers.break_even_bandwidth(fp8, H200) / 1e9
    d2 = LINK / kv_tiers.break_even_bandwidth(LLAMA2_7B, H100_SXM, 1024, 0.4)
    d3 = kv_tiers.effective_copy_bandwidth(kv_tiers.swap_copy_bytes(LLAMA3_8B, 32), LINK, 10e-6) / 1e9
    d4 = kv_tiers.swap_time(LLAMA2_7B, 3000, 16, LINK, 10e-6) * 1e3
    d5 = math.ceil(kv_tiers.break_even_copy_bytes(kv_tiers.break_even_bandwidth(LLAMA2_7B, H100_SXM), LINK, 10e-6)
                   / kv_tiers.swap_copy_bytes(LLAMA2_7B, 1))
    decodes = (2048,) * 64
    d6 = next(r for r in range(1, 1 << 15) if costmodel.step_cost(
        LLAMA3_8B, H100_SXM, prefill_tokens=r, decode_context_lens=list(decodes)).bound == "compute") - 1
    c = "cell-33"
    return [
        Claim(a, c, "drill 1", d1, "drill_1 = {:.3f} GB/s", _prefill(LLAMA3_8B, H200, kv_dtype="fp8")),
        Claim(a, c, "drill 2", d2, "drill_2 = {:.2f}x", _prefill(LLAMA2_7B)),
        Claim(a, c, "drill 3", d3, "drill_3 = {:.2f} GB/s", None, _LINK_WHY),
        Claim(a, c, "drill 4", d4, "drill_4 = {:.1f} ms", None, _LINK_WHY),
        Claim(a, c, "drill 5", d5, "drill_5 = {} tokens", _prefill(LLAMA2_7B)),
        Claim(a, c, "drill 6", d6, "drill_6 = {} tokens",
              ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=decodes, prefill_chunks=(d6,))),
    ]
