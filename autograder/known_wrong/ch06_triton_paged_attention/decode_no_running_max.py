"""Softmax without the running maximum: p = exp(score) overflows for large scores."""

REPLACE = {
    "decode_kernel": '''
@triton.jit
def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                  GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)

    rows = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + rows             # query head h reads KV head h // GROUP
    is_head = rows < GROUP                     # the rest is padding up to BLOCK_H
    d = tl.arange(0, HEAD_DIM)
    q_offsets = seq * stride_q_seq + heads[:, None] * stride_q_head + d[None, :]
    q = tl.load(q_ptr + q_offsets, mask=is_head[:, None], other=0.0)

    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    table_row = block_tables_ptr + seq * stride_table
    for start in range(0, seq_len, TILE):
        pos = start + tl.arange(0, TILE)
        valid = pos < seq_len
        block = tl.load(table_row + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
        kv_offsets = block * stride_block + (pos % BLOCK_SIZE) * stride_slot + kv_head * stride_kv_head
        k = tl.load(k_cache_ptr + kv_offsets[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offsets[:, None] + d[None, :], mask=valid[:, None], other=0.0)

        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(valid[None, :], s, float("-inf"))
        p = tl.exp(s)                          # wrong: no running maximum
        l = l + tl.sum(p, 1)
        acc = acc + tl.dot(p.to(v.dtype), v)
    out = acc / l[:, None]
    tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=is_head[:, None])
''',
}
FAILS = ["test_decode_kernel"]
MESSAGE = "Pitfall: softmax without the running maximum."
