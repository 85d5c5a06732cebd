"""K/V bytes counted per query head: num_q_heads instead of num_kv_heads in the cache's bytes."""

REPLACE = {
    "decode_traffic": '''
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    tokens = sum(seq_lens)
    kv_bytes = 2 * tokens * num_q_heads * head_dim * bytes_per_element           # wrong: query heads
    q_out_bytes = 2 * len(seq_lens) * num_q_heads * head_dim * bytes_per_element   # q in, out back
    flops = 4 * num_q_heads * head_dim * tokens                                    # q.k and p.v
    return kv_bytes + q_out_bytes, flops
''',
}
FAILS = ["test_decode_traffic"]
MESSAGE = "Pitfall: K/V bytes were counted per query head."
