"""Chapter 09's numbers: the KV ceiling, the fleet, Little's law, the published token budgets."""

from __future__ import annotations

import dataclasses

import numpy as np

from servelab.analytic import capacity, costmodel, serving
from servelab.analytic.costmodel import A100_PCIE, H100_SXM, H200, LLAMA3_8B, MISTRAL_7B, GPUSpec, ModelSpec
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim, ceiling_point


def ch09() -> list[Claim]:
    a = "ch09_capacity_and_concurrency"
    h100, h200 = capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 2048), capacity.kv_ceiling(LLAMA3_8B, H200, 2048)
    return [
        Claim(a, "cell-03", "sequences of 2048 tokens in an H100's KV cache", h100, "{} sequences",
              ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-03", "sequences of 2048 tokens in an H200's KV cache", h200, "({} on an H200)",
              ceiling_point(LLAMA3_8B, H200, 2048)),
        Claim(a, "cell-03", "vLLM's cap over the H100's KV ceiling at 2048", costmodel.DEFAULT_MAX_NUM_SEQS / h100,
              "{:.1f} times what fits", ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-05", "the KV ceiling at 2048 in the walk-through's table", h100, "| {} |",
              ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-35", "the KV ceiling at 2K in the interview answer", h100, "{} sequences at 2K",
              ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        *_ch09_steady_state(a),
        *_ch09_fleet(a),
        *_ch09_interview(a),
        *_ch09_drills(a),
        *_ch09_published(a),
    ]


def _ch09_interview(a: str) -> list[Claim]:
    """The interview answer's ridge, cliff, per-sequence read and compute, Little's law at 50 requests a second and
    the knee, each on its step."""
    ridge = capacity.compute_ridge_batch(LLAMA3_8B, H100_SXM, 256)
    cliff = capacity.cudagraph_capture_sizes(costmodel.DEFAULT_MAX_NUM_SEQS, 8192)[-1] + 1
    read = 2048 * LLAMA3_8B.kv_bytes_per_token / H100_SXM.hbm_bandwidth
    one = costmodel.cost_from_totals(LLAMA3_8B, H100_SXM, 1, 1, 2049, 2048)
    mean = round(capacity.mean_context(64, 512))
    a_s, b_s = capacity.step_line(LLAMA3_8B, H100_SXM, capacity.mean_context(64, 512))
    fixed = capacity.resident_sequences(50, 512, a_s, b_s)
    knee = capacity.budget_knee(LLAMA3_8B, H100_SXM, 64, 2048)
    per_token = 2.0 * LLAMA3_8B.matmul_params / H100_SXM.peak_flops
    return [
        Claim(a, "cell-35", "the ridge batch at 256 tokens", ridge, "at 256 tokens that is {}",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, ridge, 255)),
        Claim(a, "cell-35", "the first batch past the CUDA graphs", cliff, "step-time cliff at {}.",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, cliff, 255)),
        Claim(a, "cell-35", "one sequence's KV read at 2K, us", read * 1e6, "of KV a step, {:.0f} us at",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 2048)),
        Claim(a, "cell-35", "one token's compute at 2K, us", one.compute_s * 1e6, "one token, {:.0f} us at peak",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 2048)),
        Claim(a, "cell-35", "the naive resident count at 50 requests/s", 50 * 512 * (a_s + b_s), "it says {:.0f} where",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, round(fixed), mean)),
        Claim(a, "cell-35", "the fixed point at 50 requests/s", fixed, "the simulator, say {:.0f}.",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, round(fixed), mean)),
        Claim(a, "cell-35", "the knee with 64 decodes at 2K", knee, "turns compute-bound: {} tokens",
              ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(2047,) * 64, prefill_chunks=(knee - 64,))),
        Claim(a, "cell-35", "a chunk token's matmul time, us", per_token * 1e6, "each costs {:.1f} us",
              ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(2047,) * 64, prefill_chunks=(knee - 64,))),
    ]


