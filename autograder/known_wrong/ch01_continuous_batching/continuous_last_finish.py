"""total = finish[-1]: the total is max(finish), not the last request's finish."""

REPLACE = {
    "simulate_continuous": '''
def simulate_continuous(out_lens, B):
    finish, slots = [0] * len(out_lens), [0] * min(B, len(out_lens))
    for i, L in enumerate(out_lens):
        finish[i] = heapq.heappop(slots) + L
        heapq.heappush(slots, finish[i])
    return (finish[-1] if finish else 0), finish
''',
}
FAILS = ["test_simulate_continuous"]
MESSAGE = "not the last request's finish"
