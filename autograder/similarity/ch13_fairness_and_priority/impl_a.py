# %% interactive_tpot
def interactive_tpot(model, gpu, interactive_decodes, interactive_context, batch_decodes, batch_context):
    contexts = []
    for _ in range(interactive_decodes):
        contexts.append(interactive_context)
    for _ in range(batch_decodes):
        contexts.append(batch_context)
    return costmodel.step_time(model, gpu, decode_context_lens=contexts)
# %% batch_kv_quota
def batch_kv_quota(model, gpu, tpot_target_s, interactive_decodes, interactive_context, batch_context):
    chat_kv = interactive_decodes * interactive_context
    room = costmodel.kv_capacity_tokens(model, gpu) - chat_kv
    most = room // batch_context if room > 0 else 0

    def ok(n):
        if interactive_decodes == 0 and n == 0:
            return True
        lens = [interactive_context] * interactive_decodes + [batch_context] * n
        return costmodel.step_time(model, gpu, decode_context_lens=lens) <= tpot_target_s

    if not ok(0):
        return 0
    # largest n in [0, most] that meets the target (step time grows with n)
    good, bad = 0, most + 1
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good * batch_context
# %% request_fair_shares
def request_fair_shares(requests, weights):
    costs = {}
    for tenant, (prompt, output) in requests.items():
        costs[tenant] = prompt * weights.prefill_s + output * weights.decode_s
    grand = sum(costs.values())
    return {tenant: c / grand for tenant, c in costs.items()}
# %% next_tenant
def next_tenant(counters, served, weights, backlogged, returning):
    def bill(usage):
        prompt, output = usage
        return prompt * weights.prefill_s + output * weights.decode_s

    updated = {**counters, **{t: counters.get(t, 0.0) + bill(u) for t, u in served.items()}}
    reference = None
    for tenant in backlogged:
        if tenant in returning:
            continue
        value = updated.get(tenant, 0.0)
        if reference is None or value < reference:
            reference = value
    updated.update({t: updated.get(t, 0.0) if reference is None else max(reference, updated.get(t, 0.0))
                    for t in returning})
    best = None
    for tenant in sorted(backlogged):
        if best is None or updated.get(tenant, 0.0) < updated.get(best, 0.0):
            best = tenant
    return best, updated
