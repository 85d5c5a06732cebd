# %% tpot_stretch
def tpot_stretch(model, gpu, prefill_tokens, num_decodes, context_len):
    kw = {"decode_context_lens": [context_len] * num_decodes}
    return costmodel.step_time(model, gpu, prefill_tokens=prefill_tokens, **kw) / costmodel.step_time(model, gpu, **kw)
# %% exposed_transfer_s
def exposed_transfer_s(model, gpu, prompt_len, link_bandwidth, layerwise):
    if prompt_len == 0:
        return 0.0
    total_bytes = prompt_len * model.kv_bytes_per_token
    n = model.num_layers
    per_layer_send = total_bytes / n / link_bandwidth
    if not layerwise:
        return per_layer_send * n
    per_layer_work = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0) / n
    # the link only falls behind when one layer's KV takes longer to send than one layer takes to compute
    if per_layer_send <= per_layer_work:
        return per_layer_send
    return per_layer_send + (n - 1) * (per_layer_send - per_layer_work)
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, prompt_len, budget_s, layerwise):
    # sent whole, it is one "layer" with no compute to hide behind
    layers = model.num_layers if layerwise else 1
    pre = costmodel.step_time(model, gpu, prefill_tokens=prompt_len, overhead_s=0.0) if layerwise else 0.0
    head_start = pre * (layers - 1) / layers
    return model.kv_bytes_per_token * prompt_len / min(layers * budget_s, budget_s + head_start)
# %% pd_pools
def pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth):
    kv_room = costmodel.kv_capacity_tokens(model, gpu)
    per_seq = prompt_len + output_len

    def prefill_ok(count):
        return disaggregation.split_ttft(model, gpu, rate / count, prompt_len, link_bandwidth) <= ttft_target_s

    def decode_ok(count):
        t, resident = disaggregation.decode_tpot(model, gpu, rate / count, prompt_len, output_len)
        return t <= tpot_target_s and resident * per_seq <= kv_room

    def smallest(ok):
        count = 1
        while not ok(count):
            count += 1
        return count

    return smallest(prefill_ok), smallest(decode_ok)
