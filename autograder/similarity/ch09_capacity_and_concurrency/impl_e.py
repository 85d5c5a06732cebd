# %% kv_ceiling
def kv_ceiling(model, gpu, context_len, memory_fraction=0.92):
    # what one whole sequence costs, and how many of them the leftover memory takes
    one_sequence = context_len * model.kv_bytes_per_token
    left = memory_fraction * gpu.memory_bytes - model.weight_bytes - costmodel.activation_bytes(model)
    return math.floor(left / one_sequence)
# %% compute_ridge_batch
def compute_ridge_batch(model, gpu, context_len):
    # walk the batch up in a geometric schedule, then scan the last interval linearly in strides
    def compute_bound(n):
        return costmodel.step_cost(model, gpu, decode_context_lens=[context_len] * n).bound == "compute"

    one = costmodel.step_cost(model, gpu, decode_context_lens=[context_len])
    per_seq_mem = one.memory_s - model.weight_bytes / gpu.hbm_bandwidth
    if one.compute_s <= per_seq_mem:
        return math.inf
    upper = 1
    while not compute_bound(upper):
        upper *= 4
    for n in range(max(1, upper // 4), upper + 1):
        if compute_bound(n):
            return n
    return upper
# %% resident_sequences
def resident_sequences(rate, output_len, a, b):
    occupancy = rate * output_len
    feedback = occupancy * b
    return math.inf if feedback >= 1 else occupancy * a / (1 - feedback)
# %% fleet_size
def fleet_size(model, gpu, input_tokens_per_day, output_tokens_per_day, prompt_len, batch, budget=8192):
    """Split the day's GPU time into prefill and decode, then round the fleet up."""
    SECONDS_PER_HOUR = 3600.0
    per_request_out = output_tokens_per_day / (input_tokens_per_day / prompt_len)
    context = round(prompt_len + per_request_out / 2)
    prefill_seconds = input_tokens_per_day * capacity.prefill_s_per_token(model, gpu, prompt_len, budget)
    decode_seconds = output_tokens_per_day * capacity.decode_s_per_token(model, gpu, batch, context)
    total_hours = (prefill_seconds + decode_seconds) / SECONDS_PER_HOUR
    return (math.ceil(total_hours / 24), prefill_seconds / SECONDS_PER_HOUR, decode_seconds / SECONDS_PER_HOUR)
# %% budget_knee
def budget_knee(model, gpu, num_decodes, context_len):
    # The chunk's compute grows ~linearly (plus quadratic attention) while its memory traffic barely grows,
    # so solve the roofline equality as a quadratic in k and then fix up the integer answer.
    L, H, d = model.num_layers, model.num_heads, model.head_dim
    lin = 2.0 * model.matmul_params
    quad = 4.0 * L * H * d
    kvb = model.kv_bytes_per_token
    peak, bw = gpu.peak_flops, gpu.hbm_bandwidth

    def is_cb(k):
        return costmodel.step_cost(model, gpu, prefill_tokens=k,
                                   decode_context_lens=[context_len] * num_decodes).bound == "compute"

    if num_decodes and is_cb(0):
        return num_decodes
    # compute(k) - memory(k) = A k^2 + B k + C  for k >= 1
    A = quad / 2 / peak
    B = (lin + quad / 2) / peak - kvb / bw
    dec_flops = num_decodes * (lin + 2.0 * model.vocab_size * model.hidden_size + quad * (context_len + 1))
    C = (dec_flops + 2.0 * model.vocab_size * model.hidden_size) / peak - (
        model.weight_bytes + num_decodes * (context_len + 1) * kvb) / bw
    disc = B * B - 4 * A * C
    k = max(1, math.ceil((-B + math.sqrt(max(0.0, disc))) / (2 * A)))
    while k > 1 and is_cb(k - 1):
        k -= 1
    while not is_cb(k):
        k += 1
    return num_decodes + k
