"""Insert accepted a value whose length differs from the key's: no ValueError, the tree stores what fits."""

REPLACE = {
    "insert": '''
def insert(self, key, value):
    key, value = tuple(key), tuple(value)
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
        self.evictable_size_ += len(leaf.key)
        self._update_leaf_status(node)
        self._update_leaf_status(leaf)
    return offset
''',
}
FAILS = ["test_insert", "test_radix_cache"]
MESSAGE = "Pitfall: insert accepted a value whose length differs from the key's"
