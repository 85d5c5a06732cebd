"""Sizes double-counted: insert adds the whole key to evictable_size_, the part that was cached already included."""

REPLACE = {
    "insert": '''
def insert(self, key, value):
    key, value = tuple(key), tuple(value)
    if len(value) != len(key):
        raise ValueError("one KV index per token")
    key = self._page_aligned(key)
    value = value[:len(key)]
    now = self._tick()
    node = self.root_node
    node.last_access_time = now
    offset = 0
    while offset < len(key):
        child = node.children.get(self.child_key(key, offset))
        if child is None:
            break
        child.last_access_time = now
        n = self._match_len(child.key, key, offset)
        offset += n
        if n < len(child.key):
            child = self._split_node(child, n)
        node = child
    if offset < len(key):
        leaf = self._new_node(key=key[offset:], value=value[offset:], parent=node)
        node.children[self.child_key(leaf.key)] = leaf
        self.evictable_size_ += len(key)
        self._update_leaf_status(node)
        self._update_leaf_status(leaf)
    return offset
''',
}
FAILS = ["test_insert", "test_radix_cache"]
MESSAGE = "Pitfall: sizes double-counted"
