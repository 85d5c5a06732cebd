"""List order: serve first come first served by arrival step, not in list order."""

REPLACE = {
    "simulate_continuous_arrivals": '''
def simulate_continuous_arrivals(arrivals, out_lens, B):
    n = len(out_lens)
    start, finish, slots = [0] * n, [0] * n, [0] * min(B, n)
    for i in range(n):  # list order, not arrival order
        start[i] = max(arrivals[i], heapq.heappop(slots))
        finish[i] = start[i] + out_lens[i]
        heapq.heappush(slots, finish[i])
    return start, finish, [s - a for s, a in zip(start, arrivals)]
''',
}
FAILS = ["test_simulate_continuous_arrivals"]
MESSAGE = "not in list order"
