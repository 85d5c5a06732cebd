"""Step time is the max of compute and memory time, not their sum: the two roofline times were added."""

REPLACE = {
    "step_time": '''
def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    tokens = sum(c for c, _ in chunks) + len(decodes)
    seqs = len(chunks) + len(decodes)
    pairs = sum(c * p + c * (c + 1) // 2 for c, p in chunks) + sum(L + 1 for L in decodes)
    flops = (2 * model.matmul_params * tokens + 2 * model.vocab_size * model.hidden_size * seqs
             + 4 * model.num_layers * model.num_heads * model.head_dim * pairs)
    nbytes = model.weight_bytes + model.kv_bytes_per_token * (sum(p for _, p in chunks) + sum(decodes) + tokens)
    # first the matmuls, then the memory traffic
    return flops / gpu.peak_flops + nbytes / gpu.hbm_bandwidth + overhead_s
''',
}
FAILS = ["test_step_time"]
MESSAGE = "Pitfall: step time is the max of compute and memory time, not their sum"
