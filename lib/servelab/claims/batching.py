"""Chapters 01-03's numbers: the KV budget, the token budget's long prompts."""

from __future__ import annotations

from servelab.analytic import costmodel, ordering
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA3_8B, LLAMA31_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim, full_cache


def ch01() -> list[Claim]:
    cap = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)
    return [Claim("ch01_continuous_batching", "setup-7", "KV cache of Llama-3-8B on an H100", cap, "{:,}",
                  full_cache(LLAMA3_8B, H100_SXM))]


def ch02() -> list[Claim]:
    cap = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)
    return [Claim("ch02_nanovllm_scheduler", "c0a1f2e7", "KV budget of Llama-3-8B on an H100", cap, "{:,}",
                  full_cache(LLAMA3_8B, H100_SXM))]


def ch03() -> list[Claim]:
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
        *_ch03_orders(a),
    ]


def _ch03_orders(a: str) -> list[Claim]:
    """The orders of the 500-request workload (the table of cell q8-orders-md and the sentences under it): every
    number measured over a simulated run of thousands of steps, each table entry anchored on its row."""
    why = "measured over a simulated run of 500 requests and thousands of steps"
    table = q8_orders_table()
    out = []
    for label, values in table.items():
        for k, v in enumerate(values):
            shown = "".join(f"{w:.2f} s | " for w in values[:k])
            out.append(Claim(a, "q8-orders-md", f"{label}, column {k + 1}", v, f"| {label} | {shown}{{:.2f}} s |",
                             None, why))
    f, s, g, m = (table[k] for k in Q8_ORDERS[:4])
    p = [table[k] for k in Q8_ORDERS[4:]]
    said = [("FCFS TTFT mean", f[0], f"from {{:.2f}} s to {m[0]:.2f} s: a newcomer"),
            ("MLFQ TTFT mean", m[0], "s to {:.2f} s: a newcomer"),
            ("FCFS completion mean", f[2], "Mean completion rises from {:.2f} s"),
            ("MLFQ completion mean", m[2], "to {:.2f} s: every newcomer"),
            ("predicted, true lengths", p[0][2], "mean completion {:.2f} s with the true"),
            ("predicted, sigma 0.5", p[1][2], f"{{:.2f}}, {p[2][2]:.2f} and"),
            ("predicted, sigma 1", p[2][2], ", {:.2f} and"),
            ("predicted, sigma 2", p[3][2], "and {:.2f} s at σ 0.5"),
            ("FCFS completion, again", f[2], "against {:.2f} s for FCFS"),
            ("SPF, the 32K prompt", s[4], "stream ends: {:.2f} s"),
            ("aged, the 32K prompt", g[4], "With aging: {:.2f} s"),
            ("SPF TTFT p99", s[1], f"from {{:.2f}} s to {g[1]:.2f} s."), ("aged TTFT p99", g[1], "s to {:.2f} s.")]
    out += [Claim(a, "q8-orders-md", name, v, fmt, None, why) for name, v, fmt in said]
    overtake = 32768 / 4096.0          # the seconds after which its aged priority is 0, below every newcomer's
    out.append(Claim(a, "q8-orders-md", "the wait after which the aged 32K prompt leads every newcomer", overtake,
                     "32768 / 4096 = {:.0f} s the 32K", None, "a wait that follows from the aging rule, no step"))
    return out


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
    d8 = ordering.aging_rate_to_overtake(65536, 512, 4.0)
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
        Claim(a, c, "drill 8", d8, "drill_8 = {:,.0f} tokens a second", None,
              "an aging rate, a scheduler's setting: it prices no step"),
    ]


Q8_ORDERS = ("FCFS", "shortest prompt first", "shortest prompt first, aged", "skip-join MLFQ",
             "predicted output, error σ 0", "predicted output, error σ 0.5", "predicted output, error σ 1",
             "predicted output, error σ 2")


def q8_orders_table() -> dict[str, tuple[float, ...]]:
    """Chapter 03's orders on its one workload (the cell after the 32K-prompt answer runs the same): for each order,
    the 500 requests' TTFT mean and p99, completion mean and p99, and the 32K prompt's TTFT (seconds)."""
    import numpy as np

    from servelab.analytic import ordering
    from servelab.simulator import (
        MixedBudget,
        Ordered,
        Requests,
        Swap,
        lognormal_lengths,
        merge_requests,
        poisson_arrivals,
        simulate,
    )

    n = 500
    bg = Requests(poisson_arrivals(n, 16.0, seed=21), lognormal_lengths(n, 256, 0.8, seed=22, high=4096),
                  lognormal_lengths(n, 64, 1.5, seed=23, high=4096))
    reqs, (ids, long) = merge_requests(bg, Requests([10.0], [32768], [64]))

    def guess(sigma):
        return ordering.predicted_lengths(reqs.output_len, sigma, seed=24)

    policies = [MixedBudget(2048, 16), MixedBudget(2048, 16, prefill_order="shortest_first"),
                MixedBudget(2048, 16, prefill_order="shortest_first", aging_rate=4096.0),
                Ordered("mlfq", 2048, 16, first_quantum=4, levels=6, prompt_tokens_per_step=512)]
    policies += [Ordered("predicted", 2048, 16, predicted_output=guess(s))
                 for s in (0, 0.5, 1, 2)]
    out = {}
    for label, policy in zip(Q8_ORDERS, policies, strict=True):
        res = simulate(reqs, policy, LLAMA31_8B, H100_SXM, preemption=Swap(host_kv_tokens=1_000_000, block_size=256))
        ttft, done = res.ttft[ids], (res.finish_s - res.arrival_s)[ids]
        out[label] = (float(ttft.mean()), float(np.percentile(ttft, 99)), float(done.mean()),
                      float(np.percentile(done, 99)), float(res.ttft[long][0]))
    return out


def q8_row(label: str, values) -> str:
    """A row of the markdown table of `q8_orders_table`, as the notebook states it."""
    return f"| {label} | " + " | ".join(f"{v:.2f} s" for v in values) + " |"
