# %% recompute_time
def _prefill_flops(model, n):
    """FLOPs of a fresh n-token prefill: matmuls for every token, one LM-head row, causal attention."""
    dense = 2.0 * model.matmul_params * n
    head = 2.0 * model.vocab_size * model.hidden_size
    pairs = n * (n + 1) // 2
    attn = 4.0 * model.num_layers * model.num_heads * model.head_dim * pairs
    return dense + head + attn


def recompute_time(model, gpu, tokens, mfu=0.5):
    return _prefill_flops(model, tokens) / gpu.peak_flops / mfu
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, tokens=1024, mfu=0.5):
    # bytes per element x elements per token (K and V in every layer), moved twice
    elems = 2 * model.num_layers * model.num_kv_heads * model.head_dim
    moved = 2 * elems * model.bytes_per_kv_element * tokens
    flops = costmodel.step_cost(model, gpu, prefill_tokens=tokens).flops
    return moved * mfu * gpu.peak_flops / flops
# %% effective_copy_bandwidth
def effective_copy_bandwidth(copy_bytes, link_bandwidth, copy_latency_s=10e-6):
    # harmonic combination of the latency-bound and the bandwidth-bound rates
    return 1.0 / (copy_latency_s / copy_bytes + 1.0 / link_bandwidth)
# %% swap_time
def swap_time(model, tokens, block_size, link_bandwidth, copy_latency_s=10e-6):
    total = 0.0
    copy_size = model.kv_bytes_per_token * block_size / (2 * model.num_layers)
    remaining = tokens
    while remaining > 0:          # one block at a time, the last one copied whole
        for _layer in range(model.num_layers):
            total += 2 * (copy_latency_s + copy_size / link_bandwidth)
        remaining -= block_size
    return total
