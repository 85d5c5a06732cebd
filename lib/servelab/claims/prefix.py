"""Chapters 04-05's numbers: the radix cache's skipped prefill and hit rates."""

from __future__ import annotations

from servelab.analytic.costmodel import H200, LLAMA2_7B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim


def ch04() -> list[Claim]:
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


def ch05() -> list[Claim]:
    """Chapter 05's opening: the radix cache's hit rate on eight five-turn chats at two cache sizes."""
    from servelab.engine.prefix_compare import multi_turn_chats, sweep_cache_sizes

    a = "ch05_lock_ref_eviction"
    runs = sweep_cache_sizes(multi_turn_chats(n_chats=8, turns=5, seed=0), [512, 1024], block_size=16)
    hit = {r.cache_tokens: r.hit_rate for r in runs["radix (page 1)"]}
    why = "a hit rate over 40 requests served through a cache of that many tokens (no model step is priced)"
    return [Claim(a, "cell-02", "hit rate with 1024 tokens of KV", hit[1024], "**{:.0%} of the prefill", None, why),
            Claim(a, "cell-02", "hit rate with 512 tokens of KV", hit[512], "KV, {:.0%} with 512.**", None, why)]
