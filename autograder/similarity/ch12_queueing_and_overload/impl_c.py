# %% utilization_limit
import numpy as np


def _p_ttft(rho, service_s, cv2, q):
    rho = np.asarray(rho, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_w = rho * service_s * (1.0 + cv2) / (2.0 * (1.0 - rho))
        tail = np.where(rho > 1.0 - q, mean_w / rho * np.log(rho / (1.0 - q)), 0.0)
    return tail + service_s


def utilization_limit(target_s, service_s, cv2=0.0, q=0.99):
    """Grid refinement: keep zooming into the last cell that still meets the target."""
    if service_s > target_s:
        return 0.0
    left, right = 0.0, 1.0
    while right - left > 1e-9:
        grid = np.linspace(left, right, 65)
        inside = grid[:-1][_p_ttft(grid[:-1], service_s, cv2, q) <= target_s]
        k = len(inside) - 1
        left, right = float(grid[k]), float(grid[k + 1])
    return left
# %% drain_time
def drain_time(spike_rate, base_rate, capacity, spike_s):
    pile = spike_s * (spike_rate - capacity)
    if pile <= 0:
        return 0.0
    return math.inf if capacity <= base_rate else pile / (capacity - base_rate)
# %% dead_requests
def dead_requests(spike_rate, base_rate, capacity, spike_s, timeout_s):
    """Walk the two linear pieces of the backlog curve, adding arrivals while it sits above the line."""
    line = capacity * timeout_s
    level = 0.0
    lost = 0.0
    pieces = [(spike_s, spike_rate)]
    if spike_rate > capacity and capacity > base_rate:
        pieces.append(((spike_rate - capacity) * spike_s / (capacity - base_rate), base_rate))
    for length, arrivals in pieces:
        slope = arrivals - capacity
        end = max(0.0, level + slope * length)
        hi, lo = max(level, end), min(level, end)
        if hi > line and slope != 0:
            lost += arrivals * (hi - max(lo, line)) / abs(slope)
        level = end
    return lost
# %% admit_by_deadline
def admit_by_deadline(backlog_tokens, prompt_tokens, prefill_tokens_per_s, deadline_s):
    wait = backlog_tokens / prefill_tokens_per_s
    own = prompt_tokens / prefill_tokens_per_s
    return wait + own <= deadline_s
# %% retry_delay
def retry_delay(attempt, base_s, cap_s, rng=None):
    n = 0
    d = base_s
    while n < attempt and d < cap_s:
        d, n = d * 2, n + 1
    d = d if d < cap_s else cap_s
    return d if rng is None else rng.uniform(0.0, d)
# %% retry_after
def retry_after(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s=0.0, rng=None):
    extra = 0.0 if rng is None else rng.uniform(0.0, jitter_s)
    drain = (backlog_tokens - admit_line_tokens) / prefill_tokens_per_s
    total = extra + (drain if drain > 0 else 0.0)
    return max(math.ceil(total), 1)
