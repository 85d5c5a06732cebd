# %% simulate_static
def simulate_static(out_lens, B):
    n = len(out_lens)
    done = []
    clock = 0
    i = 0
    while i < n:
        group = out_lens[i:i + B]
        done.extend(clock + length for length in group)
        clock += max(group)
        i += B
    return clock, done
# %% simulate_continuous
import bisect


def simulate_continuous(out_lens, B):
    free_at = []          # sorted list of times at which each busy slot frees up
    result = []
    for length in out_lens:
        if len(free_at) < B:
            begin = 0
        else:
            begin = free_at.pop(0)
        end = begin + length
        bisect.insort(free_at, end)
        result.append(end)
    total = max(result) if result else 0
    return total, result
# %% utilization
def utilization(out_lens, B, total_steps):
    produced = 0
    for length in out_lens:
        produced += length
    if produced == 0 and not out_lens:
        return 0.0
    capacity = B * total_steps
    return produced / capacity
# %% lower_bound
def lower_bound(out_lens, B):
    if len(out_lens) == 0:
        return 0
    tokens = sum(out_lens)
    rounds = tokens // B
    if tokens % B:
        rounds += 1
    longest = max(out_lens)
    return longest if longest > rounds else rounds
# %% simulate_continuous_arrivals
def simulate_continuous_arrivals(arrivals, out_lens, B):
    slot_free = [0] * B
    begun = {}
    for arr, idx in sorted((a, i) for i, a in enumerate(arrivals)):
        best = 0
        for s in range(1, B):
            if slot_free[s] < slot_free[best]:
                best = s
        begun[idx] = arr if arr > slot_free[best] else slot_free[best]
        slot_free[best] = begun[idx] + out_lens[idx]
    start, finish, delay = [], [], []
    for idx, length in enumerate(out_lens):
        start.append(begun[idx])
        finish.append(begun[idx] + length)
        delay.append(begun[idx] - arrivals[idx])
    return start, finish, delay
# %% expected_max
def expected_max(pmf, B):
    # E[M] = sum_k k * (F(k)^B - F(k-1)^B)
    expect = 0.0
    prev = 0.0
    running = 0.0
    for k, p in enumerate(pmf, start=1):
        running += p
        cur = running ** B
        expect += k * (cur - prev)
        prev = cur
    return expect
