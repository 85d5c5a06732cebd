# %% tp_comm_s
def tp_comm_s(model, num_tokens, tp, link_bandwidth, latency_s):
    def ring(nbytes, gpus):
        hops = 2 * (gpus - 1)
        return hops * (nbytes / gpus / link_bandwidth) + hops * latency_s

    all_reduces = [ring(num_tokens * model.hidden_size * 2, tp) for _ in range(2 * model.num_layers)]
    return sum(all_reduces)
# %% kv_tokens_per_degree
def kv_tokens_per_degree(model, gpu, tp):
    heads = model.num_kv_heads // tp or 1          # a GPU never holds less than one whole head
    token = model.num_layers * heads * model.head_dim * 2 * model.bytes_per_kv_element
    mine = model.shard(tp)
    spare = gpu.memory_bytes * costmodel.GPU_MEMORY_UTILIZATION - (mine.weight_bytes + costmodel.activation_bytes(mine))
    return int(spare // token)
# %% all_to_all_bytes
def all_to_all_bytes(num_tokens, hidden_size, experts_per_token, ep, bytes_per_element):
    if ep == 1:
        return 0.0
    copies_out = num_tokens * experts_per_token * (ep - 1) / ep
    return copies_out * hidden_size * bytes_per_element + copies_out * hidden_size * bytes_per_element
# %% pad_to_graph
def pad_to_graph(num_tokens, capture_sizes):
    def first_fit(sizes):
        if not sizes:
            return None
        head, *rest = sizes
        return head if head >= num_tokens else first_fit(rest)

    return first_fit(sorted(capture_sizes))
