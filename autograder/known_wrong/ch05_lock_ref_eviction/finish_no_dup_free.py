"""The duplicates were not freed: the request's own copies of tokens the tree already held are never returned."""

REPLACE = {
    "cache_finished_req": '''
def cache_finished_req(self, req):
    tree, pool = self.tree_cache, self.token_to_kv_pool_allocator
    kv = req.kv_indices
    tokens = req.token_ids[:len(kv)]
    aligned = len(kv) - len(kv) % self.page_size
    tree.insert(tokens[:aligned], kv[:aligned])
    pool.free(kv[aligned:])
    tree.dec_lock_ref(req.last_node)
    req.kv_indices, req.prefix_indices, req.last_node = [], [], None
    req.num_cached_tokens = req.num_scheduled_tokens = 0
''',
}
FAILS = ["test_cache_finished_req", "test_scheduler"]
MESSAGE = "Pitfall: the duplicates were not freed"