def _ch09_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them, each on the step it describes."""
    d1 = capacity.kv_ceiling(LLAMA3_8B, H200, 3000)
    d2 = capacity.compute_ridge_batch(LLAMA3_8B, H200, 128)
    a_s, b_s = capacity.step_line(LLAMA3_8B, H100_SXM, capacity.mean_context(64, 512))
    d3 = capacity.resident_sequences(60, 512, a_s, b_s)
    d4 = capacity.fleet_size(LLAMA3_8B, H100_SXM, 100e9, 2e9, 4000, 96)
    d5 = capacity.prefill_share_ratio(0.75, capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, 4000),
                                      capacity.decode_s_per_token(LLAMA3_8B, H100_SXM, 96, 4096))
    d6 = capacity.budget_knee(LLAMA3_8B, H100_SXM, 96, 4096)
    d7 = capacity.slo_budget(MISTRAL_7B, A100_PCIE, 0.05, 64, 4096)
    c = "cell-36"
    return [
        Claim(a, c, "drill 1", d1, "drill_1 = {},", ceiling_point(LLAMA3_8B, H200, 3000)),
        Claim(a, c, "drill 2", d2, "drill_2 = {},", ServingPoint.decode(LLAMA3_8B, H200, d2, 127)),
        Claim(a, c, "drill 3", d3, "drill_3 = {:.1f} sequences",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, round(d3), round(capacity.mean_context(64, 512)))),
        Claim(a, c, "drill 4", d4.gpus, "drill_4 = {} GPUs", ServingPoint.decode(LLAMA3_8B, H100_SXM, 96, 4040)),
        Claim(a, c, "drill 5", d5, "drill_5 = {:.1f} input tokens", ServingPoint.decode(LLAMA3_8B, H100_SXM, 96, 4096)),
        Claim(a, c, "drill 6", d6, "drill_6 = {} tokens",
              ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(4096,) * 96, prefill_chunks=(d6 - 96,))),
        Claim(a, c, "drill 7", d7, "drill_7 = {} tokens",
              ServingPoint(MISTRAL_7B, A100_PCIE, decode_contexts=(4096,) * 64, prefill_chunks=(d7 - 64,))),
    ]


def _sarathi_chat(budget: int):
    """The chat-like workload of cell-39 (800 requests at 5/s) under a mixed step of `budget` tokens."""
    from servelab.simulator import MixedBudget, Requests, lognormal_lengths, poisson_arrivals, simulate
    n = 800
    chat = Requests(poisson_arrivals(n, 5.0, seed=5), lognormal_lengths(n, 1024, 1.0, seed=3, high=8000),
                    lognormal_lengths(n, 300, 0.8, seed=4, high=2000))
    return simulate(chat, MixedBudget(max_num_batched_tokens=budget, max_num_seqs=128), MISTRAL_7B, A100_PCIE)


def _ch09_published(a: str) -> list[Claim]:
    """Sarathi-Serve's budgets at its serving point (Mistral-7B, one A100, 128 decodes at 2,048): the knee, the caps
    its TBT targets allow (peaks; 50%/85% of them with the chunk 8,192 deep), a prompt token's price, the simulation."""
    slow = dataclasses.replace(A100_PCIE, peak_flops=0.5 * A100_PCIE.peak_flops,
                               hbm_bandwidth=0.85 * A100_PCIE.hbm_bandwidth)
    decodes = (2048,) * 128
    knee = capacity.budget_knee(MISTRAL_7B, A100_PCIE, 128, 2048)
    cap = capacity.slo_budget(MISTRAL_7B, A100_PCIE, 0.1, 128, 2048)
    deep = capacity.slo_budget(MISTRAL_7B, slow, 0.1, 128, 2048, prefill_context=8192)
    relaxed = capacity.slo_budget(MISTRAL_7B, A100_PCIE, 0.5, 128, 2048)
    relaxed_deep = capacity.slo_budget(MISTRAL_7B, slow, 0.5, 128, 2048, prefill_context=8192)
    price = {b: capacity.prefill_s_per_token(MISTRAL_7B, A100_PCIE, 2000, b) * 1e6 for b in (2048, 8192)}
    runs = {b: _sarathi_chat(b) for b in (512, 1024, 2048, 8192)}
    p99 = {b: float(np.percentile(r.inter_token_gaps(), 99)) * 1e3 for b, r in runs.items()}
    tps = [r.throughput() for r in runs.values()]
    step = lambda chunk, gpu=A100_PCIE, prefix=0, budget=8192: ServingPoint(  # noqa: E731
        MISTRAL_7B, gpu, decode_contexts=decodes, prefill_chunks=(chunk,), prefill_prefix=prefix,
        max_num_batched_tokens=max(budget, 128 + chunk))
    sim = "a percentile or a spread over a simulated run's steps, not one step"
    m = "cell-38"
    return [
        Claim(a, m, "the knee at Sarathi-Serve's point", knee, "the knee is {} tokens", step(knee - 128)),
        Claim(a, m, "the strict target's cap at peaks", cap, "strict target allows\n{:,} at", step(cap - 128)),
        Claim(a, m, "the strict target's cap, derated and deep", deep, "{:,} with kernels at 50%",
              step(deep - 128, slow, 8192)),
        Claim(a, "cell-39", "the strict cap in the table", cap, "{:,}", step(cap - 128)),
        Claim(a, "cell-39", "the relaxed cap in the table", relaxed, "{:,}", step(relaxed - 128)),
        Claim(a, "cell-39", "the relaxed cap, derated and deep", relaxed_deep, "{:,}",
              step(relaxed_deep - 128, slow, 8192)),
        Claim(a, m, "a prompt token's price at 2,048", price[2048], "costs {:.2f} us at 2,048", step(2048 - 128)),
        Claim(a, m, "a prompt token's price at 8,192", price[8192], "and {:.2f} us at 8,192", step(8192 - 128)),
        Claim(a, m, "the throughput spread over the budgets", (max(tps) - min(tps)) / max(tps), "within\n{:.0%} in",
              None, sim),
        Claim(a, m, "the p99 gap at 512", p99[512], "{:.1f} ms at 512", None, sim),
        Claim(a, m, "the p99 gap at 2,048", p99[2048], "{:.1f} ms at 2,048", None, sim),
        Claim(a, m, "the p99 gap at 8,192", p99[8192], "{:.1f} ms at 8,192", None, sim),
        Claim(a, "cell-35", "the strict cap in the interview", cap, "could carry {:,} tokens at peak", step(cap - 128)),
        Claim(a, "cell-35", "the derated cap in the interview", deep, "peak,\n  {} with real kernels",
              step(deep - 128, slow, 8192)),
    ]


