# %% utilization_limit
def utilization_limit(target_s, service_s, cv2=0.0, q=0.99):
    if target_s < service_s:
        return 0.0
    floor = 1 - q
    spread = (1 + cv2) / 2

    def late(u):
        # queueing delay at the q-th percentile, then the own prefill
        if u <= floor:
            return service_s > target_s
        w = service_s * spread / (1 - u) * math.log(u / floor)
        return w + service_s > target_s

    def search(a, b):
        if b - a <= 1e-9:
            return a
        m = (a + b) / 2
        return search(a, m) if late(m) else search(m, b)

    return search(0.0, 1.0)
# %% drain_time
def drain_time(spike_rate, base_rate, capacity, spike_s):
    if spike_rate <= capacity or spike_s <= 0:
        return 0.0
    headroom = capacity - base_rate
    if headroom <= 0:
        return math.inf
    queued = (spike_rate - capacity) * spike_s
    return queued / headroom
# %% dead_requests
def dead_requests(spike_rate, base_rate, capacity, spike_s, timeout_s):
    up = spike_rate - capacity
    down = capacity - base_rate
    threshold = capacity * timeout_s
    top = up * spike_s if up > 0 else 0.0
    if top <= threshold:
        return 0.0
    # seconds the backlog spends above the line while rising, then while falling
    rising = spike_s - threshold / up
    falling = (top - threshold) / down
    return spike_rate * rising + base_rate * falling
# %% admit_by_deadline
def admit_by_deadline(backlog_tokens, prompt_tokens, prefill_tokens_per_s, deadline_s):
    budget = prefill_tokens_per_s * deadline_s
    total = prompt_tokens + backlog_tokens
    return not total > budget
# %% retry_delay
def retry_delay(attempt, base_s, cap_s, rng=None):
    top = cap_s if attempt >= 64 else min(cap_s, base_s * (1 << attempt))
    if rng is not None:
        top = rng.uniform(0.0, top)
    return top
# %% retry_after
def retry_after(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s=0.0, rng=None):
    excess = backlog_tokens - admit_line_tokens
    if excess < 0:
        excess = 0
    t = excess / prefill_tokens_per_s
    if rng:
        t = t + rng.uniform(0.0, jitter_s)
    secs = int(math.ceil(t))
    if secs < 1:
        secs = 1
    return secs
