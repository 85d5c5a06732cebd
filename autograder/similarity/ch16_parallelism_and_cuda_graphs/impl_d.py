# %% tp_comm_s
def tp_comm_s(model, num_tokens, tp, link_bandwidth, latency_s):
    p = np.float64(tp)
    moved = 2.0 * (p - 1.0) / p * (num_tokens * model.hidden_size * 2) / link_bandwidth
    waited = 2.0 * (p - 1.0) * latency_s
    return float(np.sum(np.full(2 * model.num_layers, moved + waited)))
# %% kv_tokens_per_degree
def kv_tokens_per_degree(model, gpu, tp):
    local = model.shard(tp)
    assert local.num_kv_heads == max(1, model.num_kv_heads // tp)
    free = gpu.memory_bytes * costmodel.GPU_MEMORY_UTILIZATION - (local.weight_bytes + costmodel.activation_bytes(local))
    return int(np.floor_divide(free, local.kv_bytes_per_token))
# %% all_to_all_bytes
def all_to_all_bytes(num_tokens, hidden_size, experts_per_token, ep, bytes_per_element):
    owners = np.arange(ep)
    off_gpu = np.count_nonzero(owners != 0) / ep      # experts spread evenly: the GPUs other than this one
    return float(2 * num_tokens * experts_per_token * off_gpu * hidden_size * bytes_per_element)
# %% pad_to_graph
def pad_to_graph(num_tokens, capture_sizes):
    arr = np.sort(np.asarray(capture_sizes))
    i = int(np.searchsorted(arr, num_tokens, side="left"))
    return int(arr[i]) if i < arr.size else None
