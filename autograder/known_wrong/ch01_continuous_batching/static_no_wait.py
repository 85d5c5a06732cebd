"""Static batch does not wait for its longest request: the clock advances by the batch's last request."""

REPLACE = {
    "simulate_static": '''
def simulate_static(out_lens, B):
    t, finish = 0, [0] * len(out_lens)
    for s in range(0, len(out_lens), B):
        for i in range(s, min(s + B, len(out_lens))):
            finish[i] = t + out_lens[i]
        t += out_lens[i]  # the loop variable is the batch's last request, not its longest
    return t, finish
''',
}
FAILS = ["test_simulate_static", "test_simulate_continuous"]
MESSAGE = "does not wait for its longest request"
