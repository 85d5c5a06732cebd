# %% interactive_tpot
def interactive_tpot(model, gpu, interactive_decodes, interactive_context, batch_decodes, batch_context):
    # every running sequence decodes one token this step, chats and documents alike
    lens = [interactive_context for _ in range(interactive_decodes)]
    lens.extend(batch_context for _ in range(batch_decodes))
    step = costmodel.step_cost(model, gpu, decode_context_lens=lens)
    return step.seconds()
# %% batch_kv_quota
def batch_kv_quota(model, gpu, tpot_target_s, interactive_decodes, interactive_context, batch_context):
    base = [interactive_context] * interactive_decodes

    def meets(extra):
        if not base and not extra:
            return True
        t = costmodel.step_time(model, gpu, decode_context_lens=base + [batch_context] * extra)
        return t <= tpot_target_s

    def largest(lo, hi):
        # meets(lo) holds, meets(hi) fails
        if hi - lo <= 1:
            return lo
        mid = (lo + hi) // 2
        return largest(mid, hi) if meets(mid) else largest(lo, mid)

    if not meets(0):
        return 0
    top = 1
    while meets(top):
        top <<= 1
    by_time = largest(top >> 1, top)
    kv_room = costmodel.kv_capacity_tokens(model, gpu) - len(base) * interactive_context
    by_memory = kv_room // batch_context if kv_room > 0 else 0
    return batch_context * min(by_time, by_memory)
# %% request_fair_shares
def request_fair_shares(requests, weights):
    import numpy as np
    keys = list(requests.keys())
    tok = np.array([requests[k] for k in keys], dtype=float).reshape(len(keys), 2)
    price = tok @ np.array([weights.prefill_s, weights.decode_s])
    frac = price / price.sum()
    return {k: float(f) for k, f in zip(keys, frac)}
# %% next_tenant
def next_tenant(counters, served, weights, backlogged, returning):
    charged = {}
    for t in counters:
        charged[t] = counters[t]
    for t, used in served.items():
        bill = used[0] * weights.prefill_s + used[1] * weights.decode_s
        charged[t] = charged.get(t, 0.0) + bill
    continuing = [t for t in backlogged if t not in returning]
    if continuing:
        lowest = min(charged.get(t, 0.0) for t in continuing)
        for t in returning:
            if charged.get(t, 0.0) < lowest:
                charged[t] = lowest
            else:
                charged[t] = charged.get(t, 0.0)
    else:
        for t in returning:
            charged.setdefault(t, 0.0)
    winner = sorted(backlogged)[0]
    for t in sorted(backlogged):
        if charged.get(t, 0.0) < charged.get(winner, 0.0):
            winner = t
    return winner, charged
