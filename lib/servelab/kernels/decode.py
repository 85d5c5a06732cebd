"""Paged decode attention: one new query token per sequence, attending to all its cached keys.

Design: one program per (sequence, KV head). The program loads the GROUP query heads that share that KV
head as the rows of one matrix (padded to BLOCK_H >= 16 rows, the smallest tensor-core tile), then walks the
sequence's keys TILE positions at a time through the block table (``tiles.attend_tiles``). K and V are read
once per KV head, not once per query head: with 32 query and 8 KV heads that is 4x less traffic than a
program per query head, and decode is bound by exactly that traffic.

Few long sequences leave most of the GPU idle here (4 sequences x 8 KV heads = 32 programs for 132 SMs);
``split_kv`` splits each sequence's keys across programs for that case.

>>> import torch
>>> from servelab.kernels.decode import paged_decode
>>> k = torch.randn(4, 16, 1, 64); v = torch.randn(4, 16, 1, 64)
>>> q = torch.randn(2, 4, 64)                         # 2 sequences, 4 query heads sharing 1 KV head
>>> tables = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
>>> lens = torch.tensor([20, 1], dtype=torch.int32)   # sequence 0 uses blocks 3 and 1, sequence 1 block 0
>>> paged_decode(q, k, v, tables, lens).shape
torch.Size([2, 4, 64])
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from servelab.kernels.checks import (
    check_block_table_values,
    check_block_tables,
    check_kv_cache,
    check_out,
    check_power_of_two,
    check_queries,
    check_same_device,
    default_scale,
)
from servelab.kernels.launch import LOG2E, Launch, dtype_constexprs, padded, run_all
from servelab.kernels.tiles import attend_tiles
from servelab.kernels.tuning import decode_entry

# Defaults for the GPU, per Triton version (``tuning.TUNED_DECODE``, chosen with ``compile_check --sweep`` at
# sm_90 for bf16, head_dim 128; not yet timed on one): 64 keys per iteration put 32 KiB of K/V loads in flight
# per program (Triton's pipeliner copies them into shared memory with cp.async). With Triton 3.9, 8 warps
# compile to 64 registers, no spills and 38 KiB of shared memory, so 4 programs fit on an SM and the 512
# programs of 64 sequences x 8 KV heads run in one wave on 132 SMs. Triton 3.6 compiles the same to 76
# registers (3 per SM, two waves); its entry takes 4 warps (106 registers, 4 per SM).
# `scripts/gpu_check.sh` times the alternatives on a GPU and prints the winner to commit in the table.
DECODE_TUNING, DECODE_TUNED_FOR = decode_entry()
DECODE_TILE = DECODE_TUNING.tile
DECODE_NUM_WARPS = DECODE_TUNING.num_warps
DECODE_NUM_STAGES = DECODE_TUNING.num_stages
# fp32 (a checking dtype: exact IEEE dot products, on FMA units) takes twice the bytes and registers per tile.
DECODE_TILE_FP32 = 32


def decode_tile(dtype: torch.dtype, tile: int | None) -> int:
    """The tile to use: ``tile`` if given, else the default for ``dtype``."""
    if tile is not None:
        return tile
    return DECODE_TILE_FP32 if dtype == torch.float32 else DECODE_TILE


@triton.jit
def paged_decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale_log2,
                        stride_qs, stride_qh, stride_os, stride_oh, stride_bt,
                        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                        GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                        BLOCK_H: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr,
                        UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D_PAD)
    d_mask = offs_d < HEAD_DIM
    row_mask = (offs_h < GROUP)[:, None] & d_mask[None, :]
    heads = kv_head * GROUP + offs_h  # query heads kv_head*GROUP ... kv_head*GROUP + GROUP-1

    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :], mask=row_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    acc = tl.zeros([BLOCK_H, D_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc, m_i, l_i = attend_tiles(acc, m_i, l_i, q, offs_h, k_cache_ptr, v_cache_ptr,
                                 block_tables_ptr + seq.to(tl.int64) * stride_bt, kv_head, 0, seq_len, scale_log2,
                                 stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, offs_d, d_mask,
                                 BLOCK_SIZE, TILE, False, UPCAST, DOT_PRECISION, NUM_STAGES)
    # seq_len >= 1 (checked by the entry point), so every row saw at least one key and l_i > 0
    out = acc / l_i[:, None]
    tl.store(out_ptr + seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_mask)


def plan_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, *, scale=None, out=None, tile=None,
                      num_warps=DECODE_NUM_WARPS, num_stages=DECODE_NUM_STAGES, check_indices=True):
    """Check the arguments of ``paged_decode`` and return ``(out, [Launch])`` without running anything."""
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    _, group = check_queries(q, k_cache, "[num_seqs, num_q_heads, head_dim]")
    num_seqs = q.shape[0]
    check_block_tables(block_tables, seq_lens, num_seqs)
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens)
    tile = decode_tile(q.dtype, tile)
    check_power_of_two("tile", tile, 16)
    out = check_out(out, q)
    if check_indices:
        check_block_table_values(block_tables, seq_lens, num_blocks, block_size, min_lens=1)
    launch = Launch(
        paged_decode_kernel, (num_seqs, num_kv_heads),
        (out, q, k_cache, v_cache, block_tables, seq_lens, default_scale(head_dim, scale) * LOG2E,
         q.stride(0), q.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
         *k_cache.stride()[:3], *v_cache.stride()[:3]),
        dict(GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, BLOCK_H=padded(group), D_PAD=padded(head_dim),
             TILE=tile, NUM_STAGES=num_stages, **dtype_constexprs(paged_decode_kernel, q.dtype)),
        dict(num_warps=num_warps, num_stages=num_stages))
    return out, [launch]


def paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                 seq_lens: torch.Tensor, *, scale: float | None = None, out: torch.Tensor | None = None,
                 tile: int | None = None, num_warps: int = DECODE_NUM_WARPS, num_stages: int = DECODE_NUM_STAGES,
                 check_indices: bool = True) -> torch.Tensor:
    """Attention of one query token per sequence over its paged K/V; returns ``out [num_seqs, num_q_heads, D]``.

    Arguments:
      q             [num_seqs, num_q_heads, head_dim]; query head h reads KV head h // (num_q_heads/num_kv_heads)
      k_cache, v_cache  [num_blocks, block_size, num_kv_heads, head_dim], q's dtype (fp16, bf16 or fp32)
      block_tables  int32 [num_seqs, max_blocks]; entries past a sequence's last block are never read
      seq_lens      int32 [num_seqs], each in [1, max_blocks * block_size], counting the new token's K/V
                    (already written into the cache, e.g. by ``store_kvcache``)
      scale         softmax scale, 1/sqrt(head_dim) by default
      out           optional output tensor like q
      tile          key positions per loop iteration (power of two >= 16); None: ``DECODE_TILE`` (64), 32 for fp32
      check_indices check block ids and lengths (copies block_tables and seq_lens to the host)
    """
    out, launches = plan_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, out=out,
                                      tile=tile, num_warps=num_warps, num_stages=num_stages,
                                      check_indices=check_indices)
    run_all(launches)
    return out
