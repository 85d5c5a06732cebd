# %% interactive_tpot
def interactive_tpot(model, gpu, interactive_decodes, interactive_context, batch_decodes, batch_context):
    import numpy as np
    ctx = np.repeat([interactive_context, batch_context], [interactive_decodes, batch_decodes])
    return costmodel.step_time(model, gpu, decode_context_lens=ctx.tolist())
# %% batch_kv_quota
def batch_kv_quota(model, gpu, tpot_target_s, interactive_decodes, interactive_context, batch_context):
    import numpy as np
    # cache limit first: the batch class can never hold more than what is left beside the chats
    left = costmodel.kv_capacity_tokens(model, gpu) - interactive_decodes * interactive_context
    cap = max(0, left) // batch_context
    n = np.arange(cap + 1, dtype=np.int64)
    tokens = interactive_decodes + n
    pairs = interactive_decodes * (interactive_context + 1) + n * (batch_context + 1)
    reads = interactive_decodes * interactive_context + n * batch_context
    c = costmodel.cost_from_totals(model, gpu, num_tokens=tokens, num_seqs=tokens, attention_pairs=pairs,
                                   kv_read_tokens=reads)
    seconds = np.maximum(c.compute_s, c.memory_s) + costmodel.DEFAULT_STEP_OVERHEAD_S
    seconds = np.where(tokens == 0, 0.0, seconds)
    ok = np.nonzero(seconds <= tpot_target_s)[0]
    if ok.size == 0 or ok[0] != 0:
        return 0
    return int(ok.max()) * batch_context
# %% request_fair_shares
def request_fair_shares(requests, weights):
    """Round-robin by request: each tenant's share is its request's GPU-seconds over everyone's."""
    def seconds(pair):
        p, d = pair
        return weights.prefill_s * p + weights.decode_s * d

    total = sum(map(seconds, requests.values()))
    return {who: seconds(pair) / total for who, pair in requests.items()}
# %% next_tenant
def next_tenant(counters, served, weights, backlogged, returning):
    out = counters.copy()

    def charge(name, prompt, output):
        out[name] = out.get(name, 0.0) + prompt * weights.prefill_s + output * weights.decode_s

    for name, (prompt, output) in served.items():
        charge(name, prompt, output)
    steady = [out.get(n, 0.0) for n in backlogged if n not in returning]
    low = min(steady, default=None)
    for name in returning:
        mine = out.get(name, 0.0)
        out[name] = mine if low is None else max(mine, low)   # no banked credit for idle time
    choice = min(backlogged, key=lambda n: (out.get(n, 0.0), n))
    return choice, out
