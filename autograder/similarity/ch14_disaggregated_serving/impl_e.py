# %% tpot_stretch
def tpot_stretch(model, gpu, prefill_tokens, num_decodes, context_len):
    lens = np.repeat(context_len, num_decodes)
    numerator = costmodel.step_time(model, gpu, prefill_tokens, lens)
    denominator = costmodel.step_time(model, gpu, 0, lens)
    return float(numerator / denominator)
# %% exposed_transfer_s
def exposed_transfer_s(model, gpu, prompt_len, link_bandwidth, layerwise):
    bw = float(link_bandwidth)
    kv_per_layer = model.kv_bytes_per_token * prompt_len / model.num_layers
    slice_s = kv_per_layer / bw
    if not layerwise or prompt_len < 1:
        return slice_s * model.num_layers
    roof = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0)
    gap = roof / model.num_layers
    backlog = (slice_s - gap) * (model.num_layers - 1)   # grows by (send - compute) per layer once the link lags
    return slice_s + max(0.0, backlog)
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, prompt_len, budget_s, layerwise):
    def exposed_at(bw):
        return exposed_transfer_s(model, gpu, prompt_len, bw, layerwise)

    lo = hi = model.kv_bytes_per_token * prompt_len / budget_s
    while exposed_at(lo) <= budget_s:
        lo /= 2.0
    while exposed_at(hi) > budget_s:
        hi *= 2.0
    # geometric bisection: the exposed transfer only falls as the link gets faster
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        if exposed_at(mid) <= budget_s:
            hi = mid
        else:
            lo = mid
    return hi
# %% pd_pools
def pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth):
    def ttft_for(gpus):
        return disaggregation.split_ttft(model, gpu, rate / gpus, prompt_len, link_bandwidth)

    def decode_for(gpus):
        return disaggregation.decode_tpot(model, gpu, rate / gpus, prompt_len, output_len)

    room = costmodel.kv_capacity_tokens(model, gpu)
    prefill_gpus = 1
    while ttft_for(prefill_gpus) > ttft_target_s:
        prefill_gpus += 1
    decode_gpus = 1
    while True:
        per_token, live = decode_for(decode_gpus)
        kv_needed = live * (prompt_len + output_len)
        if per_token <= tpot_target_s and kv_needed <= room:
            break
        decode_gpus += 1
    return prefill_gpus, decode_gpus
