# %% store_kv_kernel
@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    t = tl.program_id(axis=0)
    h = tl.program_id(axis=1)
    target = tl.load(slot_mapping_ptr + t)
    if target != -1:
        wide = target.to(tl.int64)
        cols = tl.arange(0, HEAD_DIM)
        k_src = key_ptr + t * stride_token + h * stride_head
        v_src = value_ptr + t * stride_token + h * stride_head
        cache_off = (wide // BLOCK_SIZE) * stride_block + (wide % BLOCK_SIZE) * stride_slot \
            + h * stride_kv_head
        tl.store(k_cache_ptr + cache_off + cols, tl.load(k_src + cols))
        tl.store(v_cache_ptr + cache_off + cols, tl.load(v_src + cols))
# %% decode_kernel
@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    # scores kept key-major, [TILE, BLOCK_H]: K @ Q^T, reductions along axis 0
    seq = tl.program_id(0)
    kvh = tl.program_id(1)
    length = tl.load(seq_lens_ptr + seq)
    hrow = tl.arange(0, BLOCK_H)
    head_ok = hrow < GROUP
    dd = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + seq * stride_q_seq + kvh * GROUP * stride_q_head
    q_t = tl.load(q_base + dd[:, None] + hrow[None, :] * stride_q_head, mask=head_ok[None, :], other=0.0)
    best = tl.full([BLOCK_H], float("-inf"), tl.float32)
    denom = tl.zeros([BLOCK_H], tl.float32)
    numer = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    n_tiles = tl.cdiv(length, TILE)
    for it in range(n_tiles):
        kpos = it * TILE + tl.arange(0, TILE)
        inside = kpos < length
        phys = tl.load(block_tables_ptr + seq * stride_table + kpos // BLOCK_SIZE, mask=inside, other=0)
        base = phys.to(tl.int64) * stride_block + (kpos % BLOCK_SIZE) * stride_slot + kvh * stride_kv_head
        k_n = tl.load(k_cache_ptr + base[:, None] + dd[None, :], mask=inside[:, None], other=0.0)
        v_n = tl.load(v_cache_ptr + base[:, None] + dd[None, :], mask=inside[:, None], other=0.0)
        logits_t = tl.where(inside[:, None], scale * tl.dot(k_n, q_t), float("-inf"))
        new_best = tl.maximum(best, tl.max(logits_t, axis=0))
        factor = tl.exp(best - new_best)
        probs_t = tl.exp(logits_t - new_best[None, :])
        denom = factor * denom + tl.sum(probs_t, axis=0)
        numer = factor[:, None] * numer + tl.dot(tl.trans(probs_t).to(v_n.dtype), v_n)
        best = new_best
    o_ptrs = out_ptr + seq * stride_q_seq + (kvh * GROUP + hrow)[:, None] * stride_q_head + dd[None, :]
    tl.store(o_ptrs, (numer / denom[:, None]).to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
# %% merge_kernel
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # fold the splits in one at a time (split 0 is never empty, so it seeds the running max)
    seq = tl.program_id(0)
    head = tl.program_id(1)
    row0 = (seq * tl.num_programs(1) + head) * NUM_SPLITS
    d = tl.arange(0, HEAD_DIM)
    big = tl.load(part_max_ptr + row0)
    total = tl.load(part_sum_ptr + row0)
    acc = tl.load(part_out_ptr + row0 * HEAD_DIM + d) * total
    for j in tl.static_range(1, NUM_SPLITS):
        mj = tl.load(part_max_ptr + row0 + j)
        lj = tl.load(part_sum_ptr + row0 + j)
        oj = tl.load(part_out_ptr + (row0 + j) * HEAD_DIM + d)
        nb = tl.maximum(big, mj)
        keep = tl.exp(big - nb)
        add = lj * tl.exp(mj - nb)
        acc = acc * keep + oj * add
        total = total * keep + add
        big = nb
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + d, (acc / total).to(out_ptr.dtype.element_ty))
# %% decode_traffic
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    kv_elems = sum(2 * n * num_kv_heads * head_dim for n in seq_lens)
    io_elems = sum(2 * num_q_heads * head_dim for _ in seq_lens)
    fl = sum(n * num_q_heads * (2 * head_dim + 2 * head_dim) for n in seq_lens)
    return (kv_elems + io_elems) * bytes_per_element, fl
