"""Finish = batch end: a request finishes when its own tokens are done, not when its batch ends."""

REPLACE = {
    "simulate_static": '''
def simulate_static(out_lens, B):
    t, finish = 0, [0] * len(out_lens)
    for s in range(0, len(out_lens), B):
        batch = range(s, min(s + B, len(out_lens)))
        t += max(out_lens[i] for i in batch)
        for i in batch:
            finish[i] = t
    return t, finish
''',
}
FAILS = ["test_simulate_static"]
MESSAGE = "finishes when its own tokens are done"
