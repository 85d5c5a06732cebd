"""How a preempted sequence gets its KV back: recompute it (the default) or swap it to host memory and back.

`simulate(..., preemption="recompute")` drops a preempted sequence's KV, to be prefilled again (nano-vllm, vLLM
V1); `preemption=Swap(...)` (or `"swap"`, with the defaults) copies it to a host pool and back, as vLLM's V0 swap
did, each copy blocking the step it is made in. The rules and the defaults (vLLM V0's 4 GiB `swap_space`):
docs/simulator.md.

>>> from servelab.analytic.costmodel import LLAMA3_8B
>>> swap = Swap(host_kv_tokens=4096, link_bandwidth=64e9, copy_latency_s=10e-6, block_size=16)
>>> swap.host_tokens(1000), round(swap.seconds(LLAMA3_8B, 1000) * 1e3, 2)   # 63 blocks; 4032 copies
(1008, 42.38)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from servelab.analytic import kv_tiers
from servelab.analytic.costmodel import ModelSpec

SWAP_SPACE_BYTES = 4 * 2**30     # vLLM V0's default swap_space: 4 GiB of host memory per GPU


@dataclass(frozen=True)
class Swap:
    """Swap preemption's parameters: the host pool (tokens of KV; None: `SWAP_SPACE_BYTES` of the model's KV),
    the link's bandwidth in one direction (bytes/s), the fixed cost of one copy (s) and the block size (tokens)
    that sets how small each copy is."""

    host_kv_tokens: int | None = None
    link_bandwidth: float = kv_tiers.PCIE_GEN5_X16.bandwidth
    copy_latency_s: float = kv_tiers.DEFAULT_COPY_LATENCY_S
    block_size: int = 16

    def __post_init__(self):
        h = self.host_kv_tokens
        if h is not None and (isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 0):
            raise ValueError(f"Swap: host_kv_tokens (the host pool, in tokens of KV) must be an integer >= 0 or "
                             f"None, got {h!r}")
        b = self.link_bandwidth
        if isinstance(b, bool) or not isinstance(b, numbers.Real) or not b > 0 or not math.isfinite(b):
            raise ValueError(f"Swap: link_bandwidth must be a finite number of bytes/s > 0, got {b!r}")
        lat = self.copy_latency_s
        if isinstance(lat, bool) or not isinstance(lat, numbers.Real) or not lat >= 0 or not math.isfinite(lat):
            raise ValueError(f"Swap: copy_latency_s must be a finite number of seconds >= 0, got {lat!r}")
        bs = self.block_size
        if isinstance(bs, bool) or not isinstance(bs, numbers.Integral) or bs < 1:
            raise ValueError(f"Swap: block_size must be an integer >= 1, got {bs!r}")

    def host_tokens(self, tokens: int) -> int:
        """Host slots `tokens` tokens of KV take: whole blocks."""
        return -(-int(tokens) // self.block_size) * self.block_size

    def seconds(self, model: ModelSpec, tokens: int) -> float:
        """Copy time of `tokens` tokens of KV, one direction (`kv_tiers.swap_time`)."""
        return kv_tiers.swap_time(model, int(tokens), self.block_size, self.link_bandwidth, self.copy_latency_s)

    def pool_tokens(self, model: ModelSpec) -> int:
        """The host pool in tokens: `host_kv_tokens`, or the default swap space's worth of the model's KV."""
        if self.host_kv_tokens is not None:
            return int(self.host_kv_tokens)
        return int(SWAP_SPACE_BYTES // model.kv_bytes_per_token)


PREEMPTION_MODES = ("recompute", "swap")


def resolve(preemption) -> Swap | None:
    """`simulate`'s `preemption` argument as a Swap, or None for recompute."""
    if isinstance(preemption, Swap):
        return preemption
    if isinstance(preemption, str) and preemption in PREEMPTION_MODES:
        return Swap() if preemption == "swap" else None
    raise ValueError(f"preemption must be 'recompute', 'swap' or a Swap(...), got {preemption!r}")
