"""Chapter 10's numbers: what overlapping the CPU and GPU parts of a step buys."""

from __future__ import annotations

from servelab.analytic import costmodel
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, H100_SXM, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim
from servelab.schedulers.async_scheduler import overlap_speedup


def ch10() -> list[Claim]:
    """The opening: a hypothetical CPU part as long as a small decode step's GPU part, and the course's 0.5 ms
    against a larger step; each point is the decode step whose roofline time is the GPU part."""
    a = "ch10_async_scheduling"
    small = ServingPoint.decode(LLAMA3_8B, H100_SXM, 8, 256)
    large = ServingPoint.decode(LLAMA3_8B, H100_SXM, 64, 1024)
    small_s = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[256] * 8, overhead_s=0)
    large_s = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[1024] * 64, overhead_s=0)
    return [
        Claim(a, "cell-03", "the gain when the CPU part equals the GPU part", overlap_speedup(small_s, small_s),
              "({:.1f}x)", small),
        Claim(a, "cell-03", "8 decodes at 256 tokens, GPU ms", small_s * 1e3, "tokens\nis {:.1f} ms on an H100",
              small),
        Claim(a, "cell-03", "the course's CPU part a step, ms", DEFAULT_STEP_OVERHEAD_S * 1e3,
              "the course assumes {:.1f} ms", large),
        Claim(a, "cell-03", "64 decodes at 1,024 tokens, GPU ms", large_s * 1e3, "({:.1f} ms of GPU)", large),
        Claim(a, "cell-03", "their gain from overlap at 0.5 ms", overlap_speedup(DEFAULT_STEP_OVERHEAD_S, large_s) - 1,
              "gain only\n{:.0%}", large),
    ]
