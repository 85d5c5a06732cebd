# %% kv_ceiling
def kv_ceiling(model, gpu, context_len, memory_fraction=0.92):
    usable = memory_fraction * gpu.memory_bytes
    usable -= model.weight_bytes
    usable -= costmodel.activation_bytes(model)
    whole_tokens = math.floor(usable / model.kv_bytes_per_token)
    return whole_tokens // context_len
# %% compute_ridge_batch
def compute_ridge_batch(model, gpu, context_len):
    def cost(b):
        return costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * b)

    c1 = cost(1)
    c2 = cost(2)
    flop_s_per_seq = c2.compute_s - c1.compute_s
    byte_s_per_seq = c2.memory_s - c1.memory_s
    if flop_s_per_seq <= byte_s_per_seq:
        return math.inf
    fixed = c1.memory_s - byte_s_per_seq - (c1.compute_s - flop_s_per_seq)
    b = max(1, math.ceil(fixed / (flop_s_per_seq - byte_s_per_seq)))
    # guard against rounding right at the crossing
    while b > 1 and cost(b - 1).bound == "compute":
        b -= 1
    while cost(b).bound != "compute":
        b += 1
    return b
# %% resident_sequences
def resident_sequences(rate, output_len, a, b):
    arrivals_in_flight = rate * output_len
    denom = 1.0 - arrivals_in_flight * b
    if denom <= 0:
        return math.inf
    return arrivals_in_flight * a / denom
# %% fleet_size
def fleet_size(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget=8192):
    requests = input_tokens_per_day / prompt_len
    out_len = output_tokens_per_day / requests
    mean_ctx = round(prompt_len + out_len / 2)
    pre = capacity.prefill_s_per_token(model, gpu, prompt_len, budget) * input_tokens_per_day
    dec = capacity.decode_s_per_token(model, gpu, batch, mean_ctx) * output_tokens_per_day
    pre_h, dec_h = pre / 3600, dec / 3600
    return math.ceil((pre_h + dec_h) / 24), pre_h, dec_h
# %% budget_knee
def budget_knee(model, gpu, num_decodes, context_len):
    ctx = [context_len] * num_decodes

    def compute_bound(k):
        c = costmodel.step_cost(model, gpu, prefill_tokens=k, decode_context_lens=ctx)
        return c.compute_s >= c.memory_s

    if num_decodes > 0 and compute_bound(0):
        return num_decodes
    lo, hi = 0, 1 << 40          # lo memory-bound (or no step), hi compute-bound
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid
    return num_decodes + hi
