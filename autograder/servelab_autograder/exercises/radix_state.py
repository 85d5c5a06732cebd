"""The radix tree (``servelab.schedulers.radix_cache.RadixCache``) as plain data, for chapters 04 and 05.

:func:`snapshot` is the tree's whole state (settings, clock, size counters, every node in preorder with its
parent and children as indices, evictable_leaves), read defensively: whatever the learner's code left in a field
becomes plain data (:func:`plain_int`; a string stands for anything else), and what is broken about the walk (a
cycle, a runaway tree, a list where a tuple belongs) is said in the state. :func:`set_tree` and :func:`build` put
a tree back in a state (reusing node objects by id, so the handles the code under test holds stay the nodes they
were); :func:`state_key` is what a recorded split or unlock is keyed by. How two states are compared and shown is
``radix_view``'s.
"""

from __future__ import annotations

import numbers

from servelab.schedulers.radix_cache import RadixCache, TreeNode
from servelab_autograder.exercises import common
from servelab_autograder.exercises.replay import digest

MAX_NODES = 5000          # a learner's tree larger than this has a cycle or runs away
SHORT = common.short_repr(12, 80)   # how a learner's value is shown in chapters 04 and 05


def show(tokens, limit: int = 10) -> str:
    """Tokens as a message shows them: a list, cut after ``limit``."""
    tokens = list(tokens) if isinstance(tokens, list | tuple) else [tokens]
    head = ", ".join(map(str, tokens[:limit]))
    return f"[{head}{', ...' if len(tokens) > limit else ''}]"


def tuple_text(tokens, limit: int = 10) -> str:
    """A key or an edge as the code under test gets it: a tuple."""
    tokens = list(tokens) if isinstance(tokens, list | tuple) else [tokens]
    if len(tokens) == 1:
        return f"({tokens[0]},)"
    head = ", ".join(map(str, tokens[:limit]))
    return f"({head}{', ...' if len(tokens) > limit else ''})"


# ------------------------------------------------------------------------------------------------
# the tree as plain data


def plain_int(x):
    """A count or index the learner's code left somewhere, as plain data (a string standing for anything else)."""
    if type(x) is int:
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    return f"<{type(x).__name__}: {SHORT.repr(x)}>"


def plain_ints(xs) -> list:
    try:
        if isinstance(xs, tuple | list) and all(type(x) is int for x in xs):
            return list(xs)
        return [plain_int(x) for x in xs]
    except TypeError:
        return [plain_int(xs)]


def _child_key(x):
    """A dict key of a node's children as plain data: an int, a tuple of ints, or a string for anything else."""
    if isinstance(x, tuple):
        return tuple(plain_int(t) for t in x)
    value = plain_int(x)
    return value if isinstance(x, numbers.Integral) else f"<{type(x).__name__}: {SHORT.repr(x)}>"


def _nodes(cache) -> tuple[list, str | None]:
    """Every node reachable from the root through children, in the printer's order (preorder, children in dict
    order); and what is broken about the walk (a cycle, a runaway tree), or None."""
    order, seen, broken = [], set(), None
    stack = [cache.root_node]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            broken = broken or "a node is reachable twice: a child links back to an ancestor (a cycle?)"
            continue
        if len(order) >= MAX_NODES:
            broken = f"the tree has more than {MAX_NODES} nodes: a node links back to an ancestor?"
            break
        seen.add(id(node))
        order.append(node)
        children = getattr(node, "children", None)
        stack.extend(reversed(list(children.values())) if isinstance(children, dict) else [])
    return order, broken


def snapshot(cache) -> dict:
    """The tree's whole state: its settings, the clock, the size counters, and every node in preorder as
    [id, key, value, lock_ref, last_access_time, creation_time, hit_count, [[child key, index], ...], the index
    of the node its parent pointer names (-1: None, -2: a node not in the tree)]; evictable_leaves as indices
    (-1: a node not in the tree)."""
    order, broken = _nodes(cache)
    index = {id(n): i for i, n in enumerate(order)}
    rows = []
    for node in order:
        children = getattr(node, "children", {})
        children = list(children.items()) if isinstance(children, dict) else []
        parent = getattr(node, "parent", None)
        rows.append([plain_int(getattr(node, "id", None)), plain_ints(getattr(node, "key", ())),
                     plain_ints(getattr(node, "value", ())), plain_int(getattr(node, "lock_ref", None)),
                     plain_int(getattr(node, "last_access_time", None)),
                     plain_int(getattr(node, "creation_time", None)), plain_int(getattr(node, "hit_count", None)),
                     [[_child_key(k), index[id(c)]] for k, c in children if id(c) in index],
                     -1 if parent is None else index.get(id(parent), -2)])
    for node in order[1:]:   # the contract's TreeNode holds tuples; a list stored there is the caller's to change
        kinds = [type(getattr(node, f, ())) for f in ("key", "value")]
        if broken is None and any(k is not tuple for k in kinds):
            field, kind = next((f, k) for f, k in zip(("key", "value"), kinds) if k is not tuple)
            broken = (f"a node's {field} is a {kind.__name__}: TreeNode.key and .value are tuples, so store "
                      f"tuple({field}) (the edge {show(plain_ints(getattr(node, 'key', ())))})")
    try:
        leaves = sorted(index.get(id(n), -1) for n in cache.evictable_leaves)
    except TypeError:
        leaves = []
    return {"page_size": cache.page_size, "policy": cache.eviction_policy, "clock": plain_int(cache.clock),
            "next_id": plain_int(cache._next_id),
            "sizes": [plain_int(cache.evictable_size_), plain_int(cache.protected_size_)],
            "nodes": rows, "leaves": leaves, "broken": broken}


