"""The split-KV reduce ignored the partitions' sums: weights exp(m_j - M) instead of l_j * exp(m_j - M)."""

REPLACE = {
    "merge_kernel": '''
@triton.jit
def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                 NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    j = tl.arange(0, SPLITS_PAD)
    is_split = j < NUM_SPLITS
    rows = (seq * tl.num_programs(1) + head) * NUM_SPLITS + j
    m = tl.load(part_max_ptr + rows, mask=is_split, other=float("-inf"))
    l = tl.load(part_sum_ptr + rows, mask=is_split, other=0.0)
    d = tl.arange(0, HEAD_DIM)
    o = tl.load(part_out_ptr + rows[:, None] * HEAD_DIM + d[None, :], mask=is_split[:, None], other=0.0)
    w = tl.exp(m - tl.max(m, 0))               # wrong: l_j left out
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + d, out.to(out_ptr.dtype.element_ty))
''',
}
FAILS = ["test_merge_kernel"]
MESSAGE = "Pitfall: the split-KV reduce ignored the partitions' sums."
