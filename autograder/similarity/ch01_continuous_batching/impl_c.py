# %% simulate_static
import numpy as _np


def simulate_static(out_lens, B):
    lens = _np.asarray(out_lens, dtype=_np.int64)
    n = lens.size
    if n == 0:
        return 0, []
    nb = -(-n // B)
    padded = _np.zeros(nb * B, dtype=_np.int64)
    padded[:n] = lens
    per_batch = padded.reshape(nb, B).max(axis=1)
    starts = _np.concatenate(([0], _np.cumsum(per_batch)[:-1]))
    fin = _np.repeat(starts, B)[:n] + lens
    return int(per_batch.sum()), [int(x) for x in fin]
# %% simulate_continuous
import numpy as _np


def simulate_continuous(out_lens, B):
    slots = _np.zeros(max(1, min(B, len(out_lens))), dtype=_np.int64)
    finishing = []
    for length in out_lens:
        k = int(_np.argmin(slots))
        slots[k] += length
        finishing.append(int(slots[k]))
    return (max(finishing) if finishing else 0, finishing)
# %% utilization
import numpy as _np


def utilization(out_lens, B, total_steps):
    arr = _np.asarray(out_lens, dtype=float)
    if arr.size == 0:
        return 0.0
    return float(arr.sum() / (B * total_steps))
# %% lower_bound
def lower_bound(out_lens, B):
    if not out_lens:
        return 0
    total = sum(out_lens)
    need = (total + B - 1) // B
    return max(need, max(out_lens))
# %% simulate_continuous_arrivals
def simulate_continuous_arrivals(arrivals, out_lens, B):
    """Step-driven event simulation: jump the clock to the next arrival or completion."""
    n = len(out_lens)
    pending = sorted(range(n), key=lambda i: (arrivals[i], i))
    start = [0] * n
    finish = [0] * n
    running = {}                 # request -> finish time
    clock = 0
    p = 0
    while p < n:
        # free slots whose request has finished by now
        for r in [r for r, f in running.items() if f <= clock]:
            del running[r]
        while p < n and len(running) < B and arrivals[pending[p]] <= clock:
            r = pending[p]
            start[r] = clock
            finish[r] = clock + out_lens[r]
            running[r] = finish[r]
            p += 1
        if p == n:
            break
        nxt = []
        if len(running) >= B:
            nxt.append(min(running.values()))
        else:
            nxt.append(arrivals[pending[p]])
        clock = max(clock, min(nxt)) if min(nxt) > clock else clock
    delays = [start[i] - arrivals[i] for i in range(n)]
    return start, finish, delays
# %% expected_max
import numpy as _np


def expected_max(pmf, B):
    F = _np.cumsum(_np.asarray(pmf, dtype=float))
    F_prev = _np.concatenate(([0.0], F[:-1]))
    return float(_np.sum(1.0 - F_prev ** B))
