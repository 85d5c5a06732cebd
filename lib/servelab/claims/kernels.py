"""Chapter 06's numbers: one layer's paged decode attention."""

from __future__ import annotations

from servelab.analytic.costmodel import H200, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim


def ch06() -> list[Claim]:
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
