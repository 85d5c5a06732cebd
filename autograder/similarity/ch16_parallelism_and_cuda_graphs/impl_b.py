# %% tp_comm_s
def tp_comm_s(model, num_tokens, tp, link_bandwidth, latency_s):
    from servelab.analytic.specs import LinkSpec

    link = LinkSpec("given", link_bandwidth, "the exercise's link")
    activation = num_tokens * model.hidden_size * 2
    per_layer = serving.all_reduce_s(activation, tp, link, latency_s) * 2   # attention, then MLP
    return per_layer * model.num_layers
# %% kv_tokens_per_degree
def kv_tokens_per_degree(model, gpu, tp):
    # one GPU's slice: the serving model's capacity of that slice is what the whole group holds
    return costmodel.kv_capacity_tokens(model.shard(tp), gpu)
# %% all_to_all_bytes
def all_to_all_bytes(num_tokens, hidden_size, experts_per_token, ep, bytes_per_element):
    total = 0.0
    for phase in ("dispatch", "combine"):
        sent = num_tokens * experts_per_token * hidden_size * bytes_per_element
        total += sent - sent / ep            # the 1/ep share lands on this GPU's own experts
    return total
# %% pad_to_graph
def pad_to_graph(num_tokens, capture_sizes):
    import bisect

    ordered = sorted(set(capture_sizes))
    at = bisect.bisect_left(ordered, num_tokens)
    if at == len(ordered):
        return None
    return ordered[at]
