"""The population max: E[max of B draws] is not the longest possible length."""

REPLACE = {
    "expected_max": '''
def expected_max(pmf, B):
    return max(k for k, p in enumerate(pmf, start=1) if p > 0)
''',
}
FAILS = ["test_expected_max"]
MESSAGE = "not the longest possible length"
