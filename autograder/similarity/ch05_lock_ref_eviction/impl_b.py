# %% inc_lock_ref
def inc_lock_ref(self, node):
    def lock(n):
        freed = 0
        if n.lock_ref == 0:
            freed = len(n.key)
            self.evictable_size_ -= freed
            self.protected_size_ += freed
        n.lock_ref += 1
        self._update_leaf_status(n)
        return freed

    total = 0
    while node is not self.root_node:
        total -= lock(node)
        node = node.parent
    return total
# %% dec_lock_ref
def dec_lock_ref(self, node):
    root = self.root_node
    if node is not root and node.lock_ref < 1:
        raise ValueError(f"unbalanced dec_lock_ref: lock_ref is {node.lock_ref}")

    def unlock(n):
        back = len(n.key) if n.lock_ref == 1 else 0
        self.evictable_size_ += back
        self.protected_size_ -= back
        n.lock_ref -= 1
        self._update_leaf_status(n)
        return back

    gained = 0
    for _ in range(1 << 62):
        if node is root:
            break
        gained += unlock(node)
        node = node.parent
    return gained
# %% evict
import heapq as _heapq


def evict(self, num_tokens):
    if num_tokens < 0:
        raise ValueError(f"negative num_tokens: {num_tokens}")
    frontier = []
    for leaf in self.evictable_leaves:
        _heapq.heappush(frontier, (self.get_priority(leaf), leaf.id, leaf))
    out = []
    alloc = self.token_to_kv_pool_allocator
    while len(out) < num_tokens:
        if not frontier:
            break
        victim = _heapq.heappop(frontier)[2]
        parent = victim.parent
        slots = list(victim.value)
        if alloc is not None:
            alloc.free(slots)
        out.extend(slots)
        self._delete_leaf(victim)
        if parent.lock_ref == 0 and not parent.children:
            _heapq.heappush(frontier, (self.get_priority(parent), parent.id, parent))
    return out
# %% cache_finished_req
def cache_finished_req(self, req):
    cache = self.tree_cache
    allocator = self.token_to_kv_pool_allocator
    n = len(req.kv_indices)
    cut = n - n % self.page_size
    owned = len(req.prefix_indices)
    cached_upto = cache.insert(req.token_ids[:n][:cut], req.kv_indices[:cut])
    for lo, hi in ((owned, cached_upto), (cut, n)):
        allocator.free(req.kv_indices[lo:hi])
    cache.dec_lock_ref(req.last_node)
    for attr, empty in (("kv_indices", []), ("prefix_indices", []), ("last_node", None),
                        ("num_cached_tokens", 0), ("num_scheduled_tokens", 0)):
        setattr(req, attr, empty)
