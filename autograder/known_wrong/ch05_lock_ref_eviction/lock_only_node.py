"""The lock did not walk up to the root: inc_lock_ref locks only the node it is given."""

REPLACE = {
    "inc_lock_ref": '''
def inc_lock_ref(self, node):
    if node is self.root_node:
        return 0
    delta = 0
    if node.lock_ref == 0:
        self.evictable_size_ -= len(node.key)
        self.protected_size_ += len(node.key)
        delta = -len(node.key)
    node.lock_ref += 1
    self._update_leaf_status(node)
    return delta
''',
}
FAILS = ["test_inc_lock_ref", "test_scheduler"]
MESSAGE = "Pitfall: the lock did not walk up to the root"
