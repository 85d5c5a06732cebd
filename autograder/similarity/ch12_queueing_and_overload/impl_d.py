# %% utilization_limit
def utilization_limit(target_s, service_s, cv2=0.0, q=0.99):
    # normalise by the service time: find rho with  c * ln(rho / eps) / (1 - rho) = target/S - 1
    if target_s < service_s:
        return 0.0
    eps = 1.0 - q
    c = (1.0 + cv2) / 2.0
    slack = target_s / service_s - 1.0

    def excess(rho):
        if rho <= eps:
            return -slack
        return c * math.log(rho / eps) / (1.0 - rho) - slack

    a, b = 0.0, 1.0
    steps = 0
    while b - a > 1e-9 and steps < 100:
        mid = a + (b - a) / 2.0
        if excess(mid) > 0:
            b = mid
        else:
            a = mid
        steps += 1
    return a
# %% drain_time
def drain_time(spike_rate, base_rate, capacity, spike_s):
    overflow = spike_rate - capacity
    if overflow > 0 and spike_s > 0:
        if capacity > base_rate:
            return overflow * spike_s / (capacity - base_rate)
        return float("inf")
    return 0.0
# %% dead_requests
def dead_requests(spike_rate, base_rate, capacity, spike_s, timeout_s):
    if spike_rate <= capacity:
        return 0.0
    slope_up = spike_rate - capacity
    slope_down = capacity - base_rate
    backlog_end = slope_up * spike_s
    level = timeout_s * capacity
    if backlog_end <= level:
        return 0.0
    above = backlog_end - level
    # the time above the line during the spike is above / slope_up
    return spike_rate * above / slope_up + base_rate * above / slope_down
# %% admit_by_deadline
def admit_by_deadline(backlog_tokens, prompt_tokens, prefill_tokens_per_s, deadline_s):
    if prefill_tokens_per_s <= 0:
        return False
    return (prompt_tokens + backlog_tokens) / prefill_tokens_per_s <= deadline_s
# %% retry_delay
def retry_delay(attempt, base_s, cap_s, rng=None):
    try:
        grown = base_s * math.pow(2, attempt)
    except OverflowError:
        grown = math.inf
    limit = cap_s if grown > cap_s else grown
    if rng is None:
        return limit
    return rng.uniform(0.0, limit)
# %% retry_after
def retry_after(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s=0.0, rng=None):
    if backlog_tokens > admit_line_tokens:
        seconds = (backlog_tokens - admit_line_tokens) / prefill_tokens_per_s
    else:
        seconds = 0.0
    if rng is not None:
        seconds += rng.uniform(0.0, jitter_s)
    answer = math.ceil(seconds)
    return 1 if answer < 1 else answer
