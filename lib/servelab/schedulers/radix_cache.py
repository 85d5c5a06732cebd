"""SGLang's RadixCache: the prefix tree that maps token ids to KV-cache slot indices, written to be read.

It follows `python/sglang/srt/mem_cache/radix_cache.py` of sglang 0.5.23 step for step; how, and the deliberate
differences (none changes what the tree holds or evicts): docs/upstream/sglang_radix.md.

    >>> cache = RadixCache()
    >>> cache.insert([1, 2, 3, 4], [10, 11, 12, 13])   # nothing was cached before
    0
    >>> cache.insert([1, 2, 9], [20, 21, 22])          # [1, 2] was; its KV slots 20, 21 are the caller's to free
    2
    >>> cache.match_prefix([1, 2, 3, 7])[0]            # the first writer's slots win
    [10, 11, 12]
    >>> print(cache.pretty_print())
    root r=1 t=6
      [1, 2] kv=[10, 11] r=0 t=6
        [3] kv=[12] r=0 t=7
          [4] kv=[13] r=0 t=6
        [9] kv=[22] r=0 t=5
    #tokens: 5 (evictable 5, protected 0)
"""

from __future__ import annotations

import heapq
import struct
from array import array
from collections.abc import Callable, Iterable
from typing import Protocol

from servelab.schedulers.radix_nodes import (
    NodeView,
    PackedNode,
    TreeNode,
    _as_key,
    _common_len,
    _ints,
    _show,
    _size,
    _values,
)
from servelab.schedulers.radix_packed import PackedKeys


class KVAllocator(Protocol):
    """Anything with SGLang's `token_to_kv_pool_allocator.free(indices)`."""

    def free(self, indices: list[int]) -> None: ...


# Eviction priorities: the smallest is evicted first (SGLang's evict_policy.py). The node id is NOT part of the
# policy; evict() appends it only so that the heap never compares nodes and its order never depends on set order.
def lru_priority(node: TreeNode) -> tuple:
    return (node.last_access_time,)


def lfu_priority(node: TreeNode) -> tuple:
    # fewest inserts first; among equal counts the least recently used
    return (node.hit_count, node.last_access_time)


EVICTION_POLICIES: dict[str, Callable[[TreeNode], tuple]] = {"lru": lru_priority, "lfu": lfu_priority}


class EvictableLeaves(set):
    """The unlocked nodes without children (a plain set of them), plus a persistent min-heap over them.

    It is the fast form of what `evict` did before: `heapify([(priority(x), x.id, x) for x in leaves])` on each call,
    O(n) for n leaves even for `evict(1)`. Here a node gets a heap entry when it joins the set, and `pop_min` takes
    the smallest (priority, id) in O(log n). Entries are never updated in place (lazy deletion); at pop an entry is
    skipped if its node left the set, and pushed again with the node's priority if that changed since. That is
    exact because priorities only grow (the clock ticks forward, hit counts only rise): an entry's priority is never
    above its node's, so the first entry found current is the smallest (priority, id) among the members.

    Everything else is the set's: `in`, iteration, `discard`, `==` (what chapter 05's `evict` reads). Stale entries
    are dropped by rebuilding the heap from the set once they outnumber the members, amortized O(1) per push.
    `heap_ops` counts the entries pushed, popped, dropped or pushed again: what a call costs, in heap operations.
    """

    def __init__(self, items: Iterable[TreeNode] = (), priority: Callable[[TreeNode], tuple] = lru_priority):
        super().__init__()
        self.priority = priority
        self.heap: list[tuple] = []
        self.heap_ops = 0
        self.update(items)

    def add(self, node: TreeNode) -> None:
        if node in self:
            return  # its entry is still in the heap, at or below its priority
        set.add(self, node)
        heapq.heappush(self.heap, (self.priority(node), node.id, node))
        self.heap_ops += 1
        if len(self.heap) > 2 * len(self) + 64:
            self._rebuild()

    def update(self, *others: Iterable[TreeNode]) -> None:
        for nodes in others:
            for node in nodes:
                self.add(node)

    def __ior__(self, other):
        self.update(other)
        return self

    def symmetric_difference_update(self, other: Iterable[TreeNode]) -> None:
        for node in set(other):
            if node in self:
                self.discard(node)
            else:
                self.add(node)

    def __ixor__(self, other):
        self.symmetric_difference_update(other)
        return self

    def clear(self) -> None:
        set.clear(self)
        self.heap.clear()

    def pop_min(self) -> TreeNode | None:
        """Remove and return the member with the smallest (priority, id), or None if the set is empty."""
        heap = self.heap
        while heap:
            stored, node_id, node = heap[0]
            self.heap_ops += 1
            if node not in self:
                heapq.heappop(heap)
                continue
            current = self.priority(node)
            if current != stored:  # touched since it was pushed: its place is further down
                heapq.heapreplace(heap, (current, node_id, node))
                continue
            heapq.heappop(heap)
            set.discard(self, node)
            return node
        return None

    def _rebuild(self) -> None:
        self.heap = [(self.priority(x), x.id, x) for x in self]
        heapq.heapify(self.heap)


