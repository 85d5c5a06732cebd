"""An emptied parent was evicted at once, walking up the tree, instead of joining the heap with its own time."""

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
        while True:
            parent = x.parent
            if self.token_to_kv_pool_allocator is not None:
                self.token_to_kv_pool_allocator.free(list(x.value))
            freed.extend(x.value)
            self._delete_leaf(x)
            if parent.children or parent.lock_ref > 0 or len(freed) >= num_tokens:
                break
            x = parent                       # the emptied parent goes right away
    return freed
''',
}
FAILS = ["test_evict", "test_scheduler"]
MESSAGE = "Pitfall: an emptied parent was evicted at once"
