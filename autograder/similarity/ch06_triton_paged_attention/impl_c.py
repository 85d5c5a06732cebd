# %% store_kv_kernel
@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    token_idx = tl.program_id(0).to(tl.int64)
    head_idx = tl.program_id(1).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token_idx).to(tl.int64)
    if slot >= 0:
        block_idx = slot // BLOCK_SIZE
        in_block = slot % BLOCK_SIZE
        elem = tl.arange(0, HEAD_DIM)[None, :]          # a [1, HEAD_DIM] row
        from_k = key_ptr + token_idx * stride_token + head_idx * stride_head + elem
        from_v = value_ptr + token_idx * stride_token + head_idx * stride_head + elem
        cache_row = block_idx * stride_block + in_block * stride_slot + head_idx * stride_kv_head + elem
        k_row = tl.load(from_k)
        v_row = tl.load(from_v)
        tl.store(k_cache_ptr + cache_row, k_row)
        tl.store(v_cache_ptr + cache_row, v_row)
# %% decode_kernel
@triton.jit
def _tile_ptrs(block_tables_ptr, seq, pos, seq_len, kv_head, stride_table, stride_block, stride_slot,
               stride_kv_head, BLOCK_SIZE: tl.constexpr):
    """Element offsets (from a cache base) of the key rows at positions pos, and which ones exist."""
    exists = pos < seq_len
    page = tl.load(block_tables_ptr + seq * stride_table + pos // BLOCK_SIZE, mask=exists, other=0)
    return page.to(tl.int64) * stride_block + (pos % BLOCK_SIZE) * stride_slot + kv_head * stride_kv_head, exists


@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    # two passes over the keys: the exact row max first, then the exp-weighted sums
    pid_s = tl.program_id(0)
    pid_g = tl.program_id(1)
    L = tl.load(seq_lens_ptr + pid_s)
    hh = tl.arange(0, BLOCK_H)
    valid_h = hh < GROUP
    cc = tl.arange(0, HEAD_DIM)
    q_loc = pid_s * stride_q_seq + (pid_g * GROUP + hh)[:, None] * stride_q_head + cc[None, :]
    qv = tl.load(q_ptr + q_loc, mask=valid_h[:, None], other=0.0)

    row_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
    for t0 in range(0, L, TILE):
        off, in_seq = _tile_ptrs(block_tables_ptr, pid_s, t0 + tl.arange(0, TILE), L, pid_g, stride_table,
                                 stride_block, stride_slot, stride_kv_head, BLOCK_SIZE)
        grid = off[:, None] + cc[None, :]
        kk = tl.load(k_cache_ptr + grid, mask=in_seq[:, None], other=0.0)
        sc = tl.where(in_seq[None, :], tl.dot(qv, tl.trans(kk)) * scale, float("-inf"))
        row_max = tl.maximum(row_max, tl.max(sc, axis=1))

    total = tl.zeros([BLOCK_H], tl.float32)
    weighted = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    for t0 in range(0, L, TILE):
        off, in_seq = _tile_ptrs(block_tables_ptr, pid_s, t0 + tl.arange(0, TILE), L, pid_g, stride_table,
                                 stride_block, stride_slot, stride_kv_head, BLOCK_SIZE)
        grid = off[:, None] + cc[None, :]
        kk = tl.load(k_cache_ptr + grid, mask=in_seq[:, None], other=0.0)
        vv = tl.load(v_cache_ptr + grid, mask=in_seq[:, None], other=0.0)
        sc = tl.where(in_seq[None, :], tl.dot(qv, tl.trans(kk)) * scale, float("-inf"))
        e = tl.exp(sc - row_max[:, None])
        total += tl.sum(e, axis=1)
        weighted += tl.dot(e.to(vv.dtype), vv)
    tl.store(out_ptr + q_loc, (weighted / total[:, None]).to(out_ptr.dtype.element_ty), mask=valid_h[:, None])
# %% merge_kernel
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # pass 1: the global max over splits; pass 2: the weighted sum
    seq = tl.program_id(0)
    qh = tl.program_id(1)
    start = (seq * tl.num_programs(1) + qh) * NUM_SPLITS
    offs = tl.arange(0, HEAD_DIM)
    gmax = tl.load(part_max_ptr + start)
    for j in tl.static_range(1, NUM_SPLITS):
        gmax = tl.maximum(gmax, tl.load(part_max_ptr + start + j))
    num = tl.zeros([HEAD_DIM], tl.float32)
    den = 0.0
    for j in tl.static_range(NUM_SPLITS):
        wj = tl.load(part_sum_ptr + start + j) * tl.exp(tl.load(part_max_ptr + start + j) - gmax)
        num += wj * tl.load(part_out_ptr + (start + j) * HEAD_DIM + offs)
        den += wj
    dst = out_ptr + seq * stride_out_seq + qh * stride_out_head + offs
    tl.store(dst, (num / den).to(out_ptr.dtype.element_ty))
# %% decode_traffic
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    n_seqs, n_keys = len(seq_lens), sum(seq_lens)
    per_key_bytes = 2 * num_kv_heads * head_dim * bytes_per_element
    qk_flops = 2 * head_dim * num_q_heads * n_keys
    moved = n_keys * per_key_bytes + n_seqs * (2 * num_q_heads * head_dim * bytes_per_element)
    return moved, qk_flops + qk_flops          # p.v costs what q.k does
