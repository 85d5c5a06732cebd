# %% tp_comm_s
def tp_comm_s(model, num_tokens, tp, link_bandwidth, latency_s):
    if tp == 1:
        return 0.0
    payload = num_tokens * model.hidden_size * 2
    steps = 2 * (tp - 1)
    per_step_bytes = payload / tp
    one_reduce = steps * per_step_bytes / link_bandwidth + steps * latency_s
    reduces_per_step = model.num_layers * 2
    return reduces_per_step * one_reduce
# %% kv_tokens_per_degree
def kv_tokens_per_degree(model, gpu, tp):
    heads_here = model.num_kv_heads // tp if model.num_kv_heads >= tp else 1
    bytes_per_token = 2 * model.num_layers * heads_here * model.head_dim * model.bytes_per_kv_element
    part = model.shard(tp)
    taken = part.weight_bytes + costmodel.activation_bytes(part)
    left = gpu.memory_bytes * costmodel.GPU_MEMORY_UTILIZATION - taken
    return int(left // bytes_per_token)
# %% all_to_all_bytes
def all_to_all_bytes(num_tokens, hidden_size, experts_per_token, ep, bytes_per_element):
    vector = hidden_size * bytes_per_element
    leaving = (ep - 1) / ep
    one_direction = num_tokens * experts_per_token * leaving * vector
    return one_direction * 2
# %% pad_to_graph
def pad_to_graph(num_tokens, capture_sizes):
    candidates = [s for s in capture_sizes if s >= num_tokens]
    if not candidates:
        return None
    return min(candidates)
