"""The inner loop every paged-attention kernel here shares: gather K/V tiles through a block table and fold
them into an online softmax.

Called from inside the kernels (``decode``, ``split_kv``, ``prefill``); nothing here launches anything.

The rows of the running state are query rows: for decode the query heads that share one KV head (GQA
packed into the M dimension of ``tl.dot``), for prefill those heads times a few query tokens. Each loop
iteration handles TILE consecutive key positions. A tile may span several cache blocks (block size 1, say),
so the block id is looked up per position: ``block_table_row[pos // BLOCK_SIZE]`` and slot ``pos % BLOCK_SIZE``.
Consecutive positions in one block hit the same cached table entry, so the lookup costs little bandwidth.

Scores are kept in log2 units (``q.k * scale * log2(e)``) so the softmax uses exp2, the GPU's native
exponential. State per row: running max ``m``, running sum ``l`` of ``exp2(s - m)``, and the unnormalised
output ``acc``; each tile rescales them by ``alpha = exp2(m_old - m_new)``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def attend_tiles(acc, m_i, l_i, q, q_pos, k_cache_ptr, v_cache_ptr, block_table_row, kv_head, start, end,
                 scale_log2, stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, offs_d, d_mask,
                 BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Fold key positions ``[start, end)`` of one sequence and one KV head into ``(acc, m_i, l_i)``.

    q: [ROWS, D_PAD] (padded rows and columns are 0); q_pos: [ROWS] query positions, used when CAUSAL
    (a row sees keys at positions <= its own). Positions >= end are never loaded, so the cache slots
    past a sequence's length, and the block-table entries past its last block, are never read.
    Returns the updated ``(acc [ROWS, D_PAD] fp32, m_i [ROWS], l_i [ROWS])``.
    """
    offs_t = tl.arange(0, TILE)
    for tile_start in tl.range(start, end, TILE, num_stages=NUM_STAGES):
        pos = tile_start + offs_t
        in_range = pos < end
        # int64 before the stride multiply: block_id * stride overflows int32 in caches over 2**31 elements
        block_id = tl.load(block_table_row + pos // BLOCK_SIZE, mask=in_range, other=0).to(tl.int64)
        slot = pos % BLOCK_SIZE
        kv_mask = in_range[:, None] & d_mask[None, :]

        k_rows = block_id * stride_kb + slot * stride_ks + kv_head * stride_kh
        k = tl.load(k_cache_ptr + k_rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [ROWS, TILE]
        if CAUSAL:
            s = tl.where(in_range[None, :] & (pos[None, :] <= q_pos[:, None]), s, float("-inf"))
        else:
            s = tl.where(in_range[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row with no visible key yet keeps m = -inf; subtracting 0 instead keeps exp2 from giving NaN.
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_sub)
        p = tl.exp2(s - m_sub[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)

        v_rows = block_id * stride_vb + slot * stride_vs + kv_head * stride_vh
        v = tl.load(v_cache_ptr + v_rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        # P is rounded to V's dtype so the second product also runs on tensor cores (as FlashAttention does)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i
