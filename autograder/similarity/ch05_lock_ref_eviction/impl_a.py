# %% inc_lock_ref
def inc_lock_ref(self, node):
    change = 0
    cur = node
    while cur is not self.root_node:
        size = len(cur.key)
        if not cur.lock_ref:
            self.protected_size_ += size
            self.evictable_size_ -= size
            change -= size
        cur.lock_ref += 1
        self._update_leaf_status(cur)
        cur = cur.parent
    return change
# %% dec_lock_ref
def dec_lock_ref(self, node):
    root = self.root_node
    if node is root:
        return 0
    if node.lock_ref < 1:
        raise ValueError("node is not locked")
    unlocked_tokens = 0
    walker = node
    while True:
        walker.lock_ref -= 1
        if not walker.lock_ref:
            unlocked_tokens += len(walker.key)
        self._update_leaf_status(walker)
        walker = walker.parent
        if walker is root:
            break
    self.evictable_size_ += unlocked_tokens
    self.protected_size_ -= unlocked_tokens
    return unlocked_tokens
# %% evict
import bisect as _bisect


def evict(self, num_tokens):
    if num_tokens < 0:
        raise ValueError("cannot evict a negative number of tokens")
    queue = sorted((self.get_priority(leaf), leaf.id, leaf) for leaf in self.evictable_leaves)
    released = []
    pool = self.token_to_kv_pool_allocator
    while queue and len(released) < num_tokens:
        _, _, leaf = queue.pop(0)
        up = leaf.parent
        if pool is not None:
            pool.free(list(leaf.value))
        released += list(leaf.value)
        self._delete_leaf(leaf)
        if len(up.children) == 0 and up.lock_ref == 0:
            _bisect.insort(queue, (self.get_priority(up), up.id, up))
    return released
# %% cache_finished_req
def cache_finished_req(self, req):
    kv = req.kv_indices
    full = len(kv) // self.page_size * self.page_size
    toks = req.token_ids[:len(kv)]
    already = self.tree_cache.insert(toks[:full], kv[:full])
    dupes = kv[len(req.prefix_indices):already]
    leftover = kv[full:]
    self.token_to_kv_pool_allocator.free(dupes)
    self.token_to_kv_pool_allocator.free(leftover)
    self.tree_cache.dec_lock_ref(req.last_node)
    req.kv_indices = []
    req.prefix_indices = []
    req.last_node = None
    req.num_cached_tokens = 0
    req.num_scheduled_tokens = 0
