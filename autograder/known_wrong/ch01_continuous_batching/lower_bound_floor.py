"""Floor in the bound: round sum(out_lens) / B up (ceil), not down."""

REPLACE = {
    "lower_bound": '''
def lower_bound(out_lens, B):
    if not out_lens:
        return 0
    return max(max(out_lens), sum(out_lens) // B)
''',
}
FAILS = ["test_lower_bound"]
MESSAGE = "round sum(out_lens) / B up"
