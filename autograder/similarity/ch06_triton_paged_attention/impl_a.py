# %% store_kv_kernel
@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    tok = tl.program_id(0)
    kvh = tl.program_id(1)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    lane = tl.arange(0, HEAD_DIM)
    write = (lane * 0 + slot) >= 0           # every lane off for a cached token
    safe = tl.where(slot >= 0, slot, 0)
    blk = safe // BLOCK_SIZE
    row = safe - blk * BLOCK_SIZE
    src = tok.to(tl.int64) * stride_token + kvh * stride_head + lane
    dst = blk * stride_block + row * stride_slot + kvh * stride_kv_head + lane
    k = tl.load(key_ptr + src, mask=write, other=0.0)
    v = tl.load(value_ptr + src, mask=write, other=0.0)
    tl.store(k_cache_ptr + dst, k, mask=write)
    tl.store(v_cache_ptr + dst, v, mask=write)
# %% decode_kernel
@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    # walk the sequence one physical KV block at a time; softmax in base 2
    sid = tl.program_id(0)
    grp = tl.program_id(1)
    n_keys = tl.load(seq_lens_ptr + sid)
    r = tl.arange(0, BLOCK_H)
    dim = tl.arange(0, HEAD_DIM)
    live = r < GROUP
    head_rows = (grp * GROUP + r).to(tl.int64)
    q_addr = q_ptr + sid * stride_q_seq + head_rows[:, None] * stride_q_head + dim[None, :]
    q = tl.load(q_addr, mask=live[:, None], other=0.0).to(tl.float32) * (scale * 1.4426950408889634)
    run_max = tl.zeros([BLOCK_H], dtype=tl.float32) - float("inf")
    run_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    o = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    rows = tl.arange(0, BLOCK_SIZE)
    n_blocks = (n_keys + BLOCK_SIZE - 1) // BLOCK_SIZE
    for j in range(n_blocks):
        phys = tl.load(block_tables_ptr + sid * stride_table + j).to(tl.int64)
        ok = j * BLOCK_SIZE + rows < n_keys
        base = k_cache_ptr + phys * stride_block + grp * stride_kv_head
        kt = tl.load(base + rows[:, None] * stride_slot + dim[None, :], mask=ok[:, None], other=0.0)
        base = v_cache_ptr + phys * stride_block + grp * stride_kv_head
        vt = tl.load(base + rows[:, None] * stride_slot + dim[None, :], mask=ok[:, None], other=0.0)
        sc = tl.sum(q[:, None, :] * kt.to(tl.float32)[None, :, :], axis=2)
        sc = tl.where(ok[None, :], sc, float("-inf"))
        top = tl.maximum(run_max, tl.max(sc, axis=1))
        shrink = tl.exp2(run_max - top)
        w = tl.exp2(sc - top[:, None])
        run_sum = run_sum * shrink + tl.sum(w, axis=1)
        o = o * shrink[:, None] + tl.sum(w[:, :, None] * vt.to(tl.float32)[None, :, :], axis=1)
        run_max = top
    res = o / run_sum[:, None]
    tl.store(out_ptr + sid * stride_q_seq + head_rows[:, None] * stride_q_head + dim[None, :],
             res.to(out_ptr.dtype.element_ty), mask=live[:, None])
# %% merge_kernel
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # everything as 2-D tiles [SPLITS_PAD, 1] x [1, HEAD_DIM]; the split axis is reduced at the end
    s, h = tl.program_id(0), tl.program_id(1)
    flat = s * tl.num_programs(1) + h                 # (sequence, head) pair number
    j = tl.arange(0, SPLITS_PAD)[:, None]
    d = tl.arange(0, HEAD_DIM)[None, :]
    row = flat * NUM_SPLITS + j
    real = j < NUM_SPLITS
    m2 = tl.load(part_max_ptr + row, mask=real, other=float("-inf"))
    l2 = tl.load(part_sum_ptr + row, mask=real, other=0.0)
    o2 = tl.load(part_out_ptr + row * HEAD_DIM + d, mask=real, other=0.0)
    w2 = l2 * tl.exp2((m2 - tl.max(m2, axis=0)[None, :]) * 1.4426950408889634)
    num = tl.sum(w2 * o2, axis=0)
    den = tl.sum(w2, axis=0)
    tl.store(out_ptr + s * stride_out_seq + h * stride_out_head + tl.arange(0, HEAD_DIM),
             (num / den).to(out_ptr.dtype.element_ty))
# %% decode_traffic
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    context = sum(seq_lens)
    elements = 2 * context * num_kv_heads * head_dim          # keys and values
    elements += 2 * len(seq_lens) * num_q_heads * head_dim    # query in, output out
    flops = 2 * 2 * head_dim * num_q_heads * context          # q.k and p.v, multiply-add = 2
    return elements * bytes_per_element, flops
