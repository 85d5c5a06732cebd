"""Attention of a prefill chunk over a cached prefix: variable-length queries through the block table.

Sequence s owns query rows ``cu_seqlens_q[s] : cu_seqlens_q[s+1]`` of the packed batch; its K/V, the chunk's own
included (write them first with ``store_kvcache``, as nano-vllm does), live in the paged cache, and query i of the
chunk sees the cached prefix and the chunk causally. A decode token is the case q_len = 1, a prompt's first chunk
the case ctx_len = 0. The layout, the program grid and the two-part causal loop: docs/kernels.md.

>>> import torch
>>> from servelab.kernels.prefill import prefill_attention
>>> k = torch.randn(4, 16, 1, 64); v = torch.randn(4, 16, 1, 64)
>>> q = torch.randn(5 + 1, 4, 64)                       # a 5-token chunk, then one decode token
>>> cu = torch.tensor([0, 5, 6], dtype=torch.int32)
>>> lens = torch.tensor([20, 9], dtype=torch.int32)     # chunk after 15 cached tokens; decode at position 8
>>> tables = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
>>> prefill_attention(q, k, v, tables, lens, cu).shape
torch.Size([6, 4, 64])
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from servelab.kernels.checks import (
    check_block_table_values,
    check_block_tables,
    check_dtype,
    check_kv_cache,
    check_ndim,
    check_out,
    check_power_of_two,
    check_queries,
    check_same_device,
    default_scale,
)
from servelab.kernels.launch import LOG2E, Launch, dtype_constexprs, padded, run_all
from servelab.kernels.tiles import attend_tiles

# Defaults for the GPU, chosen with ``compile_check --sweep`` at sm_90 (bf16, head_dim 128), not yet timed
# on one: FlashAttention-2-like 128 x 64 tiles on two warpgroups (wgmma), K/V double-buffered,
# 219 registers and no spills (with 4 warps the same tiles spill).
PREFILL_BLOCK_M = 128
PREFILL_TILE = 64
PREFILL_NUM_WARPS = 8
PREFILL_NUM_STAGES = 2
# fp32 is a checking dtype (exact IEEE dot products, on FMA units rather than tensor cores). With the 16-bit
# tiles it spills tens of KB per thread; these tiles spill about 1.7 KB: slow but correct.
PREFILL_BLOCK_M_FP32 = 64
PREFILL_TILE_FP32 = 32


@triton.jit
def prefill_attention_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                             cu_seqlens_q_ptr, num_seqs, scale_log2, stride_qt, stride_qh, stride_ot, stride_oh,
                             stride_bt, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                             GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr,
                             UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)

    # The last sequence s with first_block(s) <= q_block (first_block(0) = 0, so s exists).
    # (num_seqs may arrive as the constant 1; adding it to a tensor keeps hi a loop-carried int32)
    lo = tl.zeros([], dtype=tl.int32)
    hi = lo + num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        starts_before = tl.load(cu_seqlens_q_ptr + mid) // BLOCK_Q + mid <= q_block
        lo = tl.where(starts_before, mid, lo)
        hi = tl.where(starts_before, hi, mid - 1)
    seq = lo

    q_first = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_first
    q_start = (q_block - (q_first // BLOCK_Q + seq)) * BLOCK_Q  # this block's first token within the chunk
    if q_start >= q_len:
        return
    ctx_len = tl.load(seq_lens_ptr + seq) - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    d_mask = offs_d < HEAD_DIM
    token = q_start + offs_m // GROUP
    head = kv_head * GROUP + offs_m % GROUP
    # Rows past BLOCK_Q * GROUP (when GROUP does not divide BLOCK_M) and past the chunk's end are padding.
    row_mask = ((offs_m // GROUP < BLOCK_Q) & (token < q_len))[:, None] & d_mask[None, :]
    q_rows = (q_first + token).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    q_pos = ctx_len + token

    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    block_table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    shared_end = ctx_len + q_start  # keys [0, shared_end) are visible to every row of the block
    acc, m_i, l_i = attend_tiles(acc, m_i, l_i, q, q_pos, k_cache_ptr, v_cache_ptr, block_table_row, kv_head,
                                 0, shared_end, scale_log2, stride_kb, stride_ks, stride_kh,
                                 stride_vb, stride_vs, stride_vh, offs_d, d_mask,
                                 BLOCK_SIZE, TILE, False, UPCAST, DOT_PRECISION, NUM_STAGES)
    causal_end = ctx_len + tl.minimum(q_start + BLOCK_Q, q_len)  # one past the block's last query position
    acc, m_i, l_i = attend_tiles(acc, m_i, l_i, q, q_pos, k_cache_ptr, v_cache_ptr, block_table_row, kv_head,
                                 shared_end, causal_end, scale_log2, stride_kb, stride_ks, stride_kh,
                                 stride_vb, stride_vs, stride_vh, offs_d, d_mask,
                                 BLOCK_SIZE, TILE, True, UPCAST, DOT_PRECISION, NUM_STAGES)
    # Every row sees key shared_end (its own position or an earlier one), so l_i > 0; padding rows are
    # not stored, and the guard keeps them finite anyway.
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_rows = (q_first + token).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(out_ptr + o_rows[:, None] + offs_d[None, :], out.to(out_ptr.dtype.element_ty), mask=row_mask)


def plan_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, *, scale=None, out=None,
                           block_m=None, tile=None, num_warps=PREFILL_NUM_WARPS,
                           num_stages=PREFILL_NUM_STAGES, check_indices=True):
    """Check the arguments of ``prefill_attention`` and return ``(out, [Launch])`` without running anything."""
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    _, group = check_queries(q, k_cache, "[total_q_tokens, num_q_heads, head_dim]")
    check_ndim("cu_seqlens_q", cu_seqlens_q, 1, "[num_seqs + 1]")
    check_dtype("cu_seqlens_q", cu_seqlens_q, (torch.int32,))
    num_seqs = cu_seqlens_q.shape[0] - 1
    if num_seqs < 1:
        raise ValueError("cu_seqlens_q needs at least 2 entries (one sequence)")
    if cu_seqlens_q.stride(0) != 1:
        raise ValueError("cu_seqlens_q must be contiguous")
    check_block_tables(block_tables, seq_lens, num_seqs)
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens,
                      cu_seqlens_q=cu_seqlens_q)
    fp32 = q.dtype == torch.float32
    block_m = block_m or (PREFILL_BLOCK_M_FP32 if fp32 else PREFILL_BLOCK_M)
    tile = tile or (PREFILL_TILE_FP32 if fp32 else PREFILL_TILE)
    check_power_of_two("block_m", block_m, 16)
    check_power_of_two("tile", tile, 16)
    out = check_out(out, q)
    if check_indices:
        cu = cu_seqlens_q.detach().to("cpu", torch.int64)
        q_lens = cu[1:] - cu[:-1]
        if cu[0] != 0 or (q_lens < 0).any() or cu[-1] != q.shape[0]:
            raise ValueError(f"cu_seqlens_q must rise from 0 to total_q_tokens = {q.shape[0]}; got {cu.tolist()}")
        check_block_table_values(block_tables, seq_lens, num_blocks, block_size, min_lens=q_lens)

    block_m = max(block_m, padded(group))
    block_q = block_m // group
    launch = Launch(
        prefill_attention_kernel, (q.shape[0] // block_q + num_seqs, num_kv_heads),
        (out, q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, num_seqs,
         default_scale(head_dim, scale) * LOG2E, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
         block_tables.stride(0), *k_cache.stride()[:3], *v_cache.stride()[:3]),
        dict(GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, BLOCK_M=block_m, BLOCK_Q=block_q,
             D_PAD=padded(head_dim), TILE=tile, NUM_STAGES=num_stages,
             **dtype_constexprs(prefill_attention_kernel, q.dtype)),
        dict(num_warps=num_warps, num_stages=num_stages))
    return out, [launch]


def prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                      seq_lens: torch.Tensor, cu_seqlens_q: torch.Tensor, *, scale: float | None = None,
                      out: torch.Tensor | None = None, block_m: int | None = None, tile: int | None = None,
                      num_warps: int = PREFILL_NUM_WARPS, num_stages: int = PREFILL_NUM_STAGES,
                      check_indices: bool = True) -> torch.Tensor:
    """Causal attention of packed query chunks over their paged K/V; returns ``out`` shaped like ``q``.

    Arguments:
      q             [total_q_tokens, num_q_heads, head_dim], the chunks of all sequences back to back
      k_cache, v_cache  [num_blocks, block_size, num_kv_heads, head_dim], holding each chunk's K/V already
      block_tables  int32 [num_seqs, max_blocks]
      seq_lens      int32 [num_seqs]: cached prefix + chunk, each in [q_len, max_blocks * block_size]
      cu_seqlens_q  int32 [num_seqs + 1]: 0, then running totals of the chunk lengths (a length may be 0)
      block_m       rows per program (query tokens x group heads), power of two >= 16; None: 128 (64 fp32)
      tile          key positions per loop iteration, power of two >= 16; None: 64 (32 fp32)
      check_indices check cu_seqlens_q, block ids and lengths (copies them to the host)
    """
    out, launches = plan_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, scale=scale,
                                           out=out, block_m=block_m, tile=tile, num_warps=num_warps,
                                           num_stages=num_stages, check_indices=check_indices)
    run_all(launches)
    return out
