"""RadixCache's walks for keys given as array('q'), the form SGLang's requests hold token ids in: the same
tree, clock, locks and lengths as with tuples, comparing bytes instead of tokens.

`PackedKeys` is a base class of `radix_cache.RadixCache`; `match_prefix` and `insert` hand it an array key. Each
edge's int64 bytes (packed once per edge) are compared with the key's own bytes, read in place through a
memoryview, by one `bytes.startswith` (a memcmp) per edge, bisecting on halving slices only where they differ.
The nodes it adds are PackedNodes (bytes until read), and the matched indices come back as array('q'), so a
caller in this form never makes a Python int per token. Why: a 16,000-token shared prompt costs 16,000 object
comparisons per walk as tuples (bench/results.md, "Against the peers").

    >>> from servelab.schedulers.radix_cache import RadixCache
    >>> cache = RadixCache()
    >>> cache.insert(array("q", [1, 2, 3, 4]), array("q", [10, 11, 12, 13]))
    0
    >>> cache.match_prefix(array("q", [1, 2, 3, 9]))[0]
    array('q', [10, 11, 12])
"""

from __future__ import annotations

from array import array

from servelab.schedulers.radix_nodes import (
    PackedNode,
    TreeNode,
    _as_key,
    _common_len,
    _cut_edge,
    _ints,
    _key_bytes,
    _size,
    _value_bytes,
)


class PackedKeys:
    """The array-key walks of RadixCache (a base class: it uses the cache's tree, clock and page size)."""

    # The key is read through a memoryview of its int64 bytes: each edge is compared with the key's slice of the
    # same length by bytes.startswith (a memcmp), and neither the key nor the edge is copied for it.

    def _match_bulk(self, key: array) -> tuple[array, TreeNode]:
        """match_prefix for a key given as array('q'): the same walk, stamps and splits; the indices as array('q')."""
        if key.typecode != "q":
            raise ValueError(f"an array key must have typecode 'q' (int64), got {key.typecode!r}")
        if not self._bulk:   # a subclass with its own child_key or _match_len: let it compare, as tuples
            indices, node = self.match_prefix(key.tolist())
            return array("q", indices), node
        page = self.page_size
        size = len(key) - len(key) % page
        if self.disable or not size:
            return array("q"), self.root_node
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        parts: list[bytes] = []
        offset = 0
        view = memoryview(key).cast("B")
        try:
            while offset < size:
                child = node.children.get(key[offset] if page == 1 else self._page.unpack_from(view, 8 * offset))
                if child is None:
                    break
                child.last_access_time = now   # touched before comparing, as match_prefix does
                edge = _key_bytes(child)
                start = 8 * offset
                if edge is not None and start + len(edge) <= 8 * size and edge.startswith(
                        view[start:start + len(edge)]):   # the whole edge: the usual case
                    n = len(edge) >> 3
                else:
                    n = self._bulk_match_len(child, edge, key, view, offset, size)
                    if n < _size(child):
                        node = self._split_node(child, n)
                        parts.append(_value_bytes(node))
                        break
                parts.append(_value_bytes(child))
                node = child
                offset += n
        finally:
            view.release()   # the array may be resized again
        indices = array("q")
        indices.frombytes(b"".join(parts))
        return indices, node

    def _insert_bulk(self, key: array, value, inserted_len: int) -> int:
        """insert for a key given as array('q'); value: array('q') or a sequence of ints, one per token."""
        if key.typecode != "q":
            raise ValueError(f"an array key must have typecode 'q' (int64), got {key.typecode!r}")
        bulk_value = type(value) is array and value.typecode == "q"
        if not bulk_value:
            value = _as_key(value)
        if len(value) != len(key):
            raise ValueError(f"value must hold one KV index per token: {len(key)} tokens, {len(value)} indices")
        if not self._bulk:
            return self.insert(key.tolist(), value.tolist() if bulk_value else value, inserted_len)
        if self.disable:
            return 0
        page = self.page_size
        size = len(key) - len(key) % page
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        offset = 0
        ck = None
        view = memoryview(key).cast("B")
        try:
            while offset < size:
                ck = key[offset] if page == 1 else self._page.unpack_from(view, 8 * offset)
                child = node.children.get(ck)
                if child is None:
                    break
                child.last_access_time = now
                edge = _key_bytes(child)
                start = 8 * offset
                if edge is not None and start + len(edge) <= 8 * size and edge.startswith(
                        view[start:start + len(edge)]):   # the whole edge: the usual case
                    offset += len(edge) >> 3
                else:
                    n = self._bulk_match_len(child, edge, key, view, offset, size)
                    offset += n
                    if n < _size(child):   # the rest of the key cannot follow the lower part: see insert
                        child = self._split_node(child, n)
                node = child
                if offset > inserted_len:
                    node.hit_count += 1
            if offset < size:
                # the new edge stays bytes: its tuples are made only if something reads them. _new_node's steps,
                # inline: its keyword call costs 0.5 us more, a twentieth of a multi-turn request here
                created = self._tick()
                self._next_id += 1
                leaf = PackedNode(None, None, node, {}, 0, created, created, 0, self._next_id)
                leaf.key_bytes = (None, view[8 * offset:8 * size].tobytes())
                if bulk_value:
                    leaf.value_bytes = (None, value[offset:size].tobytes())
                else:
                    leaf.value = _ints(value[offset:size])
                if size > inserted_len:
                    leaf.hit_count += 1
                node.children[ck] = leaf
                self.evictable_size_ += size - offset
                self._update_leaf_status(node)
                self._update_leaf_status(leaf)
        finally:
            view.release()
        return offset

    def _first_page(self, node: PackedNode):
        """child_key(node.key) for a packed node: read from its bytes while it has no key tuple."""
        if node._key is not None:
            return self.child_key(node.key)
        page = self._page.unpack_from(node.key_bytes[1])
        return page[0] if self.page_size == 1 else page

    def _bulk_match_len(self, child: TreeNode, edge: bytes | None, key: array, view: memoryview, offset: int,
                        size: int) -> int:
        """_match_len(child.key, key, offset) for a key given as an array (`view`: its bytes), cut at `size` tokens,
        where the caller found that the whole edge (`edge`: its bytes, None if it holds ints beyond int64) is not
        there: compare the part within `size` if the key ends inside the edge, else bisect on halving slices."""
        if edge is None:   # an edge inserted as a tuple with an int beyond int64: compare as tuples
            n = min(len(child.key), size - offset)
            m = _common_len(child.key, tuple(key[offset:offset + n]), 0)
        else:
            n = min(len(edge) >> 3, size - offset)
            start = 8 * offset
            if 8 * n < len(edge) and edge.startswith(view[start:start + 8 * n]):   # the key ends inside the edge
                m = n
            else:
                lo, hi = 0, n   # the first lo tokens are equal; the first difference is before hi
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if edge.startswith(view[start + 8 * lo:start + 8 * mid], 8 * lo):
                        lo = mid
                    else:
                        hi = mid
                m = lo
        return m - m % self.page_size

    def _split_packed(self, child: PackedNode, split_len: int) -> PackedNode:
        """_split_node for a node an array('q') key made: the same cut, on its bytes (and tuples, if made)."""
        upper = self._new_node(PackedNode, key=None, value=None, parent=child.parent, lock_ref=child.lock_ref,
                               hit_count=child.hit_count)
        child.parent.children[self._first_page(child)] = upper
        _cut_edge(child, upper, split_len)
        child.parent = upper
        upper.children[self._first_page(child)] = child
        return upper
