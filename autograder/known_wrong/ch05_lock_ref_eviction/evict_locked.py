"""Evicting a locked node: an emptied parent is pushed on the heap without looking at its lock_ref."""

REPLACE = {
    "evict": '''
def evict(self, num_tokens):
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    heap = [(self.get_priority(x), x.id, x) for x in self.evictable_leaves]
    heapq.heapify(heap)
    freed = []
    while len(freed) < num_tokens and heap:
        _, _, x = heapq.heappop(heap)
        parent = x.parent
        if self.token_to_kv_pool_allocator is not None:
            self.token_to_kv_pool_allocator.free(list(x.value))
        freed.extend(x.value)
        self._delete_leaf(x)
        if not parent.children and parent is not self.root_node:
            heapq.heappush(heap, (self.get_priority(parent), parent.id, parent))
    return freed
''',
}
FAILS = ["test_evict", "test_scheduler"]
MESSAGE = "Pitfall: evicting a locked node"
