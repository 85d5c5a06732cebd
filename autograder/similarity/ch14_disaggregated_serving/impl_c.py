# %% tpot_stretch
def tpot_stretch(model, gpu, prefill_tokens, num_decodes, context_len):
    if prefill_tokens == 0:
        return 1.0

    def step(extra):
        return costmodel.step_time(model, gpu, prefill_tokens=extra, decode_context_lens=(context_len,) * num_decodes)

    return step(prefill_tokens) / step(0)
# %% exposed_transfer_s
def exposed_transfer_s(model, gpu, prompt_len, link_bandwidth, layerwise):
    seconds_on_link = prompt_len * model.kv_bytes_per_token / link_bandwidth
    if prompt_len <= 0 or not layerwise:
        return seconds_on_link
    layers = model.num_layers
    prefill = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0)
    # while layers 2..L compute, the link can already be busy; it cannot send the last layer before the end
    hidden = min(seconds_on_link - seconds_on_link / layers, prefill * (layers - 1) / layers)
    return seconds_on_link - hidden
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, prompt_len, budget_s, layerwise):
    window = budget_s
    if layerwise:
        layers = model.num_layers
        prefill = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0)
        if budget_s * layers <= prefill:
            # the budget is within one layer's compute: the link keeps up, only the last layer's share shows
            window *= layers
        else:
            window += prefill * (layers - 1) / layers
    return prompt_len * model.kv_bytes_per_token / window
# %% pd_pools
def pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth):
    import itertools

    n_prefill = next(k for k in itertools.count(1)
                     if disaggregation.split_ttft(model, gpu, rate / k, prompt_len, link_bandwidth) <= ttft_target_s)
    tokens_each = prompt_len + output_len
    limit = costmodel.kv_capacity_tokens(model, gpu)
    for n_decode in itertools.count(1):
        mean_tpot, n_running = disaggregation.decode_tpot(model, gpu, rate / n_decode, prompt_len, output_len)
        if mean_tpot > tpot_target_s:
            continue
        if n_running * tokens_each > limit:
            continue
        return n_prefill, n_decode
