"""Chapter 11's numbers: what speculation buys at batch 1, where it stops paying, and the batches that fit."""

from __future__ import annotations

from servelab.analytic import speculation
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab.analytic.speculation import DRAFT_1B
from servelab.claims.core import Claim

K, ALPHA = 4, 0.7


def _verify(batch: int, context: int) -> ServingPoint:
    """The verification step: `batch` sequences holding `context` tokens, each computing its token and K drafts."""
    return ServingPoint.decode(LLAMA3_8B, H100_SXM, batch, context, draft_tokens=K)


def _fit(context: int) -> int:
    """The most verifying sequences (K drafts each) the KV cache and max_num_seqs allow at `context`."""
    return max(b for b in range(1, 1025) if speculation.fits(LLAMA3_8B, H100_SXM, b, context, K))


def ch11() -> list[Claim]:
    a = "ch11_speculative_decoding"
    one = _verify(1, 1024)
    gain = speculation.speculative_speedup(LLAMA3_8B, H100_SXM, 1, 1024, K, ALPHA)
    verify_s = speculation.verify_step_time(LLAMA3_8B, H100_SXM, 1, 1024, K)
    plain_s = speculation.verify_step_time(LLAMA3_8B, H100_SXM, 1, 1024, 0)
    e = speculation.expected_tokens_per_step(ALPHA, K)
    paid = speculation.speculative_speedup(LLAMA3_8B, H100_SXM, 1, 1024, K, ALPHA, DRAFT_1B)
    draft_s = speculation.draft_time(DRAFT_1B, H100_SXM, 1, 1024, K)
    cross = {c: speculation.crossover_batch(LLAMA3_8B, H100_SXM, c, K, ALPHA) for c in (128, 256, 512)}
    cross_1b = {c: speculation.crossover_batch(LLAMA3_8B, H100_SXM, c, K, ALPHA, DRAFT_1B) for c in (256, 512)}
    fit = {c: _fit(c) for c in (512, 1024, 4096)}
    # attention FLOPs per KV byte of a verification: each KV element meets (k + 1) queries of (query heads / KV heads)
    # heads, 2 FLOPs each, over its bytes; and the H100's ridge point
    m = LLAMA3_8B
    per_byte = (K + 1) * (m.num_heads / m.num_kv_heads) * 2 / m.bytes_per_kv_element
    ridge = H100_SXM.peak_flops / H100_SXM.hbm_bandwidth
    draft_why = "the draft model's own steps: the serving model prices the target's; the point is the target's step"
    return [
        Claim(a, "cell-03", "the speedup at batch 1 and 1024 tokens", gain, "{:.2f} times faster**", one),
        Claim(a, "cell-03", "the verification step at batch 1, ms", verify_s * 1e3, "costs {:.3f} ms against", one),
        Claim(a, "cell-03", "the plain step at batch 1, ms", plain_s * 1e3, "{:.3f} ms for a plain one",
              ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 1024)),
        Claim(a, "cell-03", "tokens a verification appends", e, "appends {:.2f} tokens on average", one),
        Claim(a, "cell-03", "the speedup with the 1B draft model", paid, "the gain is {:.2f}x", None, draft_why),
        Claim(a, "cell-03", "the 1B draft model's 4 steps, ms", draft_s * 1e3, "its 4 steps cost {:.2f} ms", None,
              draft_why),
        Claim(a, "cell-03", "the crossover at 256 tokens", cross[256], "a batch of **{}** sequences",
              _verify(cross[256], 256)),
        Claim(a, "cell-03", "verifying sequences that fit at 1024 tokens", fit[1024], "KV cache holds {} verifying",
              _verify(fit[1024], 1024)),
        Claim(a, "cell-03", "verifying sequences that fit at 4096 tokens", fit[4096], "at 4096 only {}.",
              _verify(fit[4096], 4096)),
        Claim(a, "cell-31", "verifying sequences that fit at 1024 in the visible test", fit[1024],
              "cache holds only {} verifying", _verify(fit[1024], 1024)),
        Claim(a, "cell-08", "a verification's attention FLOPs per KV byte", per_byte, "= {:.0f} FLOPs per KV byte",
              None, "a ratio of Llama-3-8B's shapes at k = 4, the same at every step"),
        Claim(a, "cell-08", "the H100's FLOPs per byte of HBM", ridge, "H100's {:.0f}.", None,
              "the GPU's ridge point, a ratio of two datasheet figures"),
        Claim(a, "cell-09", "the crossover at 128 tokens", cross[128], "     128 {:>14}", _verify(cross[128], 128)),
        Claim(a, "cell-09", "the crossover at 256 tokens in the table", cross[256], "     256 {:>14}",
              _verify(cross[256], 256)),
        Claim(a, "cell-09", "the 1B draft's crossover at 256 tokens", cross_1b[256],
              f"     256 {cross[256]:>14} {{:>14}}", _verify(cross_1b[256], 256)),
        Claim(a, "cell-09", "the crossover at 512 tokens", cross[512], "     512 {:>14}", _verify(cross[512], 512)),
        Claim(a, "cell-09", "the 1B draft's crossover at 512 tokens", cross_1b[512],
              f"     512 {cross[512]:>14} {{:>14}}", _verify(cross_1b[512], 512)),
        Claim(a, "cell-09", "verifying sequences that fit at 512 tokens", fit[512], "{:>5}\n    1024",
              _verify(fit[512], 512)),
        Claim(a, "cell-33", "E at alpha 0.7, k 4 in the interview", e, "{:.2f} at alpha 0.7, k 4", one),
        Claim(a, "cell-33", "the batch-1 speedup in the interview", gain, "that is the speedup, {:.2f}x here", one),
        Claim(a, "cell-33", "the crossover at 256 in the interview", cross[256], "that is {} sequences on an H100",
              _verify(cross[256], 256)),
        Claim(a, "cell-33", "the 1B draft's crossover in the interview", cross_1b[256], "H100, {} with a 1B draft",
              _verify(cross_1b[256], 256)),
        Claim(a, "cell-33", "FLOPs per KV byte in the interview", per_byte, "only about {:.0f} FLOPs a", None,
              "a ratio of Llama-3-8B's shapes at k = 4"),
        Claim(a, "cell-33", "the crossover at 512 in the interview", cross[512], "({} at 512 tokens",
              _verify(cross[512], 512)),
        Claim(a, "cell-33", "verifying sequences that fit at 1024 in the interview", fit[1024], "holds {} sequences",
              _verify(fit[1024], 1024)),
        Claim(a, "cell-33", "the 1B draft's steps in the interview, ms", draft_s * 1e3, "own weights: {:.2f} ms",
              None, draft_why),
        Claim(a, "cell-33", "the batch-1 step with the 1B draft, ms", (verify_s + draft_s) * 1e3,
              "of the {:.1f} ms a step", None, draft_why),
    ]
