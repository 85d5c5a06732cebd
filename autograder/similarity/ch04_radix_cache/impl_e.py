# %% child_key
def child_key(self, key, offset=0):
    chunk = key[offset:][:self.page_size]
    return tuple(chunk) if self.page_size > 1 else chunk[0]
# %% match_len
import numpy as _np


def _match_len(self, edge, key, offset):
    span = min(len(edge), len(key) - offset)
    if span <= 0:
        return 0
    a = _np.asarray(edge[:span], dtype=object)
    b = _np.asarray(key[offset:offset + span], dtype=object)
    diff = _np.flatnonzero(a != b)
    same = int(diff[0]) if diff.size else span
    return same - same % self.page_size
# %% split_node
def _split_node(self, child, split_len):
    def cut(seq):
        return seq[:split_len], seq[split_len:]

    (k_top, k_rest), (v_top, v_rest) = cut(child.key), cut(child.value)
    node = self._new_node(key=k_top, value=v_top, parent=child.parent, lock_ref=child.lock_ref)
    node.parent.children[self.child_key(k_top + k_rest)] = node
    child.key, child.value = k_rest, v_rest
    node.children[self.child_key(k_rest)] = child
    child.parent = node
    return node
# %% match_prefix
class _Walk:
    """A walk down the tree that stamps every edge it enters."""

    def __init__(self, cache, key, stamp):
        self.cache, self.key, self.stamp = cache, key, stamp
        self.node, self.offset, self.slots = cache.root_node, 0, []

    def step(self):
        """Advance one edge; False when the walk is over."""
        c = self.cache
        if self.offset >= len(self.key):
            return False
        edge = self.node.children.get(c.child_key(self.key, self.offset))
        if edge is None:
            return False
        edge.last_access_time = self.stamp
        n = c._match_len(edge.key, self.key, self.offset)
        if n < len(edge.key):
            self.node = c._split_node(edge, n)
            self.slots.extend(self.node.value)
            return False
        self.slots.extend(edge.value)
        self.node, self.offset = edge, self.offset + n
        return True


def match_prefix(self, key):
    key = self._page_aligned(tuple(key))
    if not key:
        return [], self.root_node
    walk = _Walk(self, key, self._tick())
    self.root_node.last_access_time = walk.stamp
    while walk.step():
        pass
    return walk.slots, walk.node
# %% insert
def insert(self, key, value):
    key, value = tuple(key), tuple(value)
    if len(value) != len(key):
        raise ValueError(f"insert: {len(key)} tokens vs {len(value)} slots")
    key = self._page_aligned(key)
    ts = self._tick()
    self.root_node.last_access_time = ts
    node, covered = self.root_node, 0
    edge = node.children.get(self.child_key(key, 0)) if key else None
    while edge is not None:
        edge.last_access_time = ts
        n = self._match_len(edge.key, key, covered)
        covered += n
        node = edge if n == len(edge.key) else self._split_node(edge, n)
        edge = node.children.get(self.child_key(key, covered)) if covered < len(key) else None
    if covered == len(key):
        return covered
    fresh_len = len(key) - covered
    node.children[self.child_key(key, covered)] = tail = self._new_node(
        key=key[covered:], value=value[covered:len(key)], parent=node)
    self.evictable_size_ = self.evictable_size_ + fresh_len
    list(map(self._update_leaf_status, (node, tail)))
    return covered
