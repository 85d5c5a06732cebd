"""The nodes of the radix tree (`radix_cache.RadixCache`): TreeNode, its int64-bytes form PackedNode, the
snapshot's NodeView, the forms the tree keeps tokens in, and how an edge is compared with a key as tuples.

A key given as array('q') (what SGLang's requests hold) is compared as bytes; the nodes it adds are PackedNodes,
which hold key and value as int64 bytes and make the tuples only when read. The helpers here give an edge's
length, its bytes (packed once, dropped when the tuple is replaced) and its KV indices without making tuples.

    >>> node = PackedNode(None, None)
    >>> node.key_bytes = (None, array("q", [5, 6, 7]).tobytes())
    >>> _size(node), node.key
    (3, (5, 6, 7))
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)  # identity equality: nodes are handles, and they sit in sets and heaps
class TreeNode:
    """One edge of the tree and the node it leads to.

    `key` holds the tokens on the edge into this node, `value` one KV index per token. `children` maps a child
    key (the child's first token at page size 1, the tuple of its first page's tokens otherwise) to the child.
    `lock_ref` counts the running requests whose prefix runs through this node; the root keeps 1 for ever.
    """

    key: tuple[int, ...] = ()
    value: tuple[int, ...] = ()
    parent: TreeNode | None = None
    children: dict = field(default_factory=dict)
    lock_ref: int = 0
    last_access_time: int = 0
    creation_time: int = 0
    hit_count: int = 0  # LFU: inserts through this node (matches do not count, as in SGLang 0.5.23)
    id: int = 0
    # key and value as int64 bytes, for keys given as array('q'): (the tuple they were packed from, the bytes).
    # Once that tuple is replaced (a split, a learner's code) they are stale, and packed again when needed.
    key_bytes: tuple | None = field(default=None, repr=False)
    value_bytes: tuple | None = field(default=None, repr=False)

    def __repr__(self):
        return (f"TreeNode(id={self.id}, key={_show(self.key)}, value={_show(self.value)}, "
                f"lock_ref={self.lock_ref}, last_access_time={self.last_access_time})")


class PackedNode(TreeNode):
    """A node that an array('q') key made: its key and value start as int64 bytes alone (pairs (None, bytes): made
    from no tuple) and become tuples the first time something reads them (a snapshot, a tuple key walking
    through). The tree compares, locks, splits and evicts it without making a Python int per token. Assigning a
    key or value drops its bytes. A subclass, so that TreeNode's key and value stay plain attributes."""

    @property
    def key(self) -> tuple[int, ...]:
        if self._key is None:
            self._key = _unpack(self.key_bytes[1])
        return self._key

    @key.setter
    def key(self, key) -> None:
        self._key, self.key_bytes = key, None

    @property
    def value(self) -> tuple[int, ...]:
        if self._value is None:
            self._value = _unpack(self.value_bytes[1])
        return self._value

    @value.setter
    def value(self, value) -> None:
        self._value, self.value_bytes = value, None


@dataclass(frozen=True)
class NodeView:
    """One node of `RadixCache.snapshot()`: what the node held when the snapshot was taken."""

    depth: int                  # 0 for the root
    key: tuple[int, ...]
    value: tuple[int, ...]
    lock_ref: int
    last_access_time: int
    hit_count: int
    id: int
    num_children: int
    evictable_leaf: bool        # unlocked and without children: what evict() may take first


def _show(tokens: Sequence[int], limit: int = 10) -> str:
    head = ", ".join(map(str, tokens[:limit]))
    return f"[{head}{', ...' if len(tokens) > limit else ''}]"


def _size(node: TreeNode) -> int:
    """Tokens on the node's edge, without making a packed node's key tuple."""
    if type(node) is PackedNode and node._key is None:
        return len(node.key_bytes[1]) >> 3
    return len(node.key)


def _unpack(packed: bytes) -> tuple[int, ...]:
    tokens = array("q")
    tokens.frombytes(packed)
    return tuple(tokens.tolist())


def _values(node: TreeNode) -> list[int]:
    """The node's KV indices as a list, without making a packed node's value tuple."""
    if type(node) is PackedNode and node._value is None:
        indices = array("q")
        indices.frombytes(node.value_bytes[1])
        return indices.tolist()
    return list(node.value)


def _key_bytes(node: TreeNode) -> bytes | None:
    """node.key as int64 bytes: the kept ones while current (made from no tuple: a packed node's, whose setter
    drops them; else from the key tuple the node still has), otherwise packed now and kept; None if the key
    cannot be packed (an int beyond int64, or not ints)."""
    kept = node.key_bytes
    if kept is not None and (kept[0] is None or kept[0] is node.key):
        return kept[1]
    try:
        packed = array("q", node.key).tobytes()
    except (OverflowError, TypeError):
        return None
    node.key_bytes = (node.key, packed)
    return packed


def _value_bytes(node: TreeNode) -> bytes:
    """node.value as int64 bytes, kept like _key_bytes (a KV index beyond int64 raises OverflowError)."""
    kept = node.value_bytes
    if kept is not None and (kept[0] is None or kept[0] is node.value):
        return kept[1]
    packed = array("q", node.value).tobytes()
    node.value_bytes = (node.value, packed)
    return packed


def _cut_edge(lower: PackedNode, upper: PackedNode, n: int) -> None:
    """Move the first n tokens of lower's edge to upper (a new packed node): the key and value tuples where lower
    has made them, and the bytes. Slices, never a conversion."""
    key, value = lower._key, lower._value
    key_bytes, value_bytes = _key_bytes(lower), _value_bytes(lower)   # current ones (packed now if stale)
    if key is not None:
        upper.key, lower.key = key[:n], key[n:]
    if value is not None:
        upper.value, lower.value = value[:n], value[n:]
    cut = 8 * n
    if key_bytes is not None:   # None: a key set to ints beyond int64, kept as tuples alone
        upper.key_bytes, lower.key_bytes = (None, key_bytes[:cut]), (None, key_bytes[cut:])
    upper.value_bytes, lower.value_bytes = (None, value_bytes[:cut]), (None, value_bytes[cut:])


def _common_len(edge: tuple[int, ...], key: tuple[int, ...], offset: int) -> int:
    """How many leading tokens of key[offset:] equal edge's, compared in slices (C speed), never token by token
    in Python: the whole common length in one comparison (a full match, the usual case), otherwise bisection on
    slice equality (log2 n comparisons of halving slices)."""
    n = min(len(edge), len(key) - offset)
    if key[offset:offset + n] == edge[:n]:   # a slice of a whole tuple is the tuple itself: no copy then
        return n
    lo, hi = 0, n   # the first lo tokens are equal; the first difference is before hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if key[offset + lo:offset + mid] == edge[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _as_key(tokens: Iterable[int]) -> tuple[int, ...]:
    """The tokens as a tuple to walk the tree with: a tuple, list or range as it is (matching compares and hashes
    them, so a numpy integer finds the int it equals), anything else (a numpy array, an iterator) through int().
    What the tree keeps goes through `_ints` first."""
    if type(tokens) is tuple or type(tokens) is list or type(tokens) is range:
        return tuple(tokens)
    return tuple(map(int, tokens))


def _ints(part: tuple) -> tuple[int, ...]:
    """`tuple(map(int, part))`, the form the tree stores keys and values in, without the copy when `part` holds
    Python ints already: `type(sum(part)) is int` says so in one C loop (a float, a str or a numpy scalar makes
    the sum something else or raises). Bad tokens raise as int() does."""
    try:
        if type(sum(part)) is int:
            return part
    except TypeError:
        pass
    return tuple(map(int, part))
