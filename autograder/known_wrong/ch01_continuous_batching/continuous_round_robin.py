"""Round-robin slots: the next request takes the earliest-free slot, not slot i % B."""

REPLACE = {
    "simulate_continuous": '''
def simulate_continuous(out_lens, B):
    free, finish = [0] * B, [0] * len(out_lens)
    for i, L in enumerate(out_lens):
        finish[i] = free[i % B] + L
        free[i % B] = finish[i]
    return (max(finish) if finish else 0), finish
''',
}
FAILS = ["test_simulate_continuous"]
MESSAGE = "earliest-free slot"