class RadixCache(PackedKeys):
    """The radix tree over KV indices, with SGLang's method names and behaviour.

    page_size: tokens per KV page. Keys are cut to whole pages, edges always hold whole pages, and a child is
        found by its whole first page, so keys that share only part of a page share no node.
    disable: SGLang's `--disable-radix-cache`: match finds nothing, insert stores nothing, evict frees nothing.
    eviction_policy: "lru" (last access time) or "lfu" (insert count, then last access time).
    token_to_kv_pool_allocator: if given, `evict` hands each evicted node's indices to its `free` (as SGLang does).

    Keys are sequences of ints (tuples, lists). A key given as `array('q')`, the form SGLang's requests hold their
    token ids in, is compared in bulk: each edge's int64 bytes (packed once per edge) against the key's own bytes,
    read in place, one memcmp per edge instead of one comparison per token. The nodes such a key adds keep their
    key and value as bytes until something reads them (`PackedNode`). `match_prefix` then returns its indices as an
    `array('q')` (SGLang returns a tensor), and `evict(n, as_array=True)` gives the freed ones so too. The tree, the
    clock, the locks and every length are the same either way.

    >>> cache = RadixCache(page_size=2)
    >>> cache.insert([1, 2, 3, 4, 5], [10, 11, 12, 13, 14])   # the partial last page is not stored
    0
    >>> cache.total_size(), cache.match_prefix([1, 2, 3])
    (4, ([10, 11], TreeNode(id=3, key=[1, 2], value=[10, 11], lock_ref=0, last_access_time=4)))
    """

    def __init__(self, page_size: int = 1, disable: bool = False, eviction_policy: str = "lru",
                 token_to_kv_pool_allocator: KVAllocator | None = None):
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        policy = eviction_policy.lower()
        if policy not in EVICTION_POLICIES:
            raise ValueError(f"eviction_policy must be one of {sorted(EVICTION_POLICIES)}, got {eviction_policy!r}")
        self.page_size = page_size
        self.disable = disable
        self.eviction_policy = policy
        self.get_priority = EVICTION_POLICIES[policy]
        self.token_to_kv_pool_allocator = token_to_kv_pool_allocator
        # the clock and the node ids keep running across reset(): a handle from before it stays distinguishable
        self.clock = 0
        self._next_id = 0
        self._compared_key, self._compared = None, {}   # _match_len's answers for the last key
        self._aligned_from = self._aligned = None       # _page_aligned's last key and its whole pages
        # the bulk path compares bytes itself: only where child_key and _match_len are these (not a learner's)
        self._bulk = type(self).child_key is RadixCache.child_key and type(self)._match_len is RadixCache._match_len
        self._page = struct.Struct(f"={page_size}q")   # one page of int64 tokens, as array('q') holds them
        self.reset()

    # ---- clock, keys -------------------------------------------------------------------------------------

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _new_node(self, cls: type[TreeNode] = TreeNode, **fields) -> TreeNode:
        now = self._tick()  # like SGLang's constructor reading time.monotonic(): later than the call's access time
        self._next_id += 1
        return cls(last_access_time=now, creation_time=now, id=self._next_id, **fields)

    def child_key(self, key: tuple[int, ...], offset: int = 0):
        """The dict key under which the edge starting at key[offset] hangs: a token, or a page as a tuple."""
        if self.page_size == 1:
            return key[offset]
        return key[offset:offset + self.page_size]

    def _match_len(self, edge: tuple[int, ...], key: tuple[int, ...], offset: int) -> int:
        """Leading tokens of key[offset:] equal to edge, rounded down to whole pages.

        A pure function of its arguments, so the answers for the last key are kept: a caller matches a key and
        then inserts the same key, and the insert compares the same long edges again (a 16,000-token prompt
        costs 16,000 object comparisons each time). The key and the edges are immutable tuples, held by the
        memo, so one that is the same object has the same tokens."""
        memo = self._compared if key is self._compared_key else None
        if memo is not None:
            hit = memo.get((id(edge), offset))
            if hit is not None and hit[0] is edge:
                return hit[1]
        n = _common_len(edge, key, offset)
        n -= n % self.page_size
        if type(key) is tuple and type(edge) is tuple:  # a list could change under the memo
            if memo is None:
                self._compared_key, self._compared = key, {}
            self._compared[(id(edge), offset)] = (edge, n)
        return n

    def _page_aligned(self, key: tuple[int, ...]) -> tuple[int, ...]:
        """key cut to whole pages; the same tuple object for the same key (so match then insert share the memo
        of _match_len, and the copy of a long key is made once)."""
        if key is self._aligned_from:
            return self._aligned
        aligned = key[:len(key) - len(key) % self.page_size]
        if type(key) is tuple:  # a list could change under the memo
            self._aligned_from, self._aligned = key, aligned
        return aligned

    # ---- public API ---------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop everything: a fresh root (lock_ref 1, so lock walks stop there and it is never evicted)."""
        self._next_id += 1
        self.root_node = TreeNode(lock_ref=1, id=self._next_id, last_access_time=self.clock,
                                  creation_time=self.clock)
        self.evictable_size_ = 0
        self.protected_size_ = 0
        # unlocked nodes without children: exactly what evict() may take first (SGLang 0.5.23 keeps this set too)
        self.evictable_leaves = EvictableLeaves(priority=self.get_priority)

    def match_prefix(self, key: Iterable[int]) -> tuple[list[int], TreeNode]:
        """Longest cached page-aligned prefix of `key`: (its KV indices, the node where it ends).

        The key is first cut to whole pages. The walk stamps every node it reaches with this call's time, the
        node it stops in included. If the match ends inside an edge, the edge is split there so that the
        returned node ends exactly at the matched length: locking it protects the matched prefix and nothing
        more. A miss (or a key shorter than a page) returns ([], root). Matching therefore mutates the tree.

        >>> cache = RadixCache()
        >>> cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
        0
        >>> indices, node = cache.match_prefix([1, 2, 7])
        >>> indices, node.key, node.children[3].key       # split: [1, 2] above, the old node keeps [3, 4]
        ([10, 11], (1, 2), (3, 4))
        """
        if type(key) is array:
            return self._match_bulk(key)
        key = self._page_aligned(_as_key(key))
        if self.disable or not key:
            return [], self.root_node
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        indices: list[int] = []
        offset = 0
        while offset < len(key):
            child = node.children.get(self.child_key(key, offset))
            if child is None:
                break
            # touched before comparing: if it is split below, the lower part keeps this time although
            # none of its tokens matched (SGLang does the same; it changes LRU order)
            child.last_access_time = now
            n = self._match_len(child.key, key, offset)
            if n < len(child.key):
                node = self._split_node(child, n)
                indices.extend(node.value)
                break
            indices.extend(child.value)
            node = child
            offset += n
        return indices, node

    def insert(self, key: Iterable[int], value: Iterable[int], inserted_len: int = 0) -> int:
        """Store `key` with one KV index per token; return how many leading tokens were already cached.

        Key and value are cut to whole pages. The walk stamps the nodes it passes and splits an edge where the
        key leaves it; what is left becomes ONE new leaf (lock_ref 0, so evictable even under a locked parent).
        Nothing is overwritten: the returned prefix keeps the indices of whoever inserted it first, and the
        caller must free its own indices value[:returned length] that the tree did not take.
        `inserted_len` is SGLang's InsertParams.inserted_len: the prefix this request inserted before (e.g. an
        earlier chunk); nodes inside it do not get their LFU hit_count raised again.

        >>> cache = RadixCache()
        >>> cache.insert([1, 2, 3], [10, 11, 12]), cache.insert([1, 2, 3, 4], [20, 21, 22, 23])
        (0, 3)
        >>> cache.match_prefix([1, 2, 3, 4])[0]
        [10, 11, 12, 23]
        """
        if type(key) is array:
            return self._insert_bulk(key, value, inserted_len)
        key, value = _as_key(key), _as_key(value)
        if len(value) != len(key):
            raise ValueError(f"value must hold one KV index per token: {len(key)} tokens, {len(value)} indices")
        if self.disable:
            return 0
        key = self._page_aligned(key)
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        offset = 0
        while offset < len(key):
            ck = self.child_key(key, offset)
            child = node.children.get(ck)
            if child is None:
                break
            child.last_access_time = now
            n = self._match_len(child.key, key, offset)
            offset += n
            if n < len(child.key):
                # the key leaves this edge mid-way; the rest of the key cannot start with the lower part's first
                # page (that page is where they differ), so the next lookup misses and the leaf goes here
                child = self._split_node(child, n)
            node = child
            if offset > inserted_len:
                node.hit_count += 1
        if offset < len(key):
            # only what the tree keeps is checked and made plain ints: the new edge, not the whole key
            part = key[offset:]
            edge = _ints(part)
            if edge is not part:   # converted: so is the child key it hangs under
                ck = _ints(ck) if type(ck) is tuple else int(ck)
            leaf = self._new_node(key=edge, value=_ints(value[offset:len(key)]), parent=node)
            if len(key) > inserted_len:
                leaf.hit_count += 1
            node.children[ck] = leaf
            self.evictable_size_ += len(leaf.key)
            self._update_leaf_status(node)
            self._update_leaf_status(leaf)
        return offset

    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock the path root -> node (one more request uses it); return the change in evictable size (<= 0).

        Each node on the path gets lock_ref + 1; a node going 0 -> 1 moves its tokens from evictable to
        protected. Locking the root (what a miss returns) does nothing.

        >>> cache = RadixCache()
        >>> cache.insert([1, 2, 3], [10, 11, 12])
        0
        >>> cache.inc_lock_ref(cache.match_prefix([1, 2])[1]), cache.evictable_size(), cache.protected_size()
        (-2, 1, 2)
        """
        if self.disable:
            return 0
        self._check_in_tree(node)
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 0:
                n = _size(node) if type(node) is PackedNode else len(node.key)
                self.evictable_size_ -= n
                self.protected_size_ += n
                delta -= n
            node.lock_ref += 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Undo one inc_lock_ref(node); return the change in evictable size (>= 0).

        Raises ValueError if the node holds no lock (it would go to -1 and corrupt the size counters).
        """
        if self.disable:
            return 0
        self._check_in_tree(node)
        if node is not self.root_node and node.lock_ref < 1:
            raise ValueError(f"dec_lock_ref on a node that holds no lock: {node!r}")
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 1:
                n = _size(node) if type(node) is PackedNode else len(node.key)
                self.evictable_size_ += n
                self.protected_size_ -= n
                delta += n
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        return delta

    def evict(self, num_tokens: int, *, as_array: bool = False) -> list[int] | array:
        """Free at least `num_tokens` tokens if that many are evictable; return the freed KV indices in order.

        Whole unlocked leaves go, smallest policy priority first (LRU: oldest access). A parent left without
        children and unlocked joins the heap with its own priority, so internal nodes are evicted in the same
        call, but only after any older leaf. Whole nodes only: evict(1) on a 5-token leaf frees 5.
        as_array: return the indices as an array('q') (the form of a tree fed array('q') keys, which then never
        makes a Python int per freed index; the allocator, if any, still gets a list per node).

        >>> cache = RadixCache()
        >>> cache.insert([1, 2, 3], [10, 11, 12]), cache.insert([1, 2, 4], [20, 21, 22])
        (0, 2)
        >>> cache.evict(1), cache.evict(2)     # [3] is older than [4]; then [4], then its parent [1, 2]
        ([12], [22, 10, 11])
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be an int >= 0, got {num_tokens!r}")
        if self.disable:
            return array("q") if as_array else []
        # SGLang heapifies all evictable leaves here on every call; the heap of EvictableLeaves persists instead,
        # and a parent that _delete_leaf leaves childless and unlocked joins it (the root's lock_ref 1 keeps it out)
        allocator = self.token_to_kv_pool_allocator
        freed: list[int] | array = array("q") if as_array else []
        while len(freed) < num_tokens:
            x = self.evictable_leaves.pop_min()
            if x is None:
                break
            if type(x) is PackedNode and x._value is None:   # int64 bytes alone: no tuple for a node about to go
                indices = None if as_array and allocator is None else _values(x)
                if as_array:
                    freed.frombytes(x.value_bytes[1])
                else:
                    freed.extend(indices)
            else:
                indices = x.value
                freed.extend(indices)
            if allocator is not None:
                allocator.free(list(indices))
            self._delete_leaf(x)
        return freed

    def evictable_size(self) -> int:
        """Tokens in all unlocked nodes, internal ones included."""
        return self.evictable_size_

    def protected_size(self) -> int:
        """Tokens in locked nodes."""
        return self.protected_size_

    def total_size(self) -> int:
        """Tokens in the tree, counted by walking it (always evictable_size() + protected_size())."""
        total = 0
        stack = [self.root_node]
        while stack:
            node = stack.pop()
            # the indices held (len(node.value)), read from a packed node's bytes while it has no value tuple
            total += len(node.value_bytes[1]) >> 3 if type(node) is PackedNode and node._value is None else len(
                node.value)
            stack.extend(node.children.values())
        return total

    def path_device_indices(self, node: TreeNode) -> list[int]:
        """KV indices of the whole prefix root -> node (SGLang 0.5.23's name)."""
        parts = []
        while node is not self.root_node:
            parts.append(node.value)
            node = node.parent
        return [i for v in reversed(parts) for i in v]

    def snapshot(self) -> list[NodeView]:
        """The tree as plain data, in the printer's order (root first, depth 0): one NodeView per node.

        A copy, so it can be kept while the tree changes (plots of the tree before and after an eviction).

        >>> cache = RadixCache()
        >>> cache.insert([1, 2, 3], [10, 11, 12]), cache.insert([1, 2, 9], [20, 21, 22])
        (0, 2)
        >>> [(v.depth, v.key, v.value, v.evictable_leaf) for v in cache.snapshot()]
        [(0, (), (), False), (1, (1, 2), (10, 11), False), (2, (3,), (12,), True), (2, (9,), (22,), True)]
        """
        return [NodeView(depth=depth, key=node.key, value=node.value, lock_ref=node.lock_ref,
                         last_access_time=node.last_access_time, hit_count=node.hit_count, id=node.id,
                         num_children=len(node.children),
                         evictable_leaf=node is not self.root_node and node.lock_ref == 0 and not node.children)
                for node, depth in self._preorder()]

    def all_values_flatten(self) -> list[int]:
        """Every KV index the tree holds, in the printer's order."""
        return [i for node, _ in self._preorder() for i in node.value]

    def pretty_print(self) -> str:
        """The tree, one node per line: edge tokens (first 10), KV indices, lock_ref, last access time.

        Children appear in insertion order (a split node takes its lower part's place); under LFU each line
        also shows hit_count as h=. The last line is SGLang's `#tokens:` total.
        """
        lines = []
        for node, depth in self._preorder():
            if node is self.root_node:
                text = "root"
            else:
                text = f"{_show(node.key)} kv={_show(node.value)}"
            extra = f" h={node.hit_count}" if self.eviction_policy == "lfu" else ""
            lines.append(f"{'  ' * depth}{text} r={node.lock_ref} t={node.last_access_time}{extra}")
        lines.append(f"#tokens: {self.total_size()} (evictable {self.evictable_size_}, "
                     f"protected {self.protected_size_})")
        return "\n".join(lines)

    # ---- internals ------------------------------------------------------------------------------------------

    def _preorder(self):
        stack = [(self.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            yield node, depth
            stack.extend((c, depth + 1) for c in reversed(list(node.children.values())))

    def _split_node(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut child's edge after split_len tokens; return the NEW node, which is the upper part.

        The original object keeps the lower part, so handles held by running requests (which point at the end
        of their prefix) stay valid. The new node copies lock_ref: every lock through the child also runs
        through the upper part, and unlocking walks through it. Sizes do not change.
        """
        if type(child) is PackedNode:
            return self._split_packed(child, split_len)
        upper = self._new_node(key=child.key[:split_len], value=child.value[:split_len], parent=child.parent,
                               lock_ref=child.lock_ref, hit_count=child.hit_count)
        # same child key as before (the first page is unchanged), so the parent's dict keeps its order
        child.parent.children[self.child_key(child.key)] = upper
        child.key = child.key[split_len:]
        child.value = child.value[split_len:]
        child.parent = upper
        upper.children[self.child_key(child.key)] = child
        return upper

    def _delete_leaf(self, node: TreeNode) -> None:
        parent = node.parent
        del parent.children[self._first_page(node) if type(node) is PackedNode else self.child_key(node.key)]
        self.evictable_size_ -= _size(node)
        self.evictable_leaves.discard(node)
        node.parent = None  # detached: a stale handle to it is refused by inc/dec_lock_ref
        self._update_leaf_status(parent)

    def _update_leaf_status(self, node: TreeNode) -> None:
        if node.lock_ref == 0 and not node.children:
            self.evictable_leaves.add(node)
        else:
            self.evictable_leaves.discard(node)

    def _check_in_tree(self, node: TreeNode) -> None:
        top = node
        while top.parent is not None:
            top = top.parent
        if top is not self.root_node:
            raise ValueError(f"node is not in this tree (evicted, or from before reset()): {node!r}")
