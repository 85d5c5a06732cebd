# %% simulate_static
def simulate_static(out_lens, B):
    def run(lens, t0):
        if not lens:
            return t0, []
        head, rest = lens[:B], lens[B:]
        t_end, tail = run(rest, t0 + max(head))
        return t_end, [t0 + x for x in head] + tail

    total, fin = run(list(out_lens), 0)
    return (total, fin)
# %% simulate_continuous
import heapq as _hq


def simulate_continuous(out_lens, B):
    """Each slot is a (free_time, slot_id) entry in a heap."""
    heap = [(0, s) for s in range(B)]
    fins = []
    for L in out_lens:
        t, slot = _hq.heappop(heap)
        fins.append(t + L)
        _hq.heappush(heap, (t + L, slot))
    return (max(fins, default=0), fins)
# %% utilization
def utilization(out_lens, B, total_steps):
    return 0.0 if not out_lens else float(sum(out_lens)) / float(B) / float(total_steps)
# %% lower_bound
import math as _math


def lower_bound(out_lens, B):
    return max([0, *out_lens, _math.ceil(sum(out_lens) / B)]) if out_lens else 0
# %% simulate_continuous_arrivals
import heapq as _hq


def simulate_continuous_arrivals(arrivals, out_lens, B):
    queue = sorted(zip(arrivals, range(len(arrivals)), out_lens))
    busy = []                      # finish times of requests currently holding a slot
    starts, ends = {}, {}
    for arr, idx, L in queue:
        if len(busy) < B:
            t = arr
        else:
            t = max(arr, _hq.heappop(busy))
        starts[idx] = t
        ends[idx] = t + L
        _hq.heappush(busy, t + L)
    n = len(out_lens)
    S = [starts[i] for i in range(n)]
    F = [ends[i] for i in range(n)]
    return S, F, [S[i] - arrivals[i] for i in range(n)]
# %% expected_max
from itertools import accumulate as _acc


def expected_max(pmf, B):
    cdfs = [0.0] + list(_acc(pmf))[:-1]        # F(k-1) for k = 1..len(pmf)
    return sum(1.0 - F ** B for F in cdfs)
