# %% child_key
from itertools import islice as _islice


def child_key(self, key, offset=0):
    window = tuple(_islice(key, offset, offset + self.page_size))
    return window[0] if self.page_size == 1 else window
# %% match_len
def _match_len(self, edge, key, offset):
    common = 0
    for a, b in zip(edge, key[offset:]):
        if a != b:
            break
        common += 1
    return (common // self.page_size) * self.page_size
# %% split_node
def _split_node(self, child, split_len):
    parent = child.parent
    head_key, tail_key = child.key[:split_len], child.key[split_len:]
    head_val, tail_val = child.value[:split_len], child.value[split_len:]
    top = self._new_node(key=head_key, value=head_val, parent=parent, lock_ref=child.lock_ref)
    parent.children[self.child_key(child.key)] = top
    child.key, child.value, child.parent = tail_key, tail_val, top
    top.children[self.child_key(tail_key)] = child
    return top
# %% match_prefix
def match_prefix(self, key):
    key = self._page_aligned(tuple(key))
    if len(key) == 0:
        return [], self.root_node
    stamp = self._tick()
    self.root_node.last_access_time = stamp
    cur, pos, found = self.root_node, 0, []
    for _ in range(len(key)):                 # at most one edge per token
        nxt = cur.children.get(self.child_key(key, pos)) if pos < len(key) else None
        if nxt is None:
            break
        nxt.last_access_time = stamp
        m = self._match_len(nxt.key, key, pos)
        cur = nxt if m == len(nxt.key) else self._split_node(nxt, m)
        found.extend(cur.value)
        if cur is not nxt:                    # the key left this edge midway
            break
        pos += m
    return found, cur
# %% insert
def _hang_leaf(cache, parent, key, value):
    leaf = cache._new_node(key=key, value=value, parent=parent)
    parent.children[cache.child_key(key)] = leaf
    cache.evictable_size_ += len(key)
    cache._update_leaf_status(parent)
    cache._update_leaf_status(leaf)


def insert(self, key, value):
    key = tuple(key)
    value = tuple(value)
    if len(key) != len(value):
        raise ValueError("key and value lengths differ")
    key = self._page_aligned(key)
    stamp = self._tick()
    here = self.root_node
    here.last_access_time = stamp
    pos = 0
    while True:
        try:
            below = here.children[self.child_key(key, pos)] if pos < len(key) else None
        except KeyError:
            below = None
        if below is None:
            break
        below.last_access_time = stamp
        m = self._match_len(below.key, key, pos)
        pos += m
        here = below if m == len(below.key) else self._split_node(below, m)
    if len(key) > pos:
        _hang_leaf(self, here, key[pos:], value[pos:len(key)])
    return pos
