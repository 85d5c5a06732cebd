"""The paged-attention benchmark's configurations and their inputs, without timing: `Case`, the full and smoke
sets, `paged_inputs` (caches of shuffled blocks and a block table), the bytes a kernel must move and the causal
FLOPs of a case, and where the recorded results are (`RESULTS`). scripts/bench_kernels.py times them on a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["RESULTS", "Case", "bytes_moved", "causal_flops", "full_cases", "paged_inputs", "smoke_cases"]

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "bench" / "kernels_results.md"   # the last recorded run (scripts/bench_kernels.py writes it)


@dataclass
class Case:
    """One benchmark configuration: decode (q_lens None) or prefill chunks (q_lens per sequence)."""

    name: str
    seq_lens: list[int]
    q_lens: list[int] | None = None
    kernel: str = "paged_decode"        # paged_decode | split_kv_decode | prefill_attention
    num_splits: int | None = None       # split_kv_decode: None -> auto_num_splits
    goal: float | None = None           # fraction of copy bandwidth
    beat_sdpa: bool = False
    tuning: dict = field(default_factory=dict)


def full_cases(num_q_heads=32, num_kv_heads=8) -> list[Case]:
    gen = torch.Generator().manual_seed(0)
    mixed = torch.randint(512, 8193, (128,), generator=gen).tolist()
    return [
        Case("decode 64 x 4K", [4096] * 64, goal=0.85),
        Case("decode 4 x 32K, split-KV", [32768] * 4, kernel="split_kv_decode", goal=0.80, beat_sdpa=True),
        Case("decode 4 x 32K, no split", [32768] * 4),
        Case("decode 128 x U[512, 8K]", mixed, kernel="paged_decode"),
        Case("decode 1 x 2K (latency)", [2048], kernel="split_kv_decode"),
        Case("chunked prefill 8 x 512 on 4K prefix", [4096 + 512] * 8, q_lens=[512] * 8, kernel="prefill_attention"),
    ]


def smoke_cases() -> list[Case]:
    return [
        Case("smoke decode 4 x 80", [80] * 4, goal=0.85),
        Case("smoke split 2 x 300", [300] * 2, kernel="split_kv_decode", num_splits=3, beat_sdpa=True, goal=0.8),
        Case("smoke mixed decode", [17, 64, 5], kernel="paged_decode"),
        Case("smoke prefill 2 x 24 on 40", [64, 64], q_lens=[24, 24], kernel="prefill_attention"),
    ]


def paged_inputs(case: Case, *, num_q_heads, num_kv_heads, head_dim, block_size, dtype, device, min_cache_bytes,
                 seed=0):
    """Caches of at least ``min_cache_bytes`` (K and V together) and a block table of shuffled distinct ids."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    blocks_needed = [-(-n // block_size) for n in case.seq_lens]
    block_bytes = 2 * block_size * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
    num_blocks = max(sum(blocks_needed), -(-min_cache_bytes // block_bytes))
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, device=device, dtype=dtype)
    v_cache = torch.randn(shape, device=device, dtype=dtype)
    ids = torch.randperm(num_blocks, generator=gen)[:sum(blocks_needed)].to(torch.int32)
    block_tables = torch.zeros(len(case.seq_lens), max(blocks_needed), dtype=torch.int32)
    for s, chunk in enumerate(ids.split(blocks_needed)):
        block_tables[s, :len(chunk)] = chunk
    seq_lens = torch.tensor(case.seq_lens, dtype=torch.int32)
    num_q = sum(case.q_lens) if case.q_lens else len(case.seq_lens)
    q = torch.randn(num_q, num_q_heads, head_dim, generator=gen).to(dtype)
    return q.to(device), k_cache, v_cache, block_tables.to(device), seq_lens.to(device)


def bytes_moved(case: Case, q, k_cache) -> int:
    """K/V of every sequence's tokens once, the queries, the outputs and the block table."""
    _, _, num_kv_heads, head_dim = k_cache.shape
    kv = 2 * sum(case.seq_lens) * num_kv_heads * head_dim * k_cache.element_size()
    return kv + 2 * q.numel() * q.element_size() + sum(-(-n // k_cache.shape[1]) for n in case.seq_lens) * 4


def causal_flops(case: Case, num_q_heads: int, head_dim: int) -> int:
    """4 * heads * head_dim per visible (query, key) pair: QK^T and PV, a multiply-add each."""
    pairs = 0
    for seq_len, q_len in zip(case.seq_lens, case.q_lens or [1] * len(case.seq_lens)):
        ctx = seq_len - q_len
        pairs += q_len * ctx + q_len * (q_len + 1) // 2
    return 4 * num_q_heads * head_dim * pairs
