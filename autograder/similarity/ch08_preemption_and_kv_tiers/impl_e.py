# %% recompute_time
def recompute_time(model, gpu, tokens, mfu=0.5):
    """Compute-bound prefill: time = FLOPs / sustained FLOP rate."""
    flop_count = costmodel.step_cost(model, gpu, prefill_tokens=tokens, prefill_context=0).flops
    sustained = gpu.peak_flops
    sustained *= mfu
    return flop_count / sustained
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, tokens=1024, mfu=0.5):
    import numpy as np
    per_layer = np.array([model.num_kv_heads * model.head_dim * model.bytes_per_kv_element] * 2)  # K, V
    token_bytes = float(per_layer.sum()) * model.num_layers
    redo = recompute_time(model, gpu, tokens, mfu)
    # per token: out and back in over the link vs. redo / tokens of compute
    return token_bytes * 2 / (redo / tokens)
# %% effective_copy_bandwidth
def effective_copy_bandwidth(copy_bytes, link_bandwidth, copy_latency_s=10e-6):
    wire = copy_bytes / link_bandwidth
    total = wire + copy_latency_s
    bw = copy_bytes / total
    return bw
# %% swap_time
def swap_time(model, tokens, block_size, link_bandwidth, copy_latency_s=10e-6):
    def copy_seconds(nbytes):
        return copy_latency_s + nbytes / link_bandwidth

    block_kv = model.kv_bytes_per_token * block_size          # K and V of every layer, one block
    per_tensor = block_kv / model.num_layers / 2
    n_blocks = -(-tokens // block_size)
    return sum(copy_seconds(per_tensor) for _ in range(n_blocks * model.num_layers * 2))
