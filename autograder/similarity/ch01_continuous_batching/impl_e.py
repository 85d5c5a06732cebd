# %% simulate_static
from itertools import accumulate


def simulate_static(out_lens, B):
    batches = [out_lens[k:k + B] for k in range(0, len(out_lens), B)]
    spans = [max(b) for b in batches]
    begins = [0] + list(accumulate(spans))
    finish = [begins[j] + x for j, b in enumerate(batches) for x in b]
    return begins[-1], finish
# %% simulate_continuous
class _Slots:
    def __init__(self, count):
        self.free = [0] * count

    def take(self, work):
        idx = self.free.index(min(self.free))
        self.free[idx] += work
        return self.free[idx]


def simulate_continuous(out_lens, B):
    pool = _Slots(min(B, len(out_lens)))
    ends = [pool.take(w) for w in out_lens]
    return (max(ends) if ends else 0, ends)
# %% utilization
def utilization(out_lens, B, total_steps):
    try:
        return sum(out_lens) / (B * total_steps) if len(out_lens) else 0.0
    except ZeroDivisionError:
        return 0.0
# %% lower_bound
def lower_bound(out_lens, B):
    bound = 0
    if out_lens:
        longest = sorted(out_lens)[-1]
        q, r = divmod(sum(out_lens), B)
        bound = max(longest, q + (r > 0))
    return bound
# %% simulate_continuous_arrivals
class _Pool:
    def __init__(self, width):
        self.width = width
        self.ends = []

    def admit(self, ready, work):
        if len(self.ends) < self.width:
            t = ready
        else:
            self.ends.sort()
            t = max(ready, self.ends.pop(0))
        self.ends.append(t + work)
        return t


def simulate_continuous_arrivals(arrivals, out_lens, B):
    pool = _Pool(B)
    begin = {}
    for idx in sorted(range(len(out_lens)), key=lambda j: (arrivals[j], j)):
        begin[idx] = pool.admit(arrivals[idx], out_lens[idx])
    starts = [begin[j] for j in range(len(out_lens))]
    ends = [s + L for s, L in zip(starts, out_lens)]
    waits = [s - a for s, a in zip(starts, arrivals)]
    return starts, ends, waits
# %% expected_max
def expected_max(pmf, B):
    # P(M >= k) = 1 - P(all B draws < k)
    n = len(pmf)
    result = 0.0
    below = 0.0
    k = 0
    while k < n:
        result = result + (1 - pow(below, B))
        below = below + pmf[k]
        k += 1
    return result
