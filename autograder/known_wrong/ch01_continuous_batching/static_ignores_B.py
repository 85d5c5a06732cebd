"""Ignoring B: the total is the sum over batches of each batch's longest request, not one max over all."""

REPLACE = {
    "simulate_static": '''
def simulate_static(out_lens, B):
    return max(out_lens, default=0), list(out_lens)  # as if every request ran at once
''',
}
FAILS = ["test_simulate_static", "test_simulate_continuous"]
MESSAGE = "not one max over all requests"
