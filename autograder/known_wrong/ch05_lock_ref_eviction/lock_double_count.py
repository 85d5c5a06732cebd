"""Sizes double-counted: inc_lock_ref moves a node's tokens to protected on every lock, not only on 0 -> 1."""

REPLACE = {
    "inc_lock_ref": '''
def inc_lock_ref(self, node):
    delta = 0
    while node is not self.root_node:
        self.evictable_size_ -= len(node.key)
        self.protected_size_ += len(node.key)
        delta -= len(node.key)
        node.lock_ref += 1
        self._update_leaf_status(node)
        node = node.parent
    return delta
''',
}
FAILS = ["test_inc_lock_ref", "test_scheduler"]
MESSAGE = "Pitfall: sizes double-counted"
