# %% recompute_time
def recompute_time(model, gpu, tokens, mfu=0.5):
    cost = costmodel.step_cost(model, gpu, prefill_tokens=tokens)
    achieved = gpu.peak_flops * mfu
    return cost.flops / achieved
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, tokens=1024, mfu=0.5):
    # at break-even, moving one token's KV out and back takes as long as recomputing that token
    redo_each = recompute_time(model, gpu, tokens, mfu) / tokens
    out_bytes = in_bytes = model.kv_bytes_per_token
    return (out_bytes + in_bytes) / redo_each
# %% effective_copy_bandwidth
def effective_copy_bandwidth(copy_bytes, link_bandwidth, copy_latency_s=10e-6):
    transfer_s = copy_bytes / link_bandwidth
    return copy_bytes / (transfer_s + copy_latency_s)
# %% swap_time
def swap_time(model, tokens, block_size, link_bandwidth, copy_latency_s=10e-6):
    copies = math.ceil(tokens / block_size) * model.num_layers * 2
    moved = copies * block_size * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
    return copies * copy_latency_s + moved / link_bandwidth
