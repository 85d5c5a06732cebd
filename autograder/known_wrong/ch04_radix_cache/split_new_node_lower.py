"""The new node took the lower part of the split: the original node keeps the upper part, so a handle that ended a
request's prefix now ends in the middle of it."""

REPLACE = {
    "split_node": '''
def _split_node(self, child, split_len):
    lower = self._new_node(key=child.key[split_len:], value=child.value[split_len:], parent=child,
                           lock_ref=child.lock_ref)
    lower.children = child.children
    for grandchild in lower.children.values():
        grandchild.parent = lower
    child.key = child.key[:split_len]
    child.value = child.value[:split_len]
    child.children = {self.child_key(lower.key): lower}
    self._update_leaf_status(child)
    self._update_leaf_status(lower)
    return child
''',
}
FAILS = ["test_split_node", "test_radix_cache"]
MESSAGE = "Pitfall: the new node took the lower part of the split"
