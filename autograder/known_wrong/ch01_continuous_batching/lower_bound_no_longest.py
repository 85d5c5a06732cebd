"""Forgetting the longest request: it alone needs max(out_lens) steps, however many slots are free."""

REPLACE = {
    "lower_bound": '''
def lower_bound(out_lens, B):
    return -(-sum(out_lens) // B)
''',
}
FAILS = ["test_lower_bound"]
MESSAGE = "longest request alone needs max(out_lens) steps"
