"""Utilization per request: divide by the B * total_steps slot-steps on offer, not B * len(out_lens)."""

REPLACE = {
    "utilization": '''
def utilization(out_lens, B, total_steps):
    if not out_lens:
        return 0.0
    return sum(out_lens) / (B * len(out_lens))
''',
}
FAILS = ["test_utilization"]
MESSAGE = "not B * len(out_lens)"
