"""Delay = latency: queueing delay is start - arrival, not finish - arrival."""

REPLACE = {
    "simulate_continuous_arrivals": '''
def simulate_continuous_arrivals(arrivals, out_lens, B):
    n = len(out_lens)
    start, finish, slots = [0] * n, [0] * n, [0] * min(B, n)
    for i in sorted(range(n), key=lambda i: (arrivals[i], i)):
        start[i] = max(arrivals[i], heapq.heappop(slots))
        finish[i] = start[i] + out_lens[i]
        heapq.heappush(slots, finish[i])
    return start, finish, [f - a for f, a in zip(finish, arrivals)]
''',
}
FAILS = ["test_simulate_continuous_arrivals"]
MESSAGE = "not finish - arrival"
