"""FLOPs of one product only: 2 x num_q_heads x head_dim per key instead of 4 (q.k and p.v)."""

REPLACE = {
    "decode_traffic": '''
def decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element):
    tokens = sum(seq_lens)
    kv_bytes = 2 * tokens * num_kv_heads * head_dim * bytes_per_element          # K and V
    q_out_bytes = 2 * len(seq_lens) * num_q_heads * head_dim * bytes_per_element   # q in, out back
    flops = 2 * num_q_heads * head_dim * tokens                                    # wrong: q.k only
    return kv_bytes + q_out_bytes, flops
''',
}
FAILS = ["test_decode_traffic"]
MESSAGE = "Pitfall: the FLOPs count two products."
