# %% inc_lock_ref
def inc_lock_ref(self, node):
    newly_locked = []
    while node != self.root_node:
        if node.lock_ref == 0:
            newly_locked.append(len(node.key))
        node.lock_ref = node.lock_ref + 1
        self._update_leaf_status(node)
        node = node.parent
    moved = sum(newly_locked)
    self.evictable_size_ = self.evictable_size_ - moved
    self.protected_size_ = self.protected_size_ + moved
    return 0 - moved
# %% dec_lock_ref
def dec_lock_ref(self, node):
    at_root = node is self.root_node
    if not at_root and node.lock_ref <= 0:
        raise ValueError("lock_ref would go negative")
    gained = 0
    for _ in iter(int, 1):
        if node is self.root_node:
            break
        last_lock = node.lock_ref == 1
        node.lock_ref = node.lock_ref - 1
        if last_lock:
            gained = gained + len(node.key)
            self.protected_size_ = self.protected_size_ - len(node.key)
            self.evictable_size_ = self.evictable_size_ + len(node.key)
        self._update_leaf_status(node)
        node = node.parent
    return gained
# %% evict
def evict(self, num_tokens):
    import heapq
    if num_tokens < 0:
        raise ValueError("evict: num_tokens must not be negative")

    def entry(n):
        return self.get_priority(n), n.id, n

    candidates = list(map(entry, self.evictable_leaves))
    heapq.heapify(candidates)
    evicted_slots = []
    while candidates and len(evicted_slots) < num_tokens:
        *_, leaf = heapq.heappop(candidates)
        p = leaf.parent
        values = list(leaf.value)
        allocator = self.token_to_kv_pool_allocator
        if allocator is not None:
            allocator.free(values)
        evicted_slots = evicted_slots + values
        self._delete_leaf(leaf)
        emptied = len(p.children) == 0
        if emptied and p.lock_ref == 0:
            heapq.heappush(candidates, entry(p))
    return evicted_slots
# %% cache_finished_req
def cache_finished_req(self, req):
    total = len(req.kv_indices)
    whole_pages = (total // self.page_size) * self.page_size
    new_prefix = self.tree_cache.insert(req.token_ids[:whole_pages], req.kv_indices[:whole_pages])
    duplicate = req.kv_indices[len(req.prefix_indices):new_prefix]
    self.token_to_kv_pool_allocator.free(duplicate)
    self.token_to_kv_pool_allocator.free(req.kv_indices[whole_pages:total])
    self.tree_cache.dec_lock_ref(req.last_node)
    req.last_node = None
    req.kv_indices = list()
    req.prefix_indices = list()
    req.num_scheduled_tokens = req.num_cached_tokens = 0
