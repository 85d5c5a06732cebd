# %% child_key
def child_key(self, key, offset=0):
    page = key[offset:offset + self.page_size]
    if self.page_size == 1:
        return page[0]
    return tuple(page)
# %% match_len
def _match_len(self, edge, key, offset):
    n = min(len(edge), len(key) - offset)
    lo, hi = 0, n                    # binary search on the longest equal prefix length
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tuple(edge[:mid]) == tuple(key[offset:offset + mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo // self.page_size * self.page_size
# %% split_node
def _split_node(self, child, split_len):
    """Insert a new node above child holding the first split_len tokens of its edge."""
    k, v = child.key, child.value
    mid = self._new_node(key=k[:split_len], value=v[:split_len], parent=child.parent, lock_ref=child.lock_ref)
    siblings = child.parent.children
    siblings[self.child_key(k)] = mid
    child.parent = mid
    child.key, child.value = k[split_len:], v[split_len:]
    mid.children[self.child_key(k, split_len)] = child
    return mid
# %% match_prefix
def match_prefix(self, key):
    key = self._page_aligned(tuple(key))
    if not key:
        return [], self.root_node
    now = self._tick()
    self.root_node.last_access_time = now
    here, off, slots = self.root_node, 0, []
    edge = here.children.get(self.child_key(key, 0))
    while edge is not None:
        edge.last_access_time = now
        got = self._match_len(edge.key, key, off)
        partial = got < len(edge.key)
        here = self._split_node(edge, got) if partial else edge
        slots += here.value
        off += got
        edge = None if partial or off >= len(key) else here.children.get(self.child_key(key, off))
    return slots, here
# %% insert
def insert(self, key, value):
    key, value = tuple(key), tuple(value)
    if len(key) - len(value):
        raise ValueError("need exactly one KV slot per token")
    key = self._page_aligned(key)
    now = self._tick()
    self.root_node.last_access_time = now
    here, off = self.root_node, 0
    while off < len(key):
        ck = self.child_key(key, off)
        if ck not in here.children:
            break
        edge = here.children[ck]
        edge.last_access_time = now
        got = self._match_len(edge.key, key, off)
        here, off = (edge if got == len(edge.key) else self._split_node(edge, got)), off + got
    else:
        return off                   # the whole key was in the tree already
    fresh = self._new_node(parent=here, value=value[off:len(key)], key=key[off:])
    here.children[ck] = fresh
    self.evictable_size_ += len(key) - off
    self._update_leaf_status(here)
    self._update_leaf_status(fresh)
    return off
