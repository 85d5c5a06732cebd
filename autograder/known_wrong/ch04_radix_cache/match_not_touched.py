"""The nodes a match walks were not stamped with the call's time: only the node it ends at is refreshed."""

REPLACE = {
    "match_prefix": '''
def match_prefix(self, key):
    key = self._page_aligned(tuple(key))
    if not key:
        return [], self.root_node
    now = self._tick()
    node = self.root_node
    values, offset = [], 0
    while offset < len(key):
        child = node.children.get(self.child_key(key, offset))
        if child is None:
            break
        n = self._match_len(child.key, key, offset)
        if n < len(child.key):
            node = self._split_node(child, n)
            values.extend(node.value)
            break
        values.extend(child.value)
        node = child
        offset += n
    node.last_access_time = now
    return values, node
''',
}
FAILS = ["test_match_prefix", "test_radix_cache"]
MESSAGE = "Pitfall: the nodes a match walks were not stamped with the call's time"
