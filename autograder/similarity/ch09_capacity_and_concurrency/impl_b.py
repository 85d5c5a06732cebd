# %% kv_ceiling
def kv_ceiling(model, gpu, context_len, memory_fraction=0.92):
    budget = gpu.memory_bytes * memory_fraction
    overhead = model.weight_bytes + costmodel.activation_bytes(model)
    per_seq = model.kv_bytes_per_token * context_len
    n_tokens = (budget - overhead) // model.kv_bytes_per_token
    return int(n_tokens) // context_len if per_seq > 0 else 0
# %% compute_ridge_batch
def compute_ridge_batch(model, gpu, context_len):
    """Search on the roofline: double the batch until compute-bound, then bisect."""
    def is_compute(batch):
        s = costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * batch)
        return s.compute_s >= s.memory_s

    # does one extra sequence cost more compute time than memory time?
    big = costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * 2)
    small = costmodel.step_cost(model, gpu, decode_context_lens=[context_len])
    if big.compute_s - small.compute_s <= big.memory_s - small.memory_s:
        return math.inf
    if is_compute(1):
        return 1
    good = 2
    while not is_compute(good):
        good *= 2
    bad = good // 2
    while good - bad > 1:
        half = (good + bad) // 2
        if is_compute(half):
            good = half
        else:
            bad = half
    return good
# %% resident_sequences
def resident_sequences(rate, output_len, a, b):
    # N = r L (a + b N): a straight line in N; one Newton step from 0 lands on the root
    slope = 1.0 - rate * output_len * b
    if not slope > 0:
        return math.inf
    g0 = -rate * output_len * a
    return 0.0 - g0 / slope
# %% fleet_size
def fleet_size(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget=8192):
    ratio = output_tokens_per_day / input_tokens_per_day
    decode_context = round(prompt_len + ratio * prompt_len / 2)
    hours = []
    for tokens, per_token in ((input_tokens_per_day, capacity.prefill_s_per_token(model, gpu, prompt_len, budget)),
                              (output_tokens_per_day,
                               capacity.decode_s_per_token(model, gpu, batch, decode_context))):
        hours.append(tokens * per_token / 3600.0)
    total_days = sum(hours) / 24.0
    return math.ceil(total_days), hours[0], hours[1]
# %% budget_knee
def budget_knee(model, gpu, num_decodes, context_len):
    decodes = [context_len] * num_decodes
    bound = lambda k: costmodel.step_cost(model, gpu, prefill_tokens=k, decode_context_lens=decodes).bound

    if num_decodes and bound(0) == "compute":
        return num_decodes
    # coarse steps, then one token at a time
    k, step = 1, 256
    while bound(k + step) != "compute":
        k += step
        step *= 2
    # the answer is in (k, k + step]
    lo, hi = k, k + step
    if bound(lo) == "compute":
        return num_decodes + lo

    def refine(a, b):
        if b - a == 1:
            return b
        m = (a + b) // 2
        return refine(a, m) if bound(m) == "compute" else refine(m, b)

    return num_decodes + refine(lo, hi)
