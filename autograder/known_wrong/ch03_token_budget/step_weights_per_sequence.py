"""The weights are read once per step, whatever the batch: here every sequence in the step reads them again."""

REPLACE = {
    "step_time": '''
def step_time(model, gpu, chunks=(), decodes=(), overhead_s=DEFAULT_STEP_OVERHEAD_S):
    tokens = sum(c for c, _ in chunks) + len(decodes)
    seqs = len(chunks) + len(decodes)
    pairs = sum(c * p + c * (c + 1) // 2 for c, p in chunks) + sum(L + 1 for L in decodes)
    flops = (2 * model.matmul_params * tokens + 2 * model.vocab_size * model.hidden_size * seqs
             + 4 * model.num_layers * model.num_heads * model.head_dim * pairs)
    # each sequence runs through the model, so each one streams the weights
    nbytes = seqs * model.weight_bytes + model.kv_bytes_per_token * (
        sum(p for _, p in chunks) + sum(decodes) + tokens)
    return max(flops / gpu.peak_flops, nbytes / gpu.hbm_bandwidth) + overhead_s
''',
}
FAILS = ["test_step_time"]
MESSAGE = "Pitfall: the weights are read once per step, whatever the batch"
