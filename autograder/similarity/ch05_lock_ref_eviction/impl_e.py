# %% inc_lock_ref
def inc_lock_ref(self, node):
    chain = []
    n = node
    while n is not self.root_node:
        chain.append(n)
        n = n.parent
    delta = 0
    for n in chain:
        if n.lock_ref == 0:
            k = len(n.key)
            self.evictable_size_, self.protected_size_ = self.evictable_size_ - k, self.protected_size_ + k
            delta = delta - k
        n.lock_ref += 1
        self._update_leaf_status(n)
    return delta
# %% dec_lock_ref
def dec_lock_ref(self, node):
    if node is self.root_node:
        return 0
    if node.lock_ref < 1:
        raise ValueError(f"{node!r} has lock_ref {node.lock_ref}; nothing to release")
    delta = 0
    n = node
    while n is not self.root_node:
        n.lock_ref -= 1
        if n.lock_ref == 0:            # was the last lock
            k = len(n.key)
            self.evictable_size_, self.protected_size_ = self.evictable_size_ + k, self.protected_size_ - k
            delta += k
        self._update_leaf_status(n)
        n = n.parent
    return delta
# %% evict
def evict(self, num_tokens):
    if num_tokens < 0:
        raise ValueError("num_tokens must be non-negative")
    import heapq
    ranked = {}
    keys = []
    for x in self.evictable_leaves:
        k = (self.get_priority(x), x.id)
        ranked[k] = x
        keys.append(k)
    heapq.heapify(keys)
    freed = []
    while keys:
        if len(freed) >= num_tokens:
            break
        x = ranked.pop(heapq.heappop(keys))
        up = x.parent
        pool = self.token_to_kv_pool_allocator
        if pool is not None:
            pool.free(list(x.value))
        freed.extend(x.value)
        self._delete_leaf(x)
        if up.lock_ref == 0 and len(up.children) == 0:
            k = (self.get_priority(up), up.id)
            ranked[k] = up
            heapq.heappush(keys, k)
    return freed
# %% cache_finished_req
def cache_finished_req(self, req):
    indices = req.kv_indices
    size = self.page_size
    aligned = size * (len(indices) // size)
    tree = self.tree_cache
    shared_len = tree.insert(list(req.token_ids[:aligned]), list(indices[:aligned]))
    to_free = [indices[len(req.prefix_indices):shared_len], indices[aligned:]]
    for part in to_free:
        self.token_to_kv_pool_allocator.free(part)
    tree.dec_lock_ref(req.last_node)
    req.__dict__.update(kv_indices=[], prefix_indices=[], last_node=None, num_cached_tokens=0,
                        num_scheduled_tokens=0)