ID, KEY, VALUE, LOCK, TIME, CREATED, HITS, CHILDREN, PARENT = range(9)


def set_tree(cache, state: dict) -> None:
    """Put ``cache``'s tree in ``state``, reusing the node objects that have the same ids (so the handles the
    code under test holds stay the nodes they were)."""
    existing: dict = {}
    for node in _nodes(cache)[0]:
        existing.setdefault(getattr(node, "id", None), node)
    nodes = []
    for row in state["nodes"]:
        node = existing.pop(row[ID], None) or TreeNode(id=row[ID])
        node.key, node.value = tuple(row[KEY]), tuple(row[VALUE])
        node.lock_ref, node.last_access_time = row[LOCK], row[TIME]
        node.creation_time, node.hit_count = row[CREATED], row[HITS]
        node.children, node.parent = {}, None
        nodes.append(node)
    for node, row in zip(nodes, state["nodes"]):
        for ck, i in row[CHILDREN]:
            node.children[ck] = nodes[i]
            nodes[i].parent = node
    cache.root_node = nodes[0]
    cache.clock, cache._next_id = state["clock"], state["next_id"]
    cache.evictable_size_, cache.protected_size_ = state["sizes"]
    cache.evictable_leaves.clear()
    cache.evictable_leaves.update(nodes[i] for i in state["leaves"])


def build(state: dict, cls=RadixCache, allocator=None):
    """A tree of class ``cls`` in ``state`` (reference states only: well formed)."""
    cache = cls(page_size=state["page_size"], eviction_policy=state["policy"], token_to_kv_pool_allocator=allocator)
    set_tree(cache, state)
    return cache


def node_by_id(cache, node_id: int):
    return next(n for n in _nodes(cache)[0] if n.id == node_id)


def path_of(cache, node) -> list | str:
    """The tokens from the root to the end of ``node``'s edge, or a sentence when it is not in the tree."""
    if not isinstance(node, TreeNode):
        return f"<{type(node).__name__}: {SHORT.repr(node)}> (not a TreeNode)"
    parts, guard = [], 0
    while node is not None and node is not cache.root_node and guard < MAX_NODES:
        parts.append(plain_ints(node.key))
        node, guard = getattr(node, "parent", None), guard + 1
    if node is None or guard >= MAX_NODES:
        return "a node that is not in the tree"
    return [t for p in reversed(parts) for t in p]


def state_key(state: dict) -> str:
    """What a split (or a lock) depends on: the whole tree but the LFU hit counts (this chapter's insert does not
    count hits), node by id, so neither the order of a children dict nor the printer's order matters."""
    rows = state["nodes"]
    nodes = sorted([r[ID], r[KEY], r[VALUE], r[LOCK], r[TIME], r[CREATED],
                    sorted([show(ck), rows[i][ID]] for ck, i in r[CHILDREN]),
                    rows[r[PARENT]][ID] if r[PARENT] >= 0 else r[PARENT]] for r in rows)
    return digest(state["page_size"], state["clock"], state["next_id"], state["sizes"], nodes,
                   sorted(rows[i][ID] if i >= 0 else i for i in state["leaves"]), state["broken"])



def path_by_id(state: dict, node_id) -> list:
    """The tokens from the root to the end of the node ``node_id``'s edge in ``state`` (well formed)."""
    rows = state["nodes"]
    parent = {j: i for i, r in enumerate(rows) for _, j in r[CHILDREN]}
    i = next((i for i, r in enumerate(rows) if r[ID] == node_id), 0)
    parts = []
    while i in parent:
        parts.append(rows[i][KEY])
        i = parent[i]
    return [t for p in reversed(parts) for t in p]


__all__ = ["CHILDREN", "CREATED", "HITS", "ID", "KEY", "LOCK", "MAX_NODES", "PARENT", "SHORT", "TIME", "VALUE", "build",
           "node_by_id", "path_by_id", "path_of", "plain_int", "plain_ints", "set_tree", "show", "snapshot",
           "state_key", "tuple_text"]
