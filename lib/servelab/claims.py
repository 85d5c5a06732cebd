"""The numbers the chapters state, each computed by library code and tied to the step it describes.

A `Claim` is one number a notebook states (in its text or in a cell's output): its value, computed here from the
library, how the notebook prints it (`fmt`), the notebook cell that states it (its nbformat id), and the serving
point it describes (`servelab.analytic.serving.ServingPoint`), or, for a number that describes no single step (a
queueing limit, a ratio of two prices), the reason why. tests/test_claims.py recomputes every claim, fails when the cell
states anything else, and fails when its point cannot run (`servelab.analytic.serving.check`).

To register a chapter's numbers: write a function `_chNN() -> list[Claim]` below that computes them with the same
library calls the notebook makes, and add it to `CHAPTERS` under the chapter's assignment name. A number chosen to
reproduce a figure from elsewhere is still a claim: its cell must say so in words.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servelab.analytic import capacity, costmodel, queueing, serving
from servelab.analytic.costmodel import (
    DEFAULT_STEP_OVERHEAD_S,
    H100_SXM,
    H200,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA31_8B,
    GPUSpec,
    ModelSpec,
)
from servelab.analytic.serving import ServingPoint

__all__ = ["CHAPTERS", "Claim", "full_cache", "of"]


@dataclass(frozen=True)
class Claim:
    assignment: str
    cell: str                        # the nbformat id of the cell whose source or output states it
    name: str
    value: float
    fmt: str                         # how the cell prints it, e.g. "{:,}" or "{:.1f} ms"
    point: ServingPoint | None
    why_no_point: str = ""           # when `point` is None: why the number describes no single step

    def __post_init__(self):
        if self.point is None and not self.why_no_point:
            raise ValueError(f"claim {self.name!r}: give the serving point it describes, or why it describes none")

    @property
    def text(self) -> str:
        return self.fmt.format(self.value)


def full_cache(model: ModelSpec, gpu: GPUSpec, max_context: int | None = None, **settings) -> ServingPoint:
    """A decode step whose sequences hold exactly the KV cache's capacity, each within the model's context: the
    point a KV-capacity figure describes (one token more and `serving.check` refuses it)."""
    cap = costmodel.kv_capacity_tokens(model, gpu)
    longest = max_context or model.max_position_embeddings or cap
    full, rest = divmod(cap, longest)
    contexts = (longest - 1,) * full + ((rest - 1,) if rest else ())
    return ServingPoint(model, gpu, decode_contexts=contexts, **settings)


def _ceiling_point(model: ModelSpec, gpu: GPUSpec, context_len: int) -> ServingPoint:
    """The KV ceiling's batch: as many sequences as fit, each holding `context_len` tokens after this step."""
    return ServingPoint.decode(model, gpu, capacity.kv_ceiling(model, gpu, context_len), context_len - 1)


def _ch01() -> list[Claim]:
    cap = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)
    return [Claim("ch01_continuous_batching", "setup-7", "KV cache of Llama-3-8B on an H100", cap, "{:,}",
                  full_cache(LLAMA3_8B, H100_SXM))]


def _ch02() -> list[Claim]:
    cap = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)
    return [Claim("ch02_nanovllm_scheduler", "c0a1f2e7", "KV budget of Llama-3-8B on an H100", cap, "{:,}",
                  full_cache(LLAMA3_8B, H100_SXM))]


