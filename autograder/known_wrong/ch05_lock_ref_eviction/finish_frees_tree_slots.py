"""Freed slots that the tree owns: everything up to the returned prefix length goes back to the pool, the locked
prefix included."""

REPLACE = {
    "cache_finished_req": '''
def cache_finished_req(self, req):
    tree, pool = self.tree_cache, self.token_to_kv_pool_allocator
    kv = req.kv_indices
    tokens = req.token_ids[:len(kv)]
    aligned = len(kv) - len(kv) % self.page_size
    new_prefix_len = tree.insert(tokens[:aligned], kv[:aligned])
    pool.free(kv[:new_prefix_len])
    pool.free(kv[aligned:])
    tree.dec_lock_ref(req.last_node)
    req.kv_indices, req.prefix_indices, req.last_node = [], [], None
    req.num_cached_tokens = req.num_scheduled_tokens = 0
''',
}
FAILS = ["test_cache_finished_req", "test_scheduler"]
MESSAGE = "Pitfall: freed slots that the tree owns"
