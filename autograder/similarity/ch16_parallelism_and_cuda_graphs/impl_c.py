# %% tp_comm_s
def tp_comm_s(model, num_tokens, tp, link_bandwidth, latency_s):
    total = 0.0
    nbytes = 2.0 * num_tokens * model.hidden_size
    for _layer in range(model.num_layers):
        for _block in ("attention", "mlp"):
            scatter = (tp - 1) * (nbytes / tp / link_bandwidth + latency_s)
            gather = (tp - 1) * (nbytes / tp / link_bandwidth + latency_s)
            total += scatter + gather
    return total
# %% kv_tokens_per_degree
def kv_tokens_per_degree(model, gpu, tp):
    copies = max(1, tp // model.num_kv_heads)          # a head lives on this many GPUs
    per_gpu_heads = model.num_kv_heads * copies // tp
    k_and_v = 2 * model.head_dim * model.bytes_per_kv_element
    token_cost = k_and_v * per_gpu_heads * model.num_layers
    sh = model.shard(tp)
    budget = gpu.memory_bytes * costmodel.GPU_MEMORY_UTILIZATION - (costmodel.activation_bytes(sh) + sh.weight_bytes)
    return int(budget // token_cost)
# %% all_to_all_bytes
def all_to_all_bytes(num_tokens, hidden_size, experts_per_token, ep, bytes_per_element):
    remote_share = 1 - 1 / ep
    routed = num_tokens * experts_per_token
    return 2 * routed * remote_share * hidden_size * bytes_per_element
# %% pad_to_graph
def pad_to_graph(num_tokens, capture_sizes):
    best = None
    for s in capture_sizes:
        if s >= num_tokens and (best is None or s < best):
            best = s
    return best
