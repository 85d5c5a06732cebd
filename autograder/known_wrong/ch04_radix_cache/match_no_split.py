"""No split when a match ends mid-edge: match_prefix returns the child it stopped in and the matched part of its
value."""

REPLACE = {
    "match_prefix": '''
def match_prefix(self, key):
    key = self._page_aligned(tuple(key))
    if not key:
        return [], self.root_node
    now = self._tick()
    node = self.root_node
    node.last_access_time = now
    values, offset = [], 0
    while offset < len(key):
        child = node.children.get(self.child_key(key, offset))
        if child is None:
            break
        child.last_access_time = now
        n = self._match_len(child.key, key, offset)
        values.extend(child.value[:n])
        node = child
        if n < len(child.key):
            break
        offset += n
    return values, node
''',
}
FAILS = ["test_match_prefix", "test_radix_cache"]
MESSAGE = "Pitfall: no split when a match ends mid-edge"
