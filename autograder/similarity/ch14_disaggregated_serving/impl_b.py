# %% tpot_stretch
def tpot_stretch(model, gpu, prefill_tokens, num_decodes, context_len):
    times = []
    for chunk in (prefill_tokens, 0):
        times.append(costmodel.step_time(model, gpu, prefill_tokens=chunk,
                                         decode_context_lens=np.full(num_decodes, context_len)))
    stretched, plain = times
    return stretched / plain
# %% exposed_transfer_s
def exposed_transfer_s(model, gpu, prompt_len, link_bandwidth, layerwise):
    kv = model.kv_bytes_per_token * prompt_len
    if not layerwise:
        return kv / link_bandwidth
    if not prompt_len:
        return 0.0
    L = model.num_layers
    compute = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0)
    # play the pipeline: layer i's KV may start once layer i is computed and the link is free
    link_free = 0.0
    for i in range(1, L + 1):
        ready = compute * i / L
        link_free = max(link_free, ready) + kv / L / link_bandwidth
    return link_free - compute
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, prompt_len, budget_s, layerwise):
    L = model.num_layers
    per_layer_compute = disaggregation.prefill_s(model, gpu, prompt_len, overhead_s=0.0) / L

    def late(bw):
        send = prompt_len * model.kv_bytes_per_token / bw
        if layerwise:
            return max(send / L, send - (L - 1) * per_layer_compute)
        return send

    slow, fast = 1.0, 2.0
    while late(fast) > budget_s:
        slow, fast = fast, fast * 2
    for _ in range(400):
        mid = 0.5 * (slow + fast)
        if mid <= slow or mid >= fast:
            break
        if late(mid) > budget_s:
            slow = mid
        else:
            fast = mid
    return fast
# %% pd_pools
def pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth):
    cache_tokens = costmodel.kv_capacity_tokens(model, gpu)

    def meets(pool, n):
        if pool == "P":
            return disaggregation.split_ttft(model, gpu, rate / n, prompt_len, link_bandwidth) <= ttft_target_s
        tpot, seqs = disaggregation.decode_tpot(model, gpu, rate / n, prompt_len, output_len)
        if seqs * (prompt_len + output_len) > cache_tokens:
            return False
        return tpot <= tpot_target_s

    answer = []
    for pool in ("P", "D"):
        if meets(pool, 1):
            answer.append(1)
            continue
        bad, good = 1, 2
        while not meets(pool, good):          # double until enough
            bad, good = good, 2 * good
        while good - bad > 1:                 # then halve the gap
            mid = (bad + good) // 2
            if meets(pool, mid):
                good = mid
            else:
                bad = mid
        answer.append(good)
    return tuple(answer)
