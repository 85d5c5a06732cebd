# %% kv_ceiling
def kv_ceiling(model, gpu, context_len, memory_fraction=0.92):
    """Fit as many full-context sequences as the KV pool allows."""
    pool = gpu.memory_bytes * memory_fraction
    for reserve in (model.weight_bytes, costmodel.activation_bytes(model)):
        pool -= reserve
    token_slots = int(pool / model.kv_bytes_per_token)
    if pool / model.kv_bytes_per_token < token_slots:
        token_slots -= 1
    return token_slots // context_len
# %% compute_ridge_batch
def compute_ridge_batch(model, gpu, context_len):
    def gap(n):
        st = costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * n)
        return st.compute_s - st.memory_s      # >= 0: compute-bound

    slope = gap(2) - gap(1)
    if slope <= 0:
        return math.inf
    n = 1
    # gap is linear in n: jump to where it crosses zero, then settle
    if gap(n) < 0:
        n = max(1, int(-gap(1) / slope) + 1)
    while n > 1 and gap(n - 1) >= 0:
        n -= 1
    while gap(n) < 0:
        n += 1
    return n
# %% resident_sequences
def resident_sequences(rate, output_len, a, b):
    lam_l = rate * output_len
    if lam_l * b >= 1:
        return math.inf
    # N = lam_l * a * (1 + x + x^2 + ...) with x = lam_l * b
    return lam_l * a * (1.0 / (1.0 - lam_l * b))
# %% fleet_size
def fleet_size(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget=8192):
    # price one request, then multiply by the day's requests
    daily_requests = input_tokens_per_day / prompt_len
    gen = output_tokens_per_day / daily_requests
    one_prefill = prompt_len * capacity.prefill_s_per_token(model, gpu, prompt_len, budget)
    one_decode = gen * capacity.decode_s_per_token(model, gpu, batch, round(prompt_len + gen / 2))
    hours = [daily_requests * one_prefill / 3600, daily_requests * one_decode / 3600]
    gpus = 0
    while gpus * 24 < sum(hours):
        gpus += 1
    return gpus, hours[0], hours[1]
# %% budget_knee
def budget_knee(model, gpu, num_decodes, context_len):
    lens = [context_len] * num_decodes

    def margin(k):
        c = costmodel.step_cost(model, gpu, prefill_tokens=k, decode_context_lens=lens)
        return c.compute_s - c.memory_s

    if num_decodes > 0 and margin(0) >= 0:
        return num_decodes
    k = 1
    stride = 1
    # gallop upward
    while margin(k) < 0:
        k += stride
        stride *= 2
    # walk back down by halving strides
    while stride > 0:
        if k - stride >= 1 and margin(k - stride) >= 0:
            k -= stride
        else:
            stride //= 2
    return num_decodes + k
