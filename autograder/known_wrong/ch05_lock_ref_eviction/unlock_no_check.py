"""Unlocking a node that holds no lock was not refused: its lock_ref goes to -1."""

REPLACE = {
    "dec_lock_ref": '''
def dec_lock_ref(self, node):
    delta = 0
    while node is not self.root_node:
        if node.lock_ref == 1:
            self.evictable_size_ += len(node.key)
            self.protected_size_ -= len(node.key)
            delta += len(node.key)
        node.lock_ref -= 1
        self._update_leaf_status(node)
        node = node.parent
    return delta
''',
}
FAILS = ["test_dec_lock_ref", "test_scheduler"]
MESSAGE = "Pitfall: unlocking a node that holds no lock was not refused"
