# %% interactive_tpot
def interactive_tpot(model, gpu, interactive_decodes, interactive_context, batch_decodes, batch_context):
    groups = ((interactive_context, interactive_decodes), (batch_context, batch_decodes))
    kv_lengths = [length for length, count in groups for _ in range(count)]
    tpot = costmodel.step_time(model, gpu, decode_context_lens=kv_lengths)
    return tpot
# %% batch_kv_quota
def batch_kv_quota(model, gpu, tpot_target_s, interactive_decodes, interactive_context, batch_context):
    capacity_tokens = costmodel.kv_capacity_tokens(model, gpu)
    beside_chats = capacity_tokens - interactive_context * interactive_decodes
    limit = max(0, beside_chats) // batch_context
    chats = [interactive_context] * interactive_decodes

    def too_slow(docs):
        contexts = chats + [batch_context] * docs
        if not contexts:
            return False
        return costmodel.step_time(model, gpu, decode_context_lens=contexts) > tpot_target_s

    if too_slow(0):
        return 0
    if not too_slow(limit):
        return limit * batch_context
    # gallop down from the memory limit, then close in on the last fitting count
    slow, back = limit, 1
    fast = max(0, limit - back)
    while too_slow(fast):
        slow = fast
        back *= 2
        fast = max(0, limit - back)
    while slow - fast > 1:
        probe = (slow + fast) // 2
        if too_slow(probe):
            slow = probe
        else:
            fast = probe
    return fast * batch_context
# %% request_fair_shares
def request_fair_shares(requests, weights):
    share = {}
    running = 0.0
    for who in requests:
        n_in, n_out = requests[who]
        share[who] = n_in * weights.prefill_s + n_out * weights.decode_s
        running += share[who]
    for who in share:
        share[who] /= running
    return share
# %% next_tenant
def next_tenant(counters, served, weights, backlogged, returning):
    import heapq
    state = dict(counters)
    for tenant in served:
        p, d = served[tenant]
        state[tenant] = state.get(tenant, 0.0) + (p * weights.prefill_s + d * weights.decode_s)
    heap = [(state.get(t, 0.0), t) for t in backlogged if t not in returning]
    heapq.heapify(heap)
    for tenant in returning:
        own = state.get(tenant, 0.0)
        state[tenant] = max(own, heap[0][0]) if heap else own
    queue = [(state.get(t, 0.0), t) for t in backlogged]
    heapq.heapify(queue)
    return heapq.heappop(queue)[1], state
