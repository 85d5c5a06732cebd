# %% kv_ceiling
def kv_ceiling(model, gpu, context_len, memory_fraction=0.92):
    room = gpu.memory_bytes * memory_fraction - (model.weight_bytes + costmodel.activation_bytes(model))
    seqs = 0
    tokens_fit = int(room // model.kv_bytes_per_token)
    seqs, _rest = divmod(tokens_fit, context_len)
    return seqs
# %% compute_ridge_batch
def compute_ridge_batch(model, gpu, context_len):
    # Per-sequence and fixed parts straight from the model: FLOPs per decode token, bytes per decode
    # (KV read of context_len tokens + write of one), and the weights read once a step.
    flops_per_seq = (2.0 * model.matmul_params + 2.0 * model.vocab_size * model.hidden_size
                     + 4.0 * model.num_layers * model.num_heads * model.head_dim * (context_len + 1))
    t_compute = flops_per_seq / gpu.peak_flops
    t_bytes = (context_len + 1) * model.kv_bytes_per_token / gpu.hbm_bandwidth
    t_weights = model.weight_bytes / gpu.hbm_bandwidth
    if t_compute <= t_bytes:
        return math.inf
    guess = max(1, math.ceil(t_weights / (t_compute - t_bytes)))
    # check against the cost model itself and nudge by one if the float rounding disagrees
    for b in (guess - 1, guess, guess + 1):
        if b >= 1:
            c = costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * b)
            if c.bound == "compute":
                return b
    return guess
# %% resident_sequences
def resident_sequences(rate, output_len, a, b):
    import numpy as np
    if rate * output_len * b >= 1:
        return math.inf
    # (1 - r L b) N = r L a
    lhs = np.array([[1.0 - rate * output_len * b]])
    rhs = np.array([rate * output_len * a])
    return float(np.linalg.solve(lhs, rhs)[0])
# %% fleet_size
def fleet_size(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget=8192):
    def gpu_hours(tokens, seconds_each):
        return tokens * seconds_each / 3600

    gen_len = prompt_len * output_tokens_per_day / input_tokens_per_day
    prefill_hours = gpu_hours(input_tokens_per_day, capacity.prefill_s_per_token(model, gpu, prompt_len, budget))
    decode_hours = gpu_hours(output_tokens_per_day,
                             capacity.decode_s_per_token(model, gpu, batch, round(prompt_len + gen_len / 2)))
    n = -(-(prefill_hours + decode_hours) // 24)
    return int(n), prefill_hours, decode_hours
# %% budget_knee
def budget_knee(model, gpu, num_decodes, context_len):
    import numpy as np
    # vectorised roofline over candidate chunk sizes, from the four totals of a step
    base_pairs = num_decodes * (context_len + 1)
    kv_read = num_decodes * context_len

    def first_compute(ks):
        ks = np.asarray(ks, dtype=np.int64)
        c = costmodel.cost_from_totals(model, gpu, num_tokens=ks + num_decodes,
                                       num_seqs=num_decodes + (ks > 0), attention_pairs=base_pairs + ks * (ks + 1) // 2,
                                       kv_read_tokens=kv_read)
        hits = np.nonzero(c.compute_s >= c.memory_s)[0]
        return int(ks[hits[0]]) if hits.size else None

    if num_decodes:
        first = first_compute([0])
        if first == 0:
            return num_decodes
    start, width = 1, 4096
    while True:
        found = first_compute(np.arange(start, start + width))
        if found is not None:
            return num_decodes + found
        start += width
        width *= 2
