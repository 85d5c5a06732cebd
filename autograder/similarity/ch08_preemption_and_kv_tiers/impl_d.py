# %% recompute_time
def recompute_time(model, gpu, tokens, mfu=0.5):
    # step_cost already divides the FLOPs by the peak; scale up for the utilisation we actually get
    return costmodel.step_cost(model, gpu, prefill_tokens=[tokens]).compute_s / mfu
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, tokens=1024, mfu=0.5):
    c = costmodel.step_cost(model, gpu, prefill_tokens=[tokens])
    secs_per_token = (c.matmul_flops + c.lm_head_flops + c.attention_flops) / (gpu.peak_flops * mfu) / tokens
    kv = model.num_layers * 2 * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    swap_bytes = kv + kv     # evict, then bring back
    return swap_bytes / secs_per_token
# %% effective_copy_bandwidth
def effective_copy_bandwidth(copy_bytes, link_bandwidth, copy_latency_s=10e-6):
    seconds = copy_latency_s
    seconds += copy_bytes / link_bandwidth
    return copy_bytes / seconds
# %% swap_time
def swap_time(model, tokens, block_size, link_bandwidth, copy_latency_s=10e-6):
    if tokens <= 0:
        return 0.0
    blocks = (tokens + block_size - 1) // block_size
    kv_per_layer_per_token = model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    latency = blocks * 2 * model.num_layers * copy_latency_s
    transfer = blocks * 2 * model.num_layers * block_size * kv_per_layer_per_token / link_bandwidth
    return latency + transfer
