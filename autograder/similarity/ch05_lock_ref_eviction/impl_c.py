# %% inc_lock_ref
def _ancestors(cache, node):
    """node, its parent, ... up to but not including the root."""
    while node is not cache.root_node:
        yield node
        node = node.parent


def inc_lock_ref(self, node):
    total = 0
    for n in _ancestors(self, node):
        if n.lock_ref == 0:
            total += len(n.key)
        n.lock_ref += 1
        self._update_leaf_status(n)
    self.evictable_size_ -= total
    self.protected_size_ += total
    return -total
# %% dec_lock_ref
def _path_up(cache, node):
    path = []
    while node is not cache.root_node:
        path.append(node)
        node = node.parent
    return path


def dec_lock_ref(self, node):
    if node is not self.root_node and node.lock_ref < 1:
        raise ValueError("dec_lock_ref without a matching inc_lock_ref")
    released = 0
    for n in _path_up(self, node):
        released += len(n.key) if n.lock_ref == 1 else 0
        n.lock_ref -= 1
        self._update_leaf_status(n)
    self.protected_size_ -= released
    self.evictable_size_ += released
    return released
# %% evict
import heapq as _hq


class _LeafQueue:
    def __init__(self, cache):
        self.cache = cache
        self.items = [(cache.get_priority(x), x.id, x) for x in cache.evictable_leaves]
        _hq.heapify(self.items)

    def __bool__(self):
        return bool(self.items)

    def pop(self):
        return _hq.heappop(self.items)[-1]

    def push(self, node):
        _hq.heappush(self.items, (self.cache.get_priority(node), node.id, node))


def evict(self, num_tokens):
    if num_tokens < 0:
        raise ValueError("num_tokens < 0")
    q = _LeafQueue(self)
    freed = []
    while q and len(freed) < num_tokens:
        leaf = q.pop()
        above = leaf.parent
        if self.token_to_kv_pool_allocator is not None:
            self.token_to_kv_pool_allocator.free(list(leaf.value))
        freed.extend(leaf.value)
        self._delete_leaf(leaf)
        if not above.children and not above.lock_ref:
            q.push(above)
    return freed
# %% cache_finished_req
def cache_finished_req(self, req):
    kv = list(req.kv_indices)
    page_tail = len(kv) % self.page_size
    body = len(kv) - page_tail
    prompt_and_out = req.token_ids[:len(kv)]
    inserted_before = self.tree_cache.insert(prompt_and_out[:body], kv[:body])
    mine = len(req.prefix_indices)
    self.token_to_kv_pool_allocator.free(kv[mine:inserted_before])   # another request cached these already
    self.token_to_kv_pool_allocator.free(kv[body:])                  # the partial page the tree does not take
    self.tree_cache.dec_lock_ref(req.last_node)
    req.kv_indices, req.prefix_indices = [], []
    req.last_node = None
    req.num_cached_tokens, req.num_scheduled_tokens = 0, 0