def _ch03() -> list[Claim]:
    """The long prompts of chapter 03's walkthrough on Llama-3.1-8B: a 32K prompt before ten 256-token ones
    (2,048-token budget), and a 131,072-token one in 16,384-token chunks; each point is the step of the last chunk."""
    a = "ch03_token_budget"

    def step(chunk: int, prefix: int) -> float:
        return costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=chunk, prefill_context=prefix)

    def chunk_point(chunk: int, prefix: int) -> ServingPoint:
        return ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(chunk,), prefill_prefix=prefix,
                            max_num_batched_tokens=chunk)

    long32 = sum(step(2048, p) for p in range(0, 32768, 2048))
    short = long32 + step(2048, 0)
    long128 = sum(step(16384, p) for p in range(0, 131072, 16384))
    last32, last128 = chunk_point(2048, 30720), chunk_point(16384, 114688)
    # beside 64 decoders at 2048 the 16,384-token budget leaves chunks of 16,320
    chats = (2048,) * 64
    first_gap = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16320, decode_context_lens=list(chats))
    last_gap = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16320, prefill_context=114688,
                                   decode_context_lens=list(chats))
    first, last = (ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats, prefill_chunks=(16320,), prefill_prefix=p,
                                max_num_batched_tokens=16384) for p in (0, 114688))
    return [
        Claim(a, "00621bcc", "the 32K prompt's prefill", long32, "2048 tokens, {:.3f} s by the step", last32),
        Claim(a, "00621bcc", "each short prompt's TTFT behind it", short, "**{:.3f} s", last32),
        Claim(a, "00621bcc", "their waiting in all", 10 * short, "each, {:.2f} s of user-visible", last32),
        Claim(a, "00621bcc", "the 32K prefill at 70% of peak", long32 / 0.7, "({:.1f}-", last32),
        Claim(a, "00621bcc", "the 32K prefill at 50% of peak", long32 / 0.5, "-{:.1f} s, printed below", last32),
        Claim(a, "1bff8089", "the 131,072-token prefill", long128, "The step model's {:.2f} s", last128),
        Claim(a, "1bff8089", "the share of peak an 8.6 s figure implies", long128 / 8.6, "same prefill at {:.1%}",
              last128),
        Claim(a, "1bff8089", "the first chunk's step beside 64 decoders", first_gap, "climb from **{:.2f} s", first),
        Claim(a, "1bff8089", "the last full chunk's step beside 64 decoders", last_gap, "to {:.2f} s** (the last full",
              last),
        *_ch03_drills(a),
    ]


