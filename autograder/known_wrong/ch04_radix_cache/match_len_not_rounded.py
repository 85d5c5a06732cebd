"""The common length was not rounded down to whole pages: _match_len returns the raw count of equal tokens."""

REPLACE = {
    "match_len": '''
def _match_len(self, edge, key, offset):
    n, limit = 0, min(len(edge), len(key) - offset)
    while n < limit and edge[n] == key[offset + n]:
        n += 1
    return n
''',
}
FAILS = ["test_match_len", "test_radix_cache"]
MESSAGE = "Pitfall: the common length was not rounded down to whole pages"
