"""A new request first waits for the step in flight: the backlog limit counts every step up to the target."""

REPLACE = {
    "max_backlog": '''
def max_backlog(budget, num_decodes, step_s, ttft_target_s):
    steps = math.floor(ttft_target_s / step_s)
    return max(0, (budget - num_decodes) * steps)
''',
}
FAILS = ["test_max_backlog"]
MESSAGE = "Pitfall: a new request first waits for the step in flight"
