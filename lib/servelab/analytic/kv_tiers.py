"""Recompute or swap: what it costs to bring a preempted sequence's KV back, and where the two break even.

Recompute pays FLOPs (the tokens prefilled again); swap pays bytes over the host link plus a fixed cost per copy,
and a swap is a round trip (out when preempted, back in when resumed) where a recompute pays once. Per token they
meet at the **break-even bandwidth**: 2 x KV bytes per token / recompute seconds per token (the rule the chapter,
its crossover and the simulator keep: both copies block the step they are made in). Paged copies are small, so
the fixed cost dominates what a swap delivers: effective bandwidth of one copy = size / (latency + size / link
bandwidth). The reasoning: docs/analytic.md.

Units: bytes, seconds, bytes per second (decimal: 1 GB/s = 1e9 B/s).

>>> from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
>>> round(break_even_bandwidth(LLAMA3_8B, H100_SXM) / 1e9, 2)        # GB/s, a round trip at 50% of peak
9.11
>>> swap_copy_bytes(LLAMA3_8B, block_size=16)                         # one layer's K (or V) of one block
32768
>>> round(effective_copy_bandwidth(32768, PCIE_GEN5_X16.bandwidth, 10e-6) / 1e9, 2)
3.09
"""

from __future__ import annotations

import math
import numbers

from servelab.analytic import costmodel
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab.analytic.specs import LinkSpec

