"""The decodes' tokens are not prefill throughput: the backlog limit uses the whole budget per step."""

REPLACE = {
    "max_backlog": '''
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    steps = math.floor(ttft_target_s / step_s)
    return max(0, budget * (steps - 1))              # every token of every step works the queue off
''',
}
FAILS = ["test_max_backlog"]
MESSAGE = "Pitfall: the decodes' tokens are not prefill throughput"
