# %% store_kv_kernel
@triton.jit
def _gated_move(src, dst, gate):
    tl.store(dst, tl.load(src, mask=gate), mask=gate)


@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    i = tl.program_id(0)
    kv_head = tl.program_id(1)
    dest = tl.load(slot_mapping_ptr + i).to(tl.int64)
    offs = tl.arange(0, HEAD_DIM)
    keep = tl.broadcast_to(dest >= 0, [HEAD_DIM])
    in_at = i * stride_token + kv_head * stride_head + offs
    page, row = dest // BLOCK_SIZE, dest % BLOCK_SIZE
    out_at = page * stride_block + row * stride_slot + kv_head * stride_kv_head + offs
    _gated_move(key_ptr + in_at, k_cache_ptr + out_at, keep)
    _gated_move(value_ptr + in_at, v_cache_ptr + out_at, keep)
# %% decode_kernel
@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    # one query head at a time (GROUP of them share this KV head): vectors, no matrix tiles
    s = tl.program_id(0)
    g = tl.program_id(1)
    ctx = tl.load(seq_lens_ptr + s)
    feat = tl.arange(0, HEAD_DIM)
    table = block_tables_ptr + s * stride_table
    for member in tl.static_range(GROUP):
        head = g * GROUP + member
        qvec = tl.load(q_ptr + s * stride_q_seq + head * stride_q_head + feat).to(tl.float32)
        mx = float("-inf")
        norm = 0.0
        acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
        for first in range(0, ctx, TILE):
            kp = first + tl.arange(0, TILE)
            m = kp < ctx
            lblk = kp // BLOCK_SIZE
            inrow = kp - lblk * BLOCK_SIZE
            bid = tl.load(table + lblk, mask=m, other=0)
            toff = g * stride_kv_head + feat[None, :] + inrow[:, None] * stride_slot \
                + bid.to(tl.int64)[:, None] * stride_block
            m2 = m[:, None] & (feat[None, :] < HEAD_DIM)
            keys = tl.load(k_cache_ptr + toff, mask=m2, other=0.0)
            vals = tl.load(v_cache_ptr + toff, mask=m2, other=0.0)
            logit = tl.sum(keys.to(tl.float32) * qvec[None, :], axis=1) * scale
            logit = tl.where(m, logit, float("-inf"))
            mx_new = tl.maximum(mx, tl.max(logit, axis=0))
            rescale = tl.exp(mx - mx_new)
            ex = tl.exp(logit - mx_new)
            norm = norm * rescale + tl.sum(ex, axis=0)
            acc = acc * rescale + tl.sum(ex[:, None] * vals.to(tl.float32), axis=0)
            mx = mx_new
        tl.store(out_ptr + s * stride_q_seq + head * stride_q_head + feat,
                 (acc / norm).to(out_ptr.dtype.element_ty))
# %% merge_kernel
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # partial outputs loaded transposed, [HEAD_DIM, SPLITS_PAD], and reduced along the split axis
    sq = tl.program_id(0)
    hd = tl.program_id(1)
    lane = tl.arange(0, SPLITS_PAD)
    on = lane < NUM_SPLITS
    first_row = (sq * tl.num_programs(1) + hd) * NUM_SPLITS
    mvec = tl.load(part_max_ptr + first_row + lane, mask=on, other=-1.0e30)
    lvec = tl.load(part_sum_ptr + first_row + lane, mask=on, other=0.0)
    wvec = lvec * tl.exp(mvec - tl.max(mvec, axis=0))
    col = tl.arange(0, HEAD_DIM)
    o_t = tl.load(part_out_ptr + col[:, None] + (first_row + lane)[None, :] * HEAD_DIM, mask=on[None, :], other=0.0)
    merged = tl.sum(o_t * wvec[None, :], axis=1) / tl.sum(wvec, axis=0)
    tl.store(out_ptr + sq * stride_out_seq + hd * stride_out_head + col, merged.to(out_ptr.dtype.element_ty))
# %% decode_traffic
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    byte_total = 0
    flop_total = 0
    for length in seq_lens:
        byte_total += length * num_kv_heads * head_dim * bytes_per_element * 2   # this sequence's K and V
        byte_total += num_q_heads * head_dim * bytes_per_element * 2             # its query and its output
        flop_total += length * num_q_heads * head_dim * 4
    return byte_total, flop_total
