# %% child_key
def child_key(self, key, offset=0):
    ps = self.page_size
    return key[offset] if ps == 1 else tuple(key[i] for i in range(offset, min(offset + ps, len(key))))
# %% match_len
def _match_len(self, edge, key, offset):
    upto = min(len(edge), len(key) - offset)
    # first index where they differ, or upto
    first_diff = next((i for i in range(upto) if edge[i] != key[offset + i]), upto)
    return first_diff - first_diff % self.page_size
# %% split_node
def _split_node(self, child, split_len):
    fields = {"key": child.key, "value": child.value}
    head = {name: seq[:split_len] for name, seq in fields.items()}
    above = self._new_node(parent=child.parent, lock_ref=child.lock_ref, **head)
    child.parent.children[self.child_key(fields["key"])] = above
    for name, seq in fields.items():
        setattr(child, name, seq[split_len:])
    child.parent = above
    above.children[self.child_key(child.key)] = child
    return above
# %% match_prefix
def match_prefix(self, key):
    tokens = self._page_aligned(tuple(key))
    if not tokens:
        return [], self.root_node
    t = self._tick()
    self.root_node.last_access_time = t

    def follow(edge, offset):
        """Walk on from an edge whose first page matches tokens[offset:]."""
        edge.last_access_time = t
        k = self._match_len(edge.key, tokens, offset)
        if k == len(edge.key):
            after = offset + k
            nxt = edge.children.get(self.child_key(tokens, after)) if after < len(tokens) else None
            rest, end = follow(nxt, after) if nxt is not None else ([], edge)
            return list(edge.value) + rest, end
        top = self._split_node(edge, k)
        return list(top.value), top

    first = self.root_node.children.get(self.child_key(tokens, 0))
    if first is None:
        return [], self.root_node
    import sys
    if len(tokens) + 100 > sys.getrecursionlimit():
        sys.setrecursionlimit(len(tokens) + 1000)
    return follow(first, 0)
# %% insert
def insert(self, key, value):
    if len(value) != len(key):
        raise ValueError(f"{len(key)} tokens but {len(value)} KV indices")
    key = self._page_aligned(tuple(key))
    value = tuple(value)[:len(key)]
    t = self._tick()
    self.root_node.last_access_time = t

    def place(node, offset):
        """(node to hang the rest under, tokens of key already in the tree) for key[offset:] below node."""
        if offset == len(key):
            return node, offset
        child = node.children.get(self.child_key(key, offset))
        if child is None:
            return node, offset
        child.last_access_time = t
        shared = self._match_len(child.key, key, offset)
        if shared < len(child.key):
            return self._split_node(child, shared), offset + shared
        return place(child, offset + shared)

    import sys
    if len(key) + 100 > sys.getrecursionlimit():
        sys.setrecursionlimit(len(key) + 1000)
    anchor, done = place(self.root_node, 0)
    if done < len(key):
        leaf = self._new_node(key=key[done:], value=value[done:], parent=anchor)
        anchor.children[self.child_key(leaf.key)] = leaf
        self.evictable_size_ += len(key) - done
        for n in (anchor, leaf):
            self._update_leaf_status(n)
    return done
