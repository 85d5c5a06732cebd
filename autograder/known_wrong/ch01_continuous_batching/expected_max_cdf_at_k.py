"""F(k) for F(k - 1): P(max >= k) = 1 - F(k - 1)^B uses the CDF just below k."""

REPLACE = {
    "expected_max": '''
def expected_max(pmf, B):
    total, cdf = 0.0, 0.0
    for p in pmf:
        cdf += p  # now F(k), one step too far
        total += 1.0 - cdf**B
    return total
''',
}
FAILS = ["test_expected_max"]
MESSAGE = "just below k"
