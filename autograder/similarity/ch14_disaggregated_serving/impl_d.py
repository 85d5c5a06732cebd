# %% tpot_stretch
def tpot_stretch(model, gpu, prefill_tokens, num_decodes, context_len):
    ctx = [context_len] * num_decodes
    both = costmodel.step_cost(model, gpu, prefill_tokens=prefill_tokens, decode_context_lens=ctx)
    only = costmodel.step_cost(model, gpu, decode_context_lens=ctx)
    over = costmodel.DEFAULT_STEP_OVERHEAD_S
    return (max(both.compute_s, both.memory_s) + over) / (max(only.compute_s, only.memory_s) + over)
# %% exposed_transfer_s
def exposed_transfer_s(model, gpu, prompt_len, link_bandwidth, layerwise):
    if prompt_len == 0:
        return 0.0
    transfer = disaggregation.kv_transfer_bytes(model, prompt_len) / link_bandwidth
    if layerwise is False:
        return transfer
    nl = model.num_layers
    t_compute = disaggregation.prefill_s(model, gpu, prompt_len, overhead_s=0.0)
    # the link finishes either right after the last layer is computed, or, if it is the bottleneck,
    # one whole transfer after the first layer is computed
    finish = max(t_compute + transfer / nl, t_compute / nl + transfer)
    return finish - t_compute
# %% break_even_bandwidth
def break_even_bandwidth(model, gpu, prompt_len, budget_s, layerwise):
    volume = disaggregation.kv_transfer_bytes(model, prompt_len)
    if not layerwise:
        return volume / budget_s
    nl = model.num_layers
    tc = disaggregation.prefill_s(model, gpu, prompt_len, overhead_s=0.0) / nl
    # the last k layers leave after layer L-k+1 is computed and must be sent within (k - 1) layers + the budget
    need = 0.0
    for k in range(1, nl + 1):
        need = max(need, volume * k / nl / (budget_s + (k - 1) * tc))
    return need
# %% pd_pools
def pd_pools(model, gpu, rate, prompt_len, output_len, ttft_target_s, tpot_target_s, link_bandwidth):
    service = disaggregation.prefill_s(model, gpu, prompt_len)
    np_ = max(1, int(rate * service))              # fewer than this would run at utilization >= 1
    while True:
        if disaggregation.split_ttft(model, gpu, rate / np_, prompt_len, link_bandwidth) <= ttft_target_s:
            break
        np_ += 1
    capacity_tokens = costmodel.kv_capacity_tokens(model, gpu)
    nd = 0
    fits = False
    while not fits:
        nd += 1
        step_s, occupancy = disaggregation.decode_tpot(model, gpu, rate / nd, prompt_len, output_len)
        fits = step_s <= tpot_target_s and occupancy * (prompt_len + output_len) <= capacity_tokens
    return (np_, nd)
