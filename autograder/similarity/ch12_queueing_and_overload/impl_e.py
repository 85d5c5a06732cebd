# %% utilization_limit
def _wait_quantile(rho, s, cv2, q):
    """q-quantile of the wait in an M/G/1 queue, exponential-tail approximation."""
    if rho <= 1 - q:
        return 0.0
    pk = rho * s * (1 + cv2) / (2 * (1 - rho))
    return pk * math.log(rho / (1 - q)) / rho


def utilization_limit(target_s, service_s, cv2=0.0, q=0.99):
    if service_s > target_s:
        return 0.0
    # halve rho until the target is met, then bisect the bracket [ok, bad]
    def meets(r):
        return _wait_quantile(r, service_s, cv2, q) + service_s <= target_s

    ok, bad = 0.5, 1.0
    while not meets(ok):
        bad = ok
        ok /= 2
    for _ in range(100):
        if bad - ok <= 1e-9:
            break
        m = (ok + bad) / 2
        if meets(m):
            ok = m
        else:
            bad = m
    return ok
# %% drain_time
def drain_time(spike_rate, base_rate, capacity, spike_s):
    served_during = min(spike_rate, capacity) * spike_s
    left_over = spike_rate * spike_s - served_during
    if left_over <= 0:
        return 0.0
    net = capacity - base_rate
    if net <= 0:
        return math.inf
    return left_over / net
# %% dead_requests
def dead_requests(spike_rate, base_rate, capacity, spike_s, timeout_s):
    # exact piecewise-linear answer, written as arrivals over the interval where backlog > line
    def backlog(t):
        if t <= spike_s:
            return max(0.0, spike_rate - capacity) * t
        b = max(0.0, spike_rate - capacity) * spike_s - (capacity - base_rate) * (t - spike_s)
        return max(0.0, b)

    line = capacity * timeout_s
    if backlog(spike_s) <= line:
        return 0.0
    t_up = line / (spike_rate - capacity)
    t_down = spike_s + (backlog(spike_s) - line) / (capacity - base_rate)
    total = 0.0
    for a, b, rate in ((t_up, spike_s, spike_rate), (spike_s, t_down, base_rate)):
        total += rate * (b - a)
    return total
# %% admit_by_deadline
def admit_by_deadline(backlog_tokens, prompt_tokens, prefill_tokens_per_s, deadline_s):
    capacity_tokens = deadline_s * prefill_tokens_per_s
    return bool(backlog_tokens + prompt_tokens <= capacity_tokens)
# %% retry_delay
def retry_delay(attempt, base_s, cap_s, rng=None):
    delays = [base_s]
    while len(delays) <= attempt and delays[-1] < cap_s:
        delays.append(delays[-1] * 2)
    ceiling = min(delays[-1], cap_s)
    return rng.uniform(0.0, ceiling) if rng else ceiling
# %% retry_after
def retry_after(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s=0.0, rng=None):
    to_drain = max(0, backlog_tokens - admit_line_tokens)
    jitter = 0.0
    if rng is not None:
        jitter = rng.uniform(0.0, jitter_s)
    secs = to_drain / prefill_tokens_per_s + jitter
    whole = -int(-secs // 1)
    return whole if whole > 1 else 1