def _mixed_point(model: ModelSpec, gpu: GPUSpec, batch: int, context: int, carried: float, prompt: int,
                 cached: int = 0, **settings) -> ServingPoint:
    """A mixed fleet's step: `batch` decodes at `context` and `carried` prompt tokens as whole prompts' chunks of
    prompt - cached tokens on `cached` cached ones, the last one partial."""
    whole, part = divmod(round(carried), prompt - cached)
    chunks = (prompt - cached,) * whole + ((part,) if part else ())
    return ServingPoint(model, gpu, decode_contexts=(context,) * batch, prefill_chunks=chunks, prefill_prefix=cached,
                        **settings)


def _ch09_fleet(a: str) -> list[Claim]:
    """The throughput fleet of 10e9 input and 0.5e9 output tokens a day priced apart and mixed (cell-20, the
    interview), and the levers' fleet of 100e9 and 5e9 (cell-27)."""
    args = (LLAMA3_8B, H100_SXM, 10e9, 0.5e9, 2000, capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 2100))
    apart, mixed, step = capacity.fleet_size(*args), capacity.mixed_fleet_size(*args), capacity.mixed_step(*args)
    decode = ServingPoint.decode(LLAMA3_8B, H100_SXM, args[5], 2050)
    mixed_point = _mixed_point(LLAMA3_8B, H100_SXM, args[5], 2050, step.carried, 2000)
    ratio = (step.decode_flops / args[5]) / ((step.cost.flops - step.decode_flops) / step.carried)
    # the levers' workload: the chat-tuned engine priced apart and mixed, and every lever together, mixed
    full = 2000 + round(5e9 * 2000 / 100e9)
    chat = capacity.fleet_size(LLAMA3_8B, H100_SXM, 100e9, 5e9, 2000, 64, 2048)
    chat_mixed = capacity.mixed_fleet_size(LLAMA3_8B, H100_SXM, 100e9, 5e9, 2000, 64, 2048)
    chat_step = capacity.mixed_step(LLAMA3_8B, H100_SXM, 100e9, 5e9, 2000, 64, 2048)
    fp8_model, fp8_gpu = serving.priced(LLAMA3_8B, H100_SXM, weight_dtype="fp8", kv_dtype="fp8")
    batch = capacity.kv_ceiling(fp8_model, H100_SXM, full)
    every = capacity.mixed_fleet_size(fp8_model, fp8_gpu, 100e9, 5e9, 2000, batch, 8192, cached_prefix=1000)
    every_step = capacity.mixed_step(fp8_model, fp8_gpu, 100e9, 5e9, 2000, batch, 8192, cached_prefix=1000)
    every_point = _mixed_point(LLAMA3_8B, H100_SXM, batch, 2050, every_step.carried, 2000, 1000,
                               weight_dtype="fp8", kv_dtype="fp8")
    chat_point = _mixed_point(LLAMA3_8B, H100_SXM, 64, 2050, chat_step.carried, 2000, max_num_batched_tokens=2048)
    p_s = capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, 2000)
    d_s = capacity.decode_s_per_token(LLAMA3_8B, H100_SXM, args[5], 2050)
    three_quarters = capacity.prefill_share_ratio(0.75, p_s, d_s)
    return [
        Claim(a, "cell-20", "an output token's price over a prompt token's, apart", d_s / p_s, "d / p = {:.2f}",
              decode),
        Claim(a, "cell-20", "the ratio at which prefill is three quarters, apart", three_quarters, "so r = {:.1f}",
              decode),
        Claim(a, "cell-35", "that ratio in the interview", three_quarters, "about {:.0f} input tokens per output",
              decode),
        Claim(a, "cell-20", "prefill GPU-hours priced apart", apart.prefill_gpu_hours, "{:.1f} GPU-hours of prefill",
              decode),
        Claim(a, "cell-20", "decode GPU-hours priced apart", apart.decode_gpu_hours, "and {:.1f} of decode", decode),
        Claim(a, "cell-20", "GPUs priced apart", apart.gpus, "**{} H100s, prefill", decode),
        Claim(a, "cell-20", "prefill's share priced apart", apart.prefill_share, "{:.0%} of the bill**", decode),
        Claim(a, "cell-20", "prompt tokens a mixed step carries", step.carried, "222 decodes and {:,.0f} prompt tokens",
              mixed_point),
        Claim(a, "cell-20", "GPU-hours mixed", mixed.gpu_hours, "**{:.1f} GPU-hours", mixed_point),
        Claim(a, "cell-20", "GPUs mixed", mixed.gpus, "GPU-hours, {} H100s**", mixed_point),
        Claim(a, "cell-20", "an output token in prompt tokens' FLOPs", ratio, "{:.2f} prompt tokens' worth",
              mixed_point),
        Claim(a, "cell-20", "prefill's share mixed", mixed.prefill_share, "prefill is {:.0%} of this workload's",
              mixed_point),
        Claim(a, "cell-20", "the ratio at which prefill is three quarters, mixed",
              capacity.prefill_share_ratio(0.75, 1.0, ratio), "three quarters already at r = {:.1f}", mixed_point),
        Claim(a, "cell-35", "GPU-hours mixed in the interview", mixed.gpu_hours, "{:.0f} GPU-hours instead of",
              mixed_point),
        Claim(a, "cell-35", "GPU-hours apart in the interview", apart.gpu_hours, "instead of {:.0f}, 2 H100s",
              decode),
        Claim(a, "cell-27", "the chat-tuned fleet's prefill share, mixed", chat_mixed.prefill_share, "{:.0%} mixed",
              chat_point),
        Claim(a, "cell-27", "every lever together, mixed", every.gpus, "on {} H100s instead of", every_point),
        Claim(a, "cell-27", "the chat-tuned fleet", chat.gpus, "instead of {}.", chat_point),
    ]


def _ch09_steady_state(a: str) -> list[Claim]:
    """Where Little's law stops having a steady state for 64-token prompts and 512 output tokens; the point is the
    step at the cap, 1,024 sequences at the mean context."""
    lim = capacity.steady_state_limits(LLAMA3_8B, H100_SXM, 64, 512)
    at_cap = ServingPoint.decode(LLAMA3_8B, H100_SXM, 1024, round(capacity.mean_context(64, 512)))
    return [Claim(a, "cell-13", "the memory line's wall", lim.memory_wall, "wall, {:.0f} requests a second", at_cap),
            Claim(a, "cell-13", "the compute line's wall", lim.compute_wall, "at {:.0f} requests a second", at_cap),
            Claim(a, "cell-13", "the rate that fills the KV cache", lim.kv, "fills the KV cache at {:.0f}", at_cap),
            Claim(a, "cell-13", "the rate that reaches the cap", lim.max_num_seqs, "**{:.0f} requests a second**",
                  at_cap)]