def _ch03_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them, on their steps (drill 3's budget is the
    16,384-token chunk and its 64 decodes, as the drill states)."""
    c = "51386f4a"

    def step(chunk: int, prefix: int, decodes=()) -> float:
        return costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=chunk, prefill_context=prefix,
                                   decode_context_lens=list(decodes))

    d1 = costmodel.max_decode_batch(costmodel.LLAMA2_7B, H100_SXM, 0.012, 4000)
    d2 = sum(step(2048, p) for p in range(0, 65536, 2048)) + step(2048, 0)
    d3 = step(16384, 98304 - 16384, [2048] * 64)
    d4 = sum(step(16384, p) for p in range(0, 98304, 16384))
    chunk = costmodel.max_prefill_chunk(LLAMA31_8B, H100_SXM, 0.030, [2048] * 128, 8000)
    d5 = costmodel.max_backlog_tokens(128 + chunk, 128, costmodel.step_time(LLAMA31_8B, H100_SXM, chunk, [2048] * 128,
                                                                            8000), 1.0)
    d6 = next(n for n in range(1, 1 << 14)
              if costmodel.step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=n).bound == "compute")
    d7 = costmodel.max_decode_batch(costmodel.LLAMA2_7B, H200, 0.012, 2048)
    return [
        Claim(a, c, "drill 1", d1, "drill_1 = {},", ServingPoint.decode(costmodel.LLAMA2_7B, H100_SXM, d1, 4000)),
        Claim(a, c, "drill 2", d2, "drill_2 = {:.3f} s",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(2048,), prefill_prefix=63488,
                           max_num_batched_tokens=2048)),
        Claim(a, c, "drill 3", d3, "drill_3 = {:.3f} s",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=(2048,) * 64, prefill_chunks=(16384,),
                           prefill_prefix=98304 - 16384, max_num_batched_tokens=16384 + 64)),
        Claim(a, c, "drill 4", d4, "drill_4 = {:.2f} s",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(16384,), prefill_prefix=81920,
                           max_num_batched_tokens=16384)),
        Claim(a, c, "drill 5", d5, "drill_5 = {:,} tokens",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=(2048,) * 128, prefill_chunks=(chunk,),
                           prefill_prefix=8000, max_num_batched_tokens=128 + chunk)),
        Claim(a, c, "drill 6", d6, "drill_6 = {} tokens", ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(d6,))),
        Claim(a, c, "drill 7", d7, "drill_7 = {}", ServingPoint.decode(costmodel.LLAMA2_7B, H200, d7, 2048)),
    ]


def _ch04() -> list[Claim]:
    """Chapter 04's opening: 100 requests behind one 2000-token system prompt, LLaMA-2-7B; the point is the decode
    step of all 100 with the prompt in their context, on the H200 the chapter prices its reads on."""
    from servelab.engine.prefix_compare import compare, shared_system_prompt

    a = "ch04_radix_cache"
    runs = {r.label.strip(): r for r in compare(shared_system_prompt(n_requests=100, prompt_len=2000, seed=0),
                                                cache_tokens=8192, block_sizes=(16, 256))}
    radix, big = runs["radix (page 1)"], runs["block hash (256)"]
    per_token = LLAMA2_7B.kv_bytes_per_token
    step = ServingPoint.decode(LLAMA2_7B, H200, 100, 2000)
    return [
        Claim(a, "cell-02", "prefill tokens the radix cache skips", radix.skipped, "**{:,} prefill tokens skipped",
              step),
        Claim(a, "cell-02", "LLaMA-2-7B's KV per token, KiB", per_token / 1024, "LLaMA-2-7B's {:.0f} KiB of KV", step),
        Claim(a, "cell-02", "one copy of the prompt, MiB", 2000 * per_token / 1024 ** 2, "= {:.0f} MiB, stored once",
              step),
        Claim(a, "cell-02", "tokens per request 256-token blocks reuse", big.skipped / 99, "7 × 256 = {:.0f} tokens",
              step),
    ]


def _ch05() -> list[Claim]:
    """Chapter 05's opening: the radix cache's hit rate on eight five-turn chats at two cache sizes."""
    from servelab.engine.prefix_compare import multi_turn_chats, sweep_cache_sizes

    a = "ch05_lock_ref_eviction"
    runs = sweep_cache_sizes(multi_turn_chats(n_chats=8, turns=5, seed=0), [512, 1024], block_size=16)
    hit = {r.cache_tokens: r.hit_rate for r in runs["radix (page 1)"]}
    why = "a hit rate over 40 requests served through a cache of that many tokens (no model step is priced)"
    return [Claim(a, "cell-02", "hit rate with 1024 tokens of KV", hit[1024], "**{:.0%} of the prefill", None, why),
            Claim(a, "cell-02", "hit rate with 512 tokens of KV", hit[512], "KV, {:.0%} with 512.**", None, why)]


def _ch06() -> list[Claim]:
    """Chapter 06's opening: one layer's decode attention for 64 sequences of 4096 tokens, Llama-3-8B's heads, on an
    H200; the point is that decode step."""
    from servelab.kernels import exercises as ex

    a = "ch06_triton_paged_attention"
    nbytes, flops = ex.decode_traffic([4096] * 64, num_q_heads=32, num_kv_heads=8, head_dim=128, bytes_per_element=2)
    memory_s, compute_s = ex.roofline_time_s(nbytes, flops, H200)
    step = ServingPoint.decode(LLAMA3_8B, H200, 64, 4096)
    return [
        Claim(a, "cell-03", "one layer's KV read, us", memory_s * 1e6, "**{:.0f} µs per layer", step),
        Claim(a, "cell-03", "one layer's K and V, GB", nbytes / 1e9, "read {:.2f} GB of keys", step),
        Claim(a, "cell-03", "one layer's attention FLOPs, G", flops / 1e9, "does {:.1f} GFLOP", step),
        Claim(a, "cell-03", "its FLOPs per byte", flops / nbytes, "with them: {:.0f} FLOPs per byte", step),
        Claim(a, "cell-03", "its compute time, us", compute_s * 1e6, "and the math {:.1f} µs", step),
        Claim(a, "cell-03", "32 layers of it, ms", 32 * memory_s * 1e3, "that is {:.1f} ms per", step),
    ]


def _ch09() -> list[Claim]:
    a = "ch09_capacity_and_concurrency"
    h100, h200 = capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 2048), capacity.kv_ceiling(LLAMA3_8B, H200, 2048)
    return [
        Claim(a, "cell-03", "sequences of 2048 tokens in an H100's KV cache", h100, "{} sequences",
              _ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-03", "sequences of 2048 tokens in an H200's KV cache", h200, "({} on an H200)",
              _ceiling_point(LLAMA3_8B, H200, 2048)),
        Claim(a, "cell-03", "vLLM's cap over the H100's KV ceiling at 2048", costmodel.DEFAULT_MAX_NUM_SEQS / h100,
              "{:.1f} times what fits", _ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-05", "the KV ceiling at 2048 in the walk-through's table", h100, "| {} |",
              _ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        Claim(a, "cell-35", "the KV ceiling at 2K in the interview answer", h100, "{} sequences at 2K",
              _ceiling_point(LLAMA3_8B, H100_SXM, 2048)),
        *_ch09_steady_state(a),
        *_ch09_fleet(a),
        *_ch09_interview(a),
        *_ch09_drills(a),
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
    c = "cell-36"
    return [
        Claim(a, c, "drill 1", d1, "drill_1 = {},", _ceiling_point(LLAMA3_8B, H200, 3000)),
        Claim(a, c, "drill 2", d2, "drill_2 = {},", ServingPoint.decode(LLAMA3_8B, H200, d2, 127)),
        Claim(a, c, "drill 3", d3, "drill_3 = {:.1f} sequences",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, round(d3), round(capacity.mean_context(64, 512)))),
        Claim(a, c, "drill 4", d4.gpus, "drill_4 = {} GPUs", ServingPoint.decode(LLAMA3_8B, H100_SXM, 96, 4040)),
        Claim(a, c, "drill 5", d5, "drill_5 = {:.1f} input tokens", ServingPoint.decode(LLAMA3_8B, H100_SXM, 96, 4096)),
        Claim(a, c, "drill 6", d6, "drill_6 = {} tokens",
              ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(4096,) * 96, prefill_chunks=(d6 - 96,))),
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


def _prefill_s(tokens: int) -> float:
    return costmodel.step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=int(tokens)).seconds(DEFAULT_STEP_OVERHEAD_S)


def _ch12() -> list[Claim]:
    """The utilization limits of chapter 12's opening: a prefill server whose one-prompt steps take 100 ms (the step
    is the point), with equal prompts and with log-normal ones, through the prefill times' cv2."""
    from servelab.simulator import lognormal_lengths

    a = "ch12_queueing_and_overload"
    prompt = min(range(1024, 16385, 16), key=lambda p: abs(_prefill_s(p) - 0.1))
    step = ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(prompt,))

    def times_cv2(sigma: float) -> float:
        lengths = lognormal_lengths(1500, prompt * math.exp(-sigma ** 2 / 2), sigma, seed=2, high=8 * prompt)
        times = np.array([_prefill_s(x) for x in lengths])
        return float(times.var() / times.mean() ** 2)

    def lengths_cv2(sigma: float) -> float:
        lengths = lognormal_lengths(1500, prompt * math.exp(-sigma ** 2 / 2), sigma, seed=2, high=8 * prompt)
        return float(np.var(lengths) / np.mean(lengths) ** 2)

    equal = queueing.utilization_limit(0.8, 0.1, 0.0)
    # a target on the mean: the largest rho whose M/D/1 mean wait rho s / (2 (1 - rho)) leaves 800 ms - s
    mean_target = 2 * (0.8 - 0.1) / (0.1 + 2 * (0.8 - 0.1))
    mean_wait = queueing.mg1_mean_wait(equal, 0.1)
    s08, s06 = (queueing.utilization_limit(0.8, 0.1, times_cv2(s)) for s in (0.8, 0.6))
    return [
        Claim(a, "cell-03", "p99 800 ms over 100 ms prefills, equal prompts", equal * 100, "{:.0f}% utilization", step),
        Claim(a, "cell-03", "the same, log-normal prompts at sigma 0.8", s08 * 100, "**{:.0f}%**", step),
        Claim(a, "cell-03", "the same, log-normal prompts at sigma 0.6", s06 * 100, "it is {:.0f}%", step),
        Claim(a, "cell-05", "the limit at sigma 0.8 in the walkthrough", s08, "{:.3f} at σ = 0.8", step),
        Claim(a, "cell-29", "the interview answer's equal prompts", equal * 100, "equal prompts allow {:.0f}%", step),
        Claim(a, "cell-29", "the interview answer's log-normal prompts", s08 * 100, "allow {:.0f}%.", step),
        Claim(a, "cell-29", "the prefill times' cv2 at sigma 0.8", times_cv2(0.8),
              "give prefill times with cv² = {:.2f}", step),
        Claim(a, "cell-29", "the lengths' cv2 at sigma 0.8", lengths_cv2(0.8), "more than the lengths' {:.2f}", step),
        Claim(a, "cell-29", "requests a one-minute spike at twice capacity leaves", (20 - 10) * 60.0,
              "capacity of 10 a second leaves {:.0f}\nrequests queued", None, "a queue length, not a step"),
        Claim(a, "cell-29", "seconds they take to drain", queueing.drain_time(20, 5, 10, 60), "still arriving, {:.0f} "
              "seconds", None, "a drain time, not a step"),
        Claim(a, "cell-29", "answers that go to clients who left", queueing.dead_requests(20, 5, 10, 60, 30),
              "client timeout, {:.0f} of those", None, "a count of requests, not a step"),
        Claim(a, "cell-29", "the p99 wait over the mean wait at the 70% limit",
              queueing.wait_quantile(0.99, equal, mean_wait) / mean_wait, "the p99 wait is {:.1f} times the mean",
              step),
        Claim(a, "cell-29", "the utilization a mean-TTFT target of 800 ms allows", mean_target * 100,
              "would allow {:.0f}% utilization", None, "a utilization of the queue, not a step"),
        Claim(a, "cell-29", "the p99 TTFT there", queueing.ttft_quantile(0.99, mean_target, 0.1),
              "the p99 TTFT is {:.1f} s", None, "a queueing delay, not a step"),
        *_ch12_drills(a),
    ]


