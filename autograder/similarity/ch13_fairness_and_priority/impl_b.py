# %% interactive_tpot
def interactive_tpot(model, gpu, interactive_decodes, interactive_context, batch_decodes, batch_context):
    from itertools import chain, repeat
    everyone = list(chain(repeat(interactive_context, interactive_decodes), repeat(batch_context, batch_decodes)))
    return costmodel.step_time(model, gpu, decode_context_lens=everyone)
# %% batch_kv_quota
def batch_kv_quota(model, gpu, tpot_target_s, interactive_decodes, interactive_context, batch_context):
    """Both roofs of a decode step are straight lines in the number of batch sequences: solve each, then check."""
    def cost(n):
        lens = [interactive_context] * interactive_decodes + [batch_context] * n
        return costmodel.step_cost(model, gpu, decode_context_lens=lens) if lens else None

    def step(n):
        c = cost(n)
        return 0.0 if c is None else c.seconds()

    if step(0) > tpot_target_s:
        return 0
    cache_tokens = costmodel.kv_capacity_tokens(model, gpu)
    free_for_batch = max(0, cache_tokens - interactive_decodes * interactive_context)
    by_memory = free_for_batch // batch_context
    c1, c2 = cost(1), cost(2)
    spare = tpot_target_s - costmodel.DEFAULT_STEP_OVERHEAD_S
    guesses = [by_memory]
    for roof in ("compute_s", "memory_s"):
        at1, slope = getattr(c1, roof), getattr(c2, roof) - getattr(c1, roof)
        if slope > 0:
            guesses.append(max(0, int((spare - at1) / slope) + 1))
    n = min(guesses)
    while n > 0 and step(n) > tpot_target_s:
        n -= 1
    while n < by_memory and step(n + 1) <= tpot_target_s:
        n += 1
    return n * batch_context
# %% request_fair_shares
def request_fair_shares(requests, weights):
    names = list(requests)
    work = [requests[n][0] * weights.prefill_s + requests[n][1] * weights.decode_s for n in names]
    denom = float(sum(work))
    return dict(zip(names, (w / denom for w in work)))
# %% next_tenant
def next_tenant(counters, served, weights, backlogged, returning):
    vt = {**counters}
    for name in served:
        pre, dec = served[name]
        vt[name] = vt.get(name, 0.0) + weights.prefill_s * pre + weights.decode_s * dec
    stayers = sorted(vt.get(n, 0.0) for n in set(backlogged) - set(returning))
    if stayers:
        for name in returning:
            vt[name] = max(vt.get(name, 0.0), stayers[0])
    else:
        for name in returning:
            vt[name] = vt.get(name, 0.0)
    ranked = sorted(backlogged, key=lambda n: (vt.get(n, 0.0), n))
    return ranked[0], vt
