"""Lock_ref not copied on a split: the new upper node starts with lock_ref 0."""

REPLACE = {
    "split_node": '''
def _split_node(self, child, split_len):
    upper = self._new_node(key=child.key[:split_len], value=child.value[:split_len], parent=child.parent)
    child.parent.children[self.child_key(child.key)] = upper
    child.key = child.key[split_len:]
    child.value = child.value[split_len:]
    child.parent = upper
    upper.children[self.child_key(child.key)] = child
    return upper
''',
}
FAILS = ["test_split_node", "test_radix_cache"]
MESSAGE = "Pitfall: lock_ref not copied on a split"
