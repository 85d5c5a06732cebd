# %% simulate_static
from itertools import groupby as _groupby


def simulate_static(out_lens, B):
    finish_steps = [0] * len(out_lens)
    now = 0
    for _, members in _groupby(range(len(out_lens)), key=lambda idx: idx // B):
        members = list(members)
        longest = 0
        for idx in members:
            finish_steps[idx] = now + out_lens[idx]
            longest = max(longest, out_lens[idx])
        now += longest
    return (now, finish_steps)
# %% simulate_continuous
def simulate_continuous(out_lens, B):
    # Tick-free event loop: maintain slot loads, hand each request to the least loaded slot
    n = len(out_lens)
    if n == 0:
        return 0, []
    loads = {slot: 0 for slot in range(min(B, n))}
    out = []
    for req in out_lens:
        slot = min(loads, key=loads.get)
        loads[slot] = loads[slot] + req
        out.append(loads[slot])
    return max(loads.values()), out
# %% utilization
def utilization(out_lens, B, total_steps):
    if len(out_lens) < 1:
        return 0.0
    slot_steps = total_steps * B
    busy = sum(out_lens)
    return busy / slot_steps
# %% lower_bound
def lower_bound(out_lens, B):
    lb = 0
    for L in out_lens:
        lb = max(lb, L)
    s = sum(out_lens)
    return max(lb, s // B + (1 if s % B else 0))
# %% simulate_continuous_arrivals
import heapq as _heapq


def simulate_continuous_arrivals(arrivals, out_lens, B):
    events = []                          # completion events: (time, request)
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i])   # stable: ties keep index order
    start, finish = [0] * len(arrivals), [0] * len(arrivals)
    in_flight = 0
    for r in order:
        if in_flight == B:
            t_free, _ = _heapq.heappop(events)
            in_flight -= 1
        else:
            t_free = 0
        begin = t_free if t_free > arrivals[r] else arrivals[r]
        start[r], finish[r] = begin, begin + out_lens[r]
        _heapq.heappush(events, (finish[r], r))
        in_flight += 1
    return start, finish, list(map(lambda s, a: s - a, start, arrivals))
# %% expected_max
def expected_max(pmf, B):
    # sum_{k=1..n} (1 - F(k-1)^B) = n - sum_{j=0..n-1} F(j)^B
    n = len(pmf)
    below = 0.0 ** B if n else 0.0
    cdf = 0.0
    for p in pmf[:-1]:
        cdf += p
        below += cdf ** B
    return n - below
