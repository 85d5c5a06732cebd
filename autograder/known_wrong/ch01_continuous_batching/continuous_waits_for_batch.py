"""Waiting for the batch in "continuous" code: that is static batching; a freed slot is refilled at once."""

REPLACE = {
    "simulate_continuous": '''
def simulate_continuous(out_lens, B):
    t, finish = 0, [0] * len(out_lens)
    for s in range(0, len(out_lens), B):  # new requests join only when the whole batch is done
        batch = range(s, min(s + B, len(out_lens)))
        for i in batch:
            finish[i] = t + out_lens[i]
        t = max(finish[i] for i in batch)
    return t, finish
''',
}
FAILS = ["test_simulate_continuous"]
MESSAGE = "that is static batching"
