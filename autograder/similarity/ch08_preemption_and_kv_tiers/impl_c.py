# %% recompute_time
def recompute_time(model, gpu, tokens, mfu=0.5):
    work = costmodel.cost_from_totals(model, gpu, num_tokens=tokens, num_seqs=1,
                                      attention_pairs=tokens * (tokens + 1) // 2, kv_read_tokens=0).flops
    rate = mfu * gpu.peak_flops
    return work / rate
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, tokens=1024, mfu=0.5):
    """Swap costs 2 * kv / bw per token; recompute runs at some tokens/s. Equal when bw = 2 * kv * tokens/s."""
    flops_per_token = costmodel.step_cost(model, gpu, prefill_tokens=tokens).flops / tokens
    redo_rate = mfu * gpu.peak_flops / flops_per_token        # tokens recomputed per second
    return redo_rate * model.kv_bytes_per_token * 2
# %% effective_copy_bandwidth
def effective_copy_bandwidth(copy_bytes, link_bandwidth, copy_latency_s=10e-6):
    efficiency = 1.0 / (1.0 + copy_latency_s * link_bandwidth / copy_bytes)
    return link_bandwidth * efficiency
# %% swap_time
def swap_time(model, tokens, block_size, link_bandwidth, copy_latency_s=10e-6):
    full, partial = divmod(tokens, block_size)
    blocks = full + (1 if partial else 0)
    bytes_each = block_size * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    rate = effective_copy_bandwidth(bytes_each, link_bandwidth, copy_latency_s)
    n = blocks * 2 * model.num_layers
    return n * bytes_each / rate
