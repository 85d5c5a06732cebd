# %% utilization_limit
def utilization_limit(target_s, service_s, cv2=0.0, q=0.99):
    if service_s > target_s:
        return 0.0
    tail = 1.0 - q
    low, high = 0.0, 1.0
    for _ in range(200):
        if high - low <= 1e-9:
            break
        r = 0.5 * (low + high)
        queue = r * service_s * (1.0 + cv2) / (2.0 * (1.0 - r))
        quantile = queue * math.log(r / tail) / r if r > tail else 0.0
        if quantile + service_s > target_s:
            high = r
        else:
            low = r
    return low
# %% drain_time
def drain_time(spike_rate, base_rate, capacity, spike_s):
    excess = spike_rate - capacity
    if excess <= 0 or spike_s == 0:
        return 0.0
    spare = capacity - base_rate
    return excess * spike_s / spare if spare > 0 else math.inf
# %% dead_requests
def dead_requests(spike_rate, base_rate, capacity, spike_s, timeout_s):
    growth = spike_rate - capacity
    limit = capacity * timeout_s
    if growth <= 0 or growth * spike_s <= limit:
        return 0.0
    lost_in_spike = spike_rate * (spike_s - limit / growth)
    overshoot = growth * spike_s - limit
    lost_after = overshoot / (capacity - base_rate) * base_rate
    return lost_in_spike + lost_after
# %% admit_by_deadline
def admit_by_deadline(backlog_tokens, prompt_tokens, prefill_tokens_per_s, deadline_s):
    return backlog_tokens + prompt_tokens <= deadline_s * prefill_tokens_per_s
# %% retry_delay
def retry_delay(attempt, base_s, cap_s, rng=None):
    delay = base_s
    for _ in range(attempt):
        delay *= 2
        if delay >= cap_s:
            break
    delay = min(delay, cap_s)
    if rng is None:
        return delay
    return rng.uniform(0.0, delay)
# %% retry_after
def retry_after(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s=0.0, rng=None):
    over = backlog_tokens - admit_line_tokens
    seconds = over / prefill_tokens_per_s if over > 0 else 0.0
    jitter = rng.uniform(0.0, jitter_s) if rng is not None else 0.0
    whole = math.ceil(seconds + jitter)
    return whole if whole >= 1 else 1
