"""Starting early: a request cannot start before it arrives, even if a slot is free."""

REPLACE = {
    "simulate_continuous_arrivals": '''
def simulate_continuous_arrivals(arrivals, out_lens, B):
    n = len(out_lens)
    start, finish, slots = [0] * n, [0] * n, [0] * min(B, n)
    for i in sorted(range(n), key=lambda i: (arrivals[i], i)):
        start[i] = heapq.heappop(slots)  # forgets max(arrival, ...)
        finish[i] = start[i] + out_lens[i]
        heapq.heappush(slots, finish[i])
    return start, finish, [s - a for s, a in zip(start, arrivals)]
''',
}
FAILS = ["test_simulate_continuous_arrivals"]
MESSAGE = "cannot start before it arrives"
