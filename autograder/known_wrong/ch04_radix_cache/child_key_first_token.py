"""Page-size keys compared by first token only: child_key returns key[offset] whatever the page size."""

REPLACE = {
    "child_key": '''
def child_key(self, key, offset=0):
    return key[offset]
''',
}
FAILS = ["test_child_key", "test_radix_cache"]
MESSAGE = "Pitfall: page-size keys compared by first token only"
