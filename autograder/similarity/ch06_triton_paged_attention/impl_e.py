# %% store_kv_kernel
@triton.jit
def _copy_row(src_ptr, dst_ptr, HEAD_DIM: tl.constexpr):
    d = tl.arange(0, HEAD_DIM)
    tl.store(dst_ptr + d, tl.load(src_ptr + d))


@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    tid = tl.program_id(0)
    hid = tl.program_id(1)
    s = tl.load(slot_mapping_ptr + tid).to(tl.int64)
    if s > -1:
        src_off = tid * stride_token + hid * stride_head
        dst_off = (s // BLOCK_SIZE) * stride_block + (s - (s // BLOCK_SIZE) * BLOCK_SIZE) * stride_slot \
            + hid * stride_kv_head
        _copy_row(key_ptr + src_off, k_cache_ptr + dst_off, HEAD_DIM)
        _copy_row(value_ptr + src_off, v_cache_ptr + dst_off, HEAD_DIM)
# %% decode_kernel
@triton.jit
def _online_update(m, l, acc, scores, v):
    """Fold one tile of scores [H, T] and values [T, D] into the running (max, sum, acc)."""
    m2 = tl.maximum(m, tl.max(scores, 1))
    corr = tl.exp(m - m2)
    p = tl.exp(scores - m2[:, None])
    return m2, l * corr + tl.sum(p, 1), acc * corr[:, None] + tl.dot(p.to(v.dtype), v)


@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    NEG: tl.constexpr = -1.0e30          # a finite "minus infinity": exp(NEG - m) is 0, never NaN
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    n = tl.load(seq_lens_ptr + b)
    qh = tl.arange(0, BLOCK_H)
    d = tl.arange(0, HEAD_DIM)
    qmask = (qh < GROUP)[:, None]
    q_ptrs = q_ptr + b * stride_q_seq + (qh + kvh * GROUP)[:, None] * stride_q_head + d[None, :]
    q = tl.load(q_ptrs, mask=qmask, other=0.0)
    m = tl.full([BLOCK_H], NEG, tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    t = tl.arange(0, TILE)
    start = 0
    while start < n:
        key_pos = start + t
        ok = key_pos < n
        blk = tl.load(block_tables_ptr + b * stride_table + key_pos // BLOCK_SIZE, mask=ok, other=0)
        rows = blk.to(tl.int64) * stride_block + (key_pos % BLOCK_SIZE) * stride_slot
        k_ptrs = k_cache_ptr + kvh * stride_kv_head + rows[:, None] + d[None, :]
        v_ptrs = v_cache_ptr + kvh * stride_kv_head + rows[:, None] + d[None, :]
        keys = tl.load(k_ptrs, mask=ok[:, None], other=0.0)
        vals = tl.load(v_ptrs, mask=ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(keys)) * scale + tl.where(ok, 0.0, NEG)[None, :]
        m, l, acc = _online_update(m, l, acc, s, vals)
        start += TILE
    result = acc / l[:, None]
    tl.store(out_ptr + b * stride_q_seq + (qh + kvh * GROUP)[:, None] * stride_q_head + d[None, :],
             result.to(out_ptr.dtype.element_ty), mask=qmask)
# %% merge_kernel
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # log-sum-exp form: lse_j = m_j + log(l_j); out = sum_j exp(lse_j - LSE) * o_j
    dst = out_ptr + tl.program_id(axis=0) * stride_out_seq + tl.program_id(axis=1) * stride_out_head
    base = (tl.program_id(axis=0) * tl.num_programs(axis=1) + tl.program_id(axis=1)) * NUM_SPLITS
    j = tl.arange(0, SPLITS_PAD)
    mask = j < NUM_SPLITS
    m = tl.load(part_max_ptr + base + j, mask=mask)
    l = tl.where(mask, tl.load(part_sum_ptr + base + j, mask=mask), 0.0)
    has_mass = l > 0
    lse = tl.where(has_mass, m + tl.log(tl.where(has_mass, l, 1.0)), float("-inf"))
    top = tl.max(lse, 0)
    frac = tl.exp(lse - (top + tl.log(tl.sum(tl.exp(lse - top), 0))))
    d = tl.arange(0, HEAD_DIM)
    o = tl.load(part_out_ptr + (base + j)[:, None] * HEAD_DIM + d[None, :], mask=mask[:, None], other=0.0)
    tl.store(dst + d, tl.sum(frac[:, None] * o, 0).to(out_ptr.dtype.element_ty))
# %% decode_traffic
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    import numpy as np
    lens = np.asarray(list(seq_lens), dtype=np.int64)
    row = head_dim * bytes_per_element
    moved = int(lens.sum()) * 2 * num_kv_heads * row + lens.size * 2 * num_q_heads * row
    work = int((lens * (4 * head_dim * num_q_heads)).sum())
    return moved, work