def _ch12_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them: queueing numbers, no single step."""
    why = "a queueing number (a utilization, a drain time, a count of requests), not a step"
    d4 = max((b for b in range(0, 30_001) if queueing.admit_by_deadline(b, 3000, 12_000, 2.0)), default=-1)
    return [
        Claim(a, "cell-30", "drill 1", queueing.utilization_limit(1.0, 0.15, math.exp(0.8 ** 2) - 1),
              "drill_1 = {:.3f},", None, why),
        Claim(a, "cell-30", "drill 2", queueing.drain_time(80, 25, 40, 60), "drill_2 = {:.1f} s", None, why),
        Claim(a, "cell-30", "drill 3", queueing.dead_requests(80, 25, 40, 60, 20), "drill_3 = {:,.0f} requests", None,
              why),
        Claim(a, "cell-30", "drill 4", d4, "drill_4 = {:,} tokens", None, why),
        Claim(a, "cell-30", "drill 5", sum(queueing.retry_delay(k, 0.25, 1.5) for k in range(5)), "drill_5 = {:.2f} s",
              None, why),
    ]


def _ch13() -> list[Claim]:
    """The interference and the KV quota of chapter 13's interview answer, on the steps they describe."""
    from servelab.analytic import fairness

    a = "ch13_fairness_and_priority"
    chats = (2000,) * 64
    quota = fairness.batch_kv_quota(LLAMA31_8B, H100_SXM, 0.030, 64, 2000, 16000)
    alone = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, 0, 0) * 1e3
    beside = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, 20, 16000) * 1e3
    return [
        Claim(a, "cell-27", "64 chats at 2K alone, ms a step", alone, "step takes {:.1f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats)),
        Claim(a, "cell-27", "the same beside 20 documents of 16K", beside, "make it {:.1f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (16000,) * 20)),
        Claim(a, "cell-27", "the batch class's KV quota at 30 ms", quota, "({:,} tokens)",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (16000,) * (quota // 16000))),
        Claim(a, "cell-27", "the KV cache the quota is cut from", costmodel.kv_capacity_tokens(LLAMA31_8B, H100_SXM),
              "holds {:,} tokens", full_cache(LLAMA31_8B, H100_SXM)),
        *_ch13_shares(a),
        *_ch13_interview(a),
        *_ch13_drills(a),
    ]


def _ch13_interview(a: str) -> list[Claim]:
    """The interview answer's token prices and the documents the 30 ms target alone would allow."""
    from servelab.analytic import fairness

    flat = fairness.token_weights(LLAMA31_8B, H100_SXM, prompt_len=2000, batch=64, context_len=2000)
    by_target = max(n for n in range(0, 200)
                    if fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 64, 2000, n, 16000) <= 0.030)
    return [
        Claim(a, "cell-27", "a prompt token's flat price, us", flat.prefill_s * 1e6, "a prompt token costs {:.0f} us",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(2000,) * 4)),
        Claim(a, "cell-27", "an output token's flat price over a prompt token's", flat.decode_s / flat.prefill_s,
              "takes about {:.0f} times the GPU time", ServingPoint.decode(LLAMA31_8B, H100_SXM, 64, 2000)),
        Claim(a, "cell-27", "documents of 16K the 30 ms target alone allows", by_target,
              "the step has time for {} documents", None,
              "a count the KV cache then refuses: the sentence goes on to the 21 that fit"),
    ]


def _ch13_drills(a: str) -> list[Claim]:
    """The drills' answers as the solution's drills cell prints them, on their steps."""
    from servelab.analytic import fairness

    d1 = fairness.interactive_tpot(LLAMA31_8B, H100_SXM, 96, 1500, 12, 24000) * 1e3
    d2 = fairness.batch_kv_quota(LLAMA31_8B, H100_SXM, 0.020, 96, 1500, 24000)
    w = fairness.token_weights(LLAMA31_8B, H100_SXM, 2000, 64, 2000)
    chat = 500 * w.prefill_s + 300 * w.decode_s
    d3 = (0.9 / (1 - 0.9) * chat - 300 * w.decode_s) / w.prefill_s
    w4 = fairness.token_weights(LLAMA31_8B, H100_SXM, 2000, 32, 4000)
    chats = (1500,) * 96
    return [
        Claim(a, "cell-28", "drill 1", d1, "drill_1 = {:.2f} ms",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (24000,) * 12)),
        Claim(a, "cell-28", "drill 2", d2, "drill_2 = {:,} tokens",
              ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=chats + (24000,) * (d2 // 24000))),
        Claim(a, "cell-28", "drill 3", d3, "drill_3 = {:,.0f} tokens", None,
              "a prompt length that gives a share under request turns, priced at flat weights"),
        Claim(a, "cell-28", "drill 4", w4.decode_s / w4.prefill_s, "drill_4 = {:.2f}",
              ServingPoint.decode(LLAMA31_8B, H100_SXM, 32, 4000)),
    ]


def _ch13_shares(a: str) -> list[Claim]:
    """The document tenant's share of the GPU beside a chat tenant (cell-03, the interview), measured in the
    simulator from step durations while both are backlogged, under three schedulers."""
    from servelab.analytic import fairness
    from servelab.simulator import MixedBudget, Requests, TokenFair, Traced, simulate
    from servelab.simulator.fair import measured_service, tenant_service

    flat = fairness.token_weights(LLAMA31_8B, H100_SXM, prompt_len=2000, batch=64, context_len=2000)
    priced = fairness.ContextWeights(LLAMA31_8B, H100_SXM, batch=64)
    doc_len = round(fairness.document_len_for_share(0.96, (300, 200), 200, flat))
    tenant = np.array([0, 1] * 80)
    reqs = Requests(np.zeros(160), np.array([doc_len, 300] * 80), np.array([200, 200] * 80))
    why = "a share measured over a simulated run of hundreds of steps"
    shares = {}
    for label, policy in (("turns", MixedBudget(max_num_batched_tokens=2048, max_num_seqs=64)),
                          ("flat", TokenFair(tenant, flat, max_num_batched_tokens=2048, max_num_seqs=64)),
                          ("context", TokenFair(tenant, priced, max_num_batched_tokens=2048, max_num_seqs=64))):
        traced = Traced(policy)
        res = simulate(reqs, traced, LLAMA31_8B, H100_SXM)
        used = measured_service(traced.steps, traced.contexts, res.step_duration_s, tenant, LLAMA31_8B, H100_SXM)
        counted = tenant_service(traced.steps, tenant, flat)
        k = next(k for k, step in enumerate(traced.steps) if any(i == 159 for i, _ in step))
        shares[label] = (used[k - 1, 0] / used[k - 1].sum(), counted[k - 1, 0] / counted[k - 1].sum())
    doc_decode = ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=(doc_len,) + (300,) * 63)
    return [
        Claim(a, "cell-03", "documents' share under request turns", shares["turns"][0], "gets {:.1%} of the", None,
              why),
        Claim(a, "cell-03", "flat prices' share for the documents", 0.96, "The {:.0%} often", None,
              "the share flat prices give; it sets the document length"),
        Claim(a, "cell-03", "the document length for 96% at flat prices", doc_len, "requests are {:,}-token", None,
              "a prompt length chosen to reproduce a share"),
        Claim(a, "cell-03", "a prompt token's flat price", flat.prefill_s * 1e6, "{:.1f} us a prompt token",
              ServingPoint(LLAMA31_8B, H100_SXM, prefill_chunks=(2000,) * 4)),
        Claim(a, "cell-03", "an output token's flat price", flat.decode_s * 1e6, "{:.1f} us an output token",
              ServingPoint.decode(LLAMA31_8B, H100_SXM, 64, 2000)),
        Claim(a, "cell-03", "the flat counter's own books", shares["flat"][1], "shows {:.1%} in its own", None, why),
        Claim(a, "cell-03", "the flat counter, measured", shares["flat"][0], "gives the documents {:.1%}", None, why),
        Claim(a, "cell-03", "an output token at a document's context over the flat price",
              priced.cost(0, 1, doc_len) / flat.decode_s, "costs {:.1f} times the flat price", doc_decode),
        Claim(a, "cell-03", "the context-priced counter, measured", shares["context"][0], "brings them to {:.1%}",
              None, why),
        Claim(a, "cell-27", "request turns in the interview", shares["turns"][0], "turns leave the documents {:.1%}",
              None, why),
        Claim(a, "cell-27", "the flat counter in the interview", shares["flat"][0], "flat prices {:.1%}", None, why),
        Claim(a, "cell-27", "the context counter in the interview", shares["context"][0], "context prices {:.1%}",
              None, why),
    ]


CHAPTERS: dict[str, Callable[[], list[Claim]]] = {
    "ch01_continuous_batching": _ch01,
    "ch02_nanovllm_scheduler": _ch02,
    "ch03_token_budget": _ch03,
    "ch04_radix_cache": _ch04,
    "ch05_lock_ref_eviction": _ch05,
    "ch06_triton_paged_attention": _ch06,
    "ch09_capacity_and_concurrency": _ch09,
    "ch12_queueing_and_overload": _ch12,
    "ch13_fairness_and_priority": _ch13,
}


def of(assignment: str) -> list[Claim]:
    """Every registered claim of a chapter ([] for a chapter with none yet)."""
    fn = CHAPTERS.get(assignment)
    return fn() if fn else []