__all__ = [
    "DEFAULT_COPY_LATENCY_S",
    "DEFAULT_MFU",
    "LinkSpec",
    "PCIE_GEN5_X16",
    "PCIE_GEN5_X16_RAW",
    "break_even_bandwidth",
    "break_even_copy_bytes",
    "effective_copy_bandwidth",
    "recompute_time",
    "swap_copies",
    "swap_copy_bytes",
    "swap_time",
]


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _non_negative(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _fraction(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
        raise ValueError(f"mfu (the fraction of peak FLOP/s the recompute reaches) must be in (0, 1], got {value!r}")
    return float(value)


# PCIe Gen5 signals at 32 GT/s per lane with 128b/130b encoding: 16 lanes carry 32e9 x 16 x 128/130 / 8 bytes per
# second each way, 63.0 GB/s. NVIDIA's H100 and H200 spec tables list the host link as "PCIe Gen5: 128GB/s", the
# two directions added up and rounded (2 x 64). Neither is what a copy gets: packet headers and flow control take
# their share, and pinned host-device copies on a Gen5 x16 link reach about 50-55 GB/s. The figure the course uses,
# PCIE_GEN5_X16, is the middle of that range: an assumption stated here once, not a measurement of any one machine.
# One direction is what a swap-out or a swap-in can use.
PCIE_GEN5_X16_RAW = LinkSpec("PCIe Gen5 x16, after encoding", 32e9 * 16 * 128 / 130 / 8,
                             "PCIe Gen5: 32 GT/s a lane, 128b/130b encoding, 16 lanes, one direction")
PCIE_GEN5_X16 = LinkSpec("PCIe Gen5 x16, pinned copies", 53e9,
                         "the course's assumption: pinned host-device copies on Gen5 x16 reach about 50-55 GB/s "
                         "each way, below the 63.0 GB/s the encoding allows")

# Assumptions, stated once. The fraction of peak a recompute prefill reaches: a long prefill is compute-bound and
# well-tuned kernels run it at roughly half the tensor cores' peak. The fixed cost of one host copy (the driver
# call, the DMA set-up, the per-block loop around it): a round figure, not a measurement; the chapter sweeps it.
DEFAULT_MFU = 0.5
DEFAULT_COPY_LATENCY_S = 10e-6


def recompute_time(model: ModelSpec, gpu: GPUSpec, tokens: int, mfu: float = DEFAULT_MFU) -> float:
    """Seconds of compute to prefill a sequence's `tokens` tokens again from nothing, at `mfu` of peak.

    The FLOPs are `costmodel`'s for one prefill chunk of `tokens` tokens on no prefix: the matmuls (2 x matmul
    parameters per token), attention over the causal pairs, the LM head once. Memory traffic is left out: a
    prefill this long is compute-bound (and where it is not, the chapter prices it with the roofline instead).

    >>> from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B
    >>> round(recompute_time(LLAMA2_7B, H100_SXM, 1024) * 1e3, 2)   # 13.5 TFLOPs at 494.5 TFLOP/s
    27.38
    """
    tokens = _count("tokens", tokens, 1)
    mfu = _fraction(mfu)
    return costmodel.step_cost(model, gpu, prefill_tokens=tokens).flops / (mfu * gpu.peak_flops)


def break_even_bandwidth(model: ModelSpec, gpu: GPUSpec, tokens: int = 1024, mfu: float = DEFAULT_MFU) -> float:
    """The host-link bandwidth (bytes/s, one direction) at which swapping a token's KV out and back in takes as long
    as recomputing it: 2 x KV bytes per token / recompute seconds per token, for a sequence of `tokens` tokens. A
    swap is a round trip (out at preemption, in at resumption, each over one direction of the link); a recompute
    happens once.

    A token's KV is 2 (K and V) x layers x KV heads x head_dim x bytes. The recompute time per token is
    `recompute_time(tokens) / tokens` (long sequences cost a little more per token: attention grows with the
    context). GQA shrinks the KV and not the FLOPs, so it lowers the break-even; an H200 has an H100's compute,
    so it has the same break-even.

    >>> from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B
    >>> round(break_even_bandwidth(LLAMA2_7B, H100_SXM) / 1e9, 2), round(break_even_bandwidth(LLAMA2_7B, H200) / 1e9, 2)
    (39.22, 39.22)
    """
    tokens = _count("tokens", tokens, 1)
    return 2 * model.kv_bytes_per_token * tokens / recompute_time(model, gpu, tokens, mfu)


def swap_copy_bytes(model: ModelSpec, block_size: int) -> int:
    """Bytes of one copy in a paged swap: one block of one layer's keys (or values), block_size x KV heads x
    head_dim x bytes per element. The KV cache is a K and a V tensor per layer, each `[num_blocks, block_size,
    num_kv_heads, head_dim]`, so a block's K in one layer is contiguous, and nothing larger is.

    >>> from servelab.analytic.costmodel import LLAMA2_7B
    >>> swap_copy_bytes(LLAMA2_7B, 16)            # 16 x 32 x 128 x 2
    131072
    """
    block_size = _count("block_size", block_size, 1)
    nbytes = block_size * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    return int(nbytes) if float(nbytes).is_integer() else nbytes


def swap_copies(model: ModelSpec, tokens: int, block_size: int) -> int:
    """How many copies one direction of a swap of `tokens` tokens makes: a copy per block, per layer, per K and
    per V (ceil(tokens / block_size) blocks; a part-filled last block is copied whole).

    >>> from servelab.analytic.costmodel import LLAMA3_8B
    >>> swap_copies(LLAMA3_8B, 1000, 16)          # 63 blocks x 32 layers x 2
    4032
    """
    tokens = _count("tokens", tokens, 0)
    block_size = _count("block_size", block_size, 1)
    return -(-tokens // block_size) * model.num_layers * 2


def effective_copy_bandwidth(copy_bytes: float, link_bandwidth: float,
                             copy_latency_s: float = DEFAULT_COPY_LATENCY_S) -> float:
    """What one copy of `copy_bytes` bytes delivers over a link of `link_bandwidth` bytes/s that costs
    `copy_latency_s` per copy: size / (latency + size / bandwidth). Small copies get little of the link; the
    link's own bandwidth is the limit for large ones.

    >>> round(effective_copy_bandwidth(131072, 64e9, 10e-6) / 1e9, 2)    # 128 KiB: 10 us + 2.05 us
    10.88
    """
    copy_bytes = _positive("copy_bytes", copy_bytes)
    link_bandwidth = _positive("link_bandwidth", link_bandwidth)
    copy_latency_s = _non_negative("copy_latency_s", copy_latency_s)
    return copy_bytes / (copy_latency_s + copy_bytes / link_bandwidth)


def break_even_copy_bytes(target_bandwidth: float, link_bandwidth: float,
                          copy_latency_s: float = DEFAULT_COPY_LATENCY_S) -> float:
    """The smallest copy whose effective bandwidth reaches `target_bandwidth` (e.g. the break-even), solving
    s / (L + s / B) = T for s: s = T x L / (1 - T / B). Infinite when the target is the link's bandwidth or more.

    >>> round(break_even_copy_bytes(32e9, 64e9, 10e-6))                  # half the link: 32e9 x 10 us x 2
    640000
    """
    target_bandwidth = _positive("target_bandwidth", target_bandwidth)
    link_bandwidth = _positive("link_bandwidth", link_bandwidth)
    copy_latency_s = _non_negative("copy_latency_s", copy_latency_s)
    if target_bandwidth >= link_bandwidth:
        return math.inf
    return target_bandwidth * copy_latency_s / (1 - target_bandwidth / link_bandwidth)


def swap_time(model: ModelSpec, tokens: int, block_size: int, link_bandwidth: float,
              copy_latency_s: float = DEFAULT_COPY_LATENCY_S) -> float:
    """Seconds to move `tokens` tokens of a sequence's KV one way (out to the host, or back in) in the paged
    layout: `swap_copies` copies of `swap_copy_bytes` each, one after another, each paying `copy_latency_s` and
    its bytes at `link_bandwidth`. A preemption that swaps out and later back in pays this twice.

    >>> from servelab.analytic.costmodel import LLAMA3_8B
    >>> round(swap_time(LLAMA3_8B, 1000, 16, 64e9, 10e-6) * 1e3, 2)   # 4032 x (10 us + 32768 B / 64 GB/s)
    42.38
    """
    copies = swap_copies(model, tokens, block_size)
    link_bandwidth = _positive("link_bandwidth", link_bandwidth)
    copy_latency_s = _non_negative("copy_latency_s", copy_latency_s)
    return copies * (copy_latency_s + swap_copy_bytes(model, block_size) / link_bandwidth)
