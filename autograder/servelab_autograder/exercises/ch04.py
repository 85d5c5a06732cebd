"""Chapter 04's exercises as the visible tests and the grader both see them: SGLang's radix tree, piece by piece.

Every exercise is a method of the radix tree, so each is **driven**: a case is the tree's state as plain data
(:func:`snapshot`), taken from a run of the reference tree (``servelab.schedulers.radix_cache.RadixCache``) through a
workload of operations at the moment it calls that method; the driver (``drive_*``) builds a tree in that state
(:func:`build`), calls the learner's method once and returns what it returned and the state it left, as plain
data. The grader runs the same driver with the reference and compares the trees by path (:func:`view`: every
node's path, edge, KV indices, lock_ref, the order of the last access times, membership of evictable_leaves, the
size counters, and what is broken: parent pointers, child keys, empty edges).

``match_prefix`` and ``insert`` call ``child_key``, ``_match_len`` and ``_split_node``, and ``_split_node``
calls ``child_key``: other exercises, whose references the grading sandbox does not have. The driver answers
those calls from a **replay** of the reference run: each call the reference made, keyed by what it depends on
(the page looked up; the edge and the key's tokens beside it; for a split, the whole tree it was made in), with
its result and, for a split, the tree it left. A correct method makes the same calls in the same states and gets
the same answers; a wrong one reaches a state the reference never did and the replay says so (``diverged``).
Nothing here can look up, split or insert on an input of its own, so nothing here is a reference to copy.

The whole class (the cell that assembles the learner's five functions) is driven through whole workloads
(:func:`drive_radix_cache`): every operation's result, the sizes and the tree after each, and the notebook's
100 requests sharing a 2000-token system prompt served through it by the RadixScheduler.

:data:`SPECS` holds each exercise; :func:`diagnose` is a visible assert's message. The workloads live here (the
notebook's walk-throughs and visible checks, one per pitfall) so that a learner's visible check can name a
pitfall; the grader adds random ones (``servelab_autograder.judge.checks.ch04``), and
:mod:`servelab_autograder.exercises.ch05` reuses the state, the workloads and their recordings for the locks and
eviction.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import random

from servelab.schedulers.radix_cache import RadixCache, TreeNode
from servelab_autograder.exercises import common, plain, spec
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch04_radix_cache"
MAX_NODES = 5000          # a learner's tree larger than this has a cycle or runs away
BIG = 10**6               # evict(BIG): everything evictable
_short = common.short_repr(12, 80)


def _show(tokens, limit: int = 10) -> str:
    tokens = list(tokens) if isinstance(tokens, list | tuple) else [tokens]
    head = ", ".join(map(str, tokens[:limit]))
    return f"[{head}{', ...' if len(tokens) > limit else ''}]"


def _tuple(tokens, limit: int = 10) -> str:
    """A key or an edge as the code under test gets it: a tuple."""
    tokens = list(tokens) if isinstance(tokens, list | tuple) else [tokens]
    if len(tokens) == 1:
        return f"({tokens[0]},)"
    head = ", ".join(map(str, tokens[:limit]))
    return f"({head}{', ...' if len(tokens) > limit else ''})"


# ------------------------------------------------------------------------------------------------
# the tree as plain data


def _int(x):
    """A count or index the learner's code left somewhere, as plain data (a string standing for anything else)."""
    if type(x) is int:
        return x
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return int(x)
    return f"<{type(x).__name__}: {_short.repr(x)}>"


def _ints(xs) -> list:
    try:
        if isinstance(xs, tuple | list) and all(type(x) is int for x in xs):
            return list(xs)
        return [_int(x) for x in xs]
    except TypeError:
        return [_int(xs)]


def _child_key(x):
    """A dict key of a node's children as plain data: an int, a tuple of ints, or a string for anything else."""
    if isinstance(x, tuple):
        return tuple(_int(t) for t in x)
    value = _int(x)
    return value if isinstance(x, numbers.Integral) else f"<{type(x).__name__}: {_short.repr(x)}>"


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
        rows.append([_int(getattr(node, "id", None)), _ints(getattr(node, "key", ())),
                     _ints(getattr(node, "value", ())), _int(getattr(node, "lock_ref", None)),
                     _int(getattr(node, "last_access_time", None)), _int(getattr(node, "creation_time", None)),
                     _int(getattr(node, "hit_count", None)),
                     [[_child_key(k), index[id(c)]] for k, c in children if id(c) in index],
                     -1 if parent is None else index.get(id(parent), -2)])
    for node in order[1:]:   # the contract's TreeNode holds tuples; a list stored there is the caller's to change
        kinds = [type(getattr(node, f, ())) for f in ("key", "value")]
        if broken is None and any(k is not tuple for k in kinds):
            field, kind = next((f, k) for f, k in zip(("key", "value"), kinds) if k is not tuple)
            broken = (f"a node's {field} is a {kind.__name__}: TreeNode.key and .value are tuples, so store "
                      f"tuple({field}) (the edge {_show(_ints(getattr(node, 'key', ())))})")
    try:
        leaves = sorted(index.get(id(n), -1) for n in cache.evictable_leaves)
    except TypeError:
        leaves = []
    return {"page_size": cache.page_size, "policy": cache.eviction_policy, "clock": _int(cache.clock),
            "next_id": _int(cache._next_id),
            "sizes": [_int(cache.evictable_size_), _int(cache.protected_size_)],
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
        return f"<{type(node).__name__}: {_short.repr(node)}> (not a TreeNode)"
    parts, guard = [], 0
    while node is not None and node is not cache.root_node and guard < MAX_NODES:
        parts.append(_ints(node.key))
        node, guard = getattr(node, "parent", None), guard + 1
    if node is None or guard >= MAX_NODES:
        return "a node that is not in the tree"
    return [t for p in reversed(parts) for t in p]


def _digest(*parts) -> str:
    text = json.dumps(plain.encode(list(parts)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def state_key(state: dict) -> str:
    """What a split (or a lock) depends on: the whole tree but the LFU hit counts (this chapter's insert does not
    count hits), node by id, so neither the order of a children dict nor the printer's order matters."""
    rows = state["nodes"]
    nodes = sorted([r[ID], r[KEY], r[VALUE], r[LOCK], r[TIME], r[CREATED],
                    sorted([_show(ck), rows[i][ID]] for ck, i in r[CHILDREN]),
                    rows[r[PARENT]][ID] if r[PARENT] >= 0 else r[PARENT]] for r in rows)
    return _digest(state["page_size"], state["clock"], state["next_id"], state["sizes"], nodes,
                   sorted(rows[i][ID] if i >= 0 else i for i in state["leaves"]), state["broken"])


# ------------------------------------------------------------------------------------------------
# the tree as the grader compares it: by path


def _order_key(path) -> list:
    """A sort key for paths that may hold what a broken tree put there (strings among the ints)."""
    return [(0, t) if isinstance(t, int) else (1, str(t)) for t in path]


def expected_child_key(page_size: int, edge) -> object:
    return edge[0] if page_size == 1 else tuple(edge[:page_size])


def view(state: dict) -> dict:
    """``state`` as compared: one row per node but the root, sorted by path, [path, edge, KV indices, lock_ref,
    rank of last_access_time, in evictable_leaves]; the sizes (evictable, protected, total); what is broken."""
    rows, ps = state["nodes"], state["page_size"]
    problems = [state["broken"]] if state.get("broken") else []
    if rows[0][KEY] != [] or rows[0][LOCK] != 1:
        problems.append("the root must keep an empty key and lock_ref 1")
    paths, under = {0: []}, {}
    for i, row in enumerate(rows):
        for ck, j in row[CHILDREN]:
            if j in paths:
                continue
            under[j] = i
            paths[j] = paths[i] + list(rows[j][KEY])
            edge = rows[j][KEY]
            if not edge:
                problems.append(f"the node under {_show(paths[i])} has an empty edge (a split at 0 tokens?)")
            elif ck != expected_child_key(ps, edge):
                problems.append(f"the child {_show(paths[j])} hangs under the child key {ck!r}; it should be "
                                f"{expected_child_key(ps, edge)!r}")
            if rows[j][PARENT] != i:
                problems.append(f"the node {_show(paths[j])} has a parent pointer that is not the node it hangs under")
    if -1 in state["leaves"]:
        problems.append(f"evictable_leaves holds {state['leaves'].count(-1)} node(s) no longer in the tree")
    leaves = set(state["leaves"])
    times = [rows[i][TIME] for i in paths if i]
    try:
        rank = {t: r for r, t in enumerate(sorted(set(times)))}
    except TypeError:
        problems.append("last_access_time must be a number (use self._tick())")
        rank = {}
    out = sorted(([paths[i], rows[i][KEY], rows[i][VALUE], rows[i][LOCK], rank.get(rows[i][TIME]), i in leaves]
                  for i in paths if i), key=lambda r: _order_key(r[0]))
    total = sum(len(rows[i][VALUE]) for i in paths)
    return {"sizes": [*state["sizes"], total], "rows": out, "problems": problems}


_ROW_FIELDS = ("path", "edge", "KV indices", "lock_ref", "last access order", "membership of evictable_leaves")


def _order(rows) -> str:
    """The nodes by last access time, least recent first ("=": the same time)."""
    rows = sorted(rows, key=lambda r: (r[4] if isinstance(r[4], int) else -1, _order_key(r[0])))
    text = _show(rows[0][1]) if rows else ""
    for a, b in zip(rows, rows[1:]):
        text += f" {'=' if a[4] == b[4] else '<'} {_show(b[1])}"
    return text


def tree_difference(got: dict, want: dict) -> str | None:
    """The first difference between two views, in the learner's terms."""
    if got["sizes"] != want["sizes"]:
        names = ("evictable_size()", "protected_size()", "total_size()")
        i = next(i for i, (a, b) in enumerate(zip(got["sizes"], want["sizes"])) if a != b)
        return (f"{names[i]} is {got['sizes'][i]}; the reference's is {want['sizes'][i]} (evictable, protected, "
                f"total: yours {tuple(got['sizes'])}, the reference's {tuple(want['sizes'])})")
    if got["problems"] != want["problems"]:
        return (got["problems"] or ["the tree is broken"])[0]
    mine, theirs = {tuple(r[0]): r for r in got["rows"]}, {tuple(r[0]): r for r in want["rows"]}
    for path in sorted(set(mine) | set(theirs), key=_order_key):
        if path not in mine:
            return (f"the reference's tree has a node ending at {_show(path)} (edge {_show(theirs[path][1])}); "
                    "yours has none")
        if path not in theirs:
            return (f"your tree has a node ending at {_show(path)} (edge {_show(mine[path][1])}); the reference's "
                    "has none")
        a, b = mine[path], theirs[path]
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            if i == 4:
                return (f"the order of the nodes' last access times differs: yours {_order(got['rows'])}; the "
                        f"reference's {_order(want['rows'])} (least recent first)")
            return f"the node ending at {_show(path)} has {_ROW_FIELDS[i]} {a[i]}; the reference's has {b[i]}"
    return None


def tree_text(state: dict, limit: int = 30) -> str:
    """The tree, pretty_print style (reference states: well formed), at most ``limit`` nodes."""
    rows, lines = state["nodes"], []
    stack = [(0, 0)]
    while stack and len(lines) < limit:
        i, depth = stack.pop()
        row = rows[i]
        text = "root" if i == 0 else f"{_show(row[KEY])} kv={_show(row[VALUE])}"
        lines.append(f"{'  ' * depth}{text} r={row[LOCK]} t={row[TIME]}")
        stack.extend((j, depth + 1) for _, j in reversed(row[CHILDREN]))
    if stack:
        lines.append("  ...")
    return "\n".join(lines)


def rows_text(rows: list, limit: int = 30) -> str:
    """A view's rows as a tree (the root first), at most ``limit`` nodes."""
    lines = ["root"]
    for path, edge, value, lock, rank, _ in rows[:limit]:
        depth = sum(1 for r in rows if len(r[0]) < len(path) and list(path[:len(r[0])]) == list(r[0]))
        lines.append(f"{'  ' * (depth + 1)}{_show(edge)} kv={_show(value)} r={lock} (access order {rank})")
    if len(rows) > limit:
        lines.append("  ...")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# replaying the reference's calls of the other exercises


class Diverged(Exception):
    """The code under test made a call of another exercise that the reference never made in that state."""

    def __init__(self, call: str, state: dict):
        super().__init__(call)
        self.call, self.state = call, state


def pure_key(name: str, page_size: int, args: tuple) -> str:
    """What child_key and _match_len depend on: the page looked up; the edge and the key's tokens beside it."""
    if name == "child_key":
        key, offset = args
        return _digest(name, page_size, _ints(key)[offset:offset + page_size])
    edge, key, offset = args
    return _digest(name, page_size, _ints(edge), _ints(key)[offset:offset + len(edge)])


def split_key(state: dict, child_id, split_len) -> str:
    return _digest("_split_node", state_key(state), _int(child_id), _int(split_len))


def with_replay(cache, replay: dict, names=("child_key", "_match_len", "_split_node")) -> dict:
    """Answer ``cache``'s calls of ``names`` from ``replay``; returns a record of the first divergence (kept even
    when the code under test catches the exception)."""
    seen: dict = {"diverged": None}

    def diverge(call: str):
        seen["diverged"] = seen["diverged"] or Diverged(call, snapshot(cache))
        raise seen["diverged"]

    def child_key(key, offset=0):
        entry = replay["child_key"].get(pure_key("child_key", cache.page_size, (key, offset)))
        if entry is None:
            diverge(f"child_key(key={_show(_ints(key))}, offset={offset!r})")
        return entry

    def _match_len(edge, key, offset):
        entry = replay["_match_len"].get(pure_key("_match_len", cache.page_size, (edge, key, offset)))
        if entry is None:
            diverge(f"_match_len(edge={_show(_ints(edge))}, key={_show(_ints(key))}, offset={offset!r})")
        return entry

    def _split_node(child, split_len):
        where = path_of(cache, child)
        entry = replay["_split_node"].get(split_key(snapshot(cache), getattr(child, "id", None), split_len))
        if entry is None:
            diverge(f"_split_node(the node {_show(where) if isinstance(where, list) else where}, {split_len!r})")
        set_tree(cache, entry["after"])
        return node_by_id(cache, entry["result"])

    for name, fn in (("child_key", child_key), ("_match_len", _match_len), ("_split_node", _split_node)):
        if name in names:
            setattr(cache, name, fn)
    return seen


def _diverged(seen: dict, cache) -> dict | None:
    d = seen["diverged"]
    return None if d is None else {"diverged": d.call, "state": d.state}


# ------------------------------------------------------------------------------------------------
# drivers: one call of the learner's method on a state, the result and the state after as plain data


def drive_child_key(fn, page_size: int, key: list, offset: int) -> dict:
    return {"result": fn(RadixCache(page_size=page_size), tuple(key), offset)}


def drive_match_len(fn, page_size: int, edge: list, key: list, offset: int) -> dict:
    return {"result": fn(RadixCache(page_size=page_size), tuple(edge), tuple(key), offset)}


def _guarded_call(call, cache, seen: dict) -> dict:
    """``call()``; what it raised (but a stub's NotImplementedError), or a divergence, as data."""
    try:
        out = {"ok": call()}
        return _diverged(seen, cache) or out   # a divergence the code under test caught is still one
    except NotImplementedError:
        raise
    except Diverged:
        return _diverged(seen, cache)
    except Exception as e:  # noqa: BLE001 - part of the result: the reference raises on bad input too
        return _diverged(seen, cache) or {"raised": type(e).__name__, "message": str(e)[:300],
                                          "state": snapshot(cache)}


def drive_split_node(fn, where: str, state: dict, child: int, split_len: int, replay: dict) -> dict:
    cache = build(state)
    seen = with_replay(cache, replay, ("child_key",))
    handle = node_by_id(cache, child)
    out = _guarded_call(lambda: fn(cache, handle, split_len), cache, seen)
    if "ok" not in out:
        return out
    upper = out["ok"]
    return {"result": path_of(cache, upper), "new": upper is not handle, "handle": path_of(cache, handle),
            "state": snapshot(cache)}


def _match_out(cache, got) -> dict:
    if not isinstance(got, tuple) or len(got) != 2:
        return {"problem": f"returned {_short.repr(got)}; return (list of KV indices, last node)"}
    indices, node = got
    if not isinstance(node, TreeNode):
        return {"problem": f"returned {_short.repr(node)} as its node; return the TreeNode where the match ends"}
    try:
        indices = _ints(list(indices))
    except TypeError:
        return {"problem": f"returned {_short.repr(indices)} as its indices; return a list of ints"}
    return {"result": indices, "node": path_of(cache, node)}


def drive_match_prefix(fn, where: str, state: dict, key: list, replay: dict) -> dict:
    cache = build(state)
    seen = with_replay(cache, replay)
    out = _guarded_call(lambda: fn(cache, list(key)), cache, seen)
    if "ok" not in out:
        return out
    return {**_match_out(cache, out["ok"]), "state": snapshot(cache)}


def drive_insert(fn, where: str, state: dict, key: list, value: list, replay: dict) -> dict:
    cache = build(state)
    seen = with_replay(cache, replay)
    out = _guarded_call(lambda: fn(cache, list(key), list(value)), cache, seen)
    if "ok" not in out:
        return out
    return {"result": _int(out["ok"]), "state": snapshot(cache)}


# ------------------------------------------------------------------------------------------------
# workloads: operations on a whole tree (the whole class's cases, and where every method's cases come from


def workload(label: str, page_size: int, steps, policy: str = "lru") -> dict:
    """``steps``: ("insert", key) | ("match", key) | ("lock", key) | ("unlock", n) | ("evict", n) | ("reset",) |
    ("bad_insert", key) | ("bad_unlock", key) | ("bad_evict", n). lock: match_prefix(key), then
    inc_lock_ref(node); unlock: dec_lock_ref of held handle number n (modulo how many are held; nothing when none
    is); bad_insert: a value one index short (must raise ValueError); bad_unlock: match_prefix(key), then
    dec_lock_ref(node) when that node is not the root and holds no lock (must raise ValueError); bad_evict:
    evict(-n). Insert values are fresh KV indices (10, 11, ...), so values show who wrote them."""
    kv, ops = 10, []
    for step in steps:
        kind, arg = step[0], (step[1] if len(step) > 1 else 0)
        if kind in ("insert", "bad_insert"):
            key = list(arg)
            n = len(key) if kind == "insert" else len(key) - 1
            ops.append([kind, key, list(range(kv, kv + n)), 0])
            kv += len(key)
        elif kind in ("match", "lock", "bad_unlock"):
            ops.append([kind, list(arg), [], 0])
        else:
            ops.append([kind, [], [], int(arg)])
    return {"label": label, "page_size": page_size, "policy": policy, "ops": ops}


OPS = ("insert", "match", "lock", "unlock", "evict", "reset", "bad_insert", "bad_unlock", "bad_evict")
EVICT_SIZES = (0, 1, 2, 3, 5, 8, BIG)


def random_workload(rng: random.Random, n_ops: int, page_size: int, label: str,
                    weights=(30, 20, 12, 12, 15, 1, 1, 2, 1)) -> dict:
    """Two or three distinct tokens, so keys share prefixes and split edges often; empty keys included."""
    alphabet, steps = rng.choice([2, 3]), []
    for _ in range(n_ops):
        kind = rng.choices(OPS, weights=weights)[0]
        key = [rng.randrange(alphabet) for _ in range(rng.randrange(0, 4 * page_size + 3))]
        if kind == "bad_insert":
            steps.append((kind, key or [0]))
        elif kind in ("insert", "match", "lock", "bad_unlock"):
            steps.append((kind, key))
        elif kind == "unlock":
            steps.append((kind, rng.randrange(1000)))
        elif kind == "evict":
            steps.append((kind, rng.choice(EVICT_SIZES)))
        elif kind == "bad_evict":
            steps.append((kind, rng.choice([1, 5])))
        else:
            steps.append((kind,))
    return workload(label, page_size, steps)


def op_text(op: list) -> str:
    kind, key, value, n = op
    return {
        "insert": f"insert({_show(key)}, {_show(value)})",
        "match": f"match_prefix({_show(key)})",
        "lock": f"inc_lock_ref(match_prefix({_show(key)}) node)",
        "unlock": f"dec_lock_ref(held node #{n})",
        "evict": f"evict({n})",
        "reset": "reset()",
        "bad_insert": f"insert({_show(key)}, {_show(value)})  (one index short: must raise ValueError)",
        "bad_unlock": f"dec_lock_ref(match_prefix({_show(key)}) node)  (no lock on it: must raise ValueError)",
        "bad_evict": f"evict({-n})  (negative: must raise ValueError)",
    }[kind]


class Allocator:
    """The KV allocator: records what evict hands it."""

    def __init__(self):
        self.freed: list = []

    def free(self, indices):
        self.freed.append(_ints(indices))


def _call(fn, *args) -> list:
    """["ok", result] or ["raised", name, message]; a stub's NotImplementedError goes on up."""
    try:
        return ["ok", fn(*args)]
    except NotImplementedError:
        raise
    except RecursionError:
        return ["raised", "RecursionError", "maximum recursion depth exceeded"]
    except Exception as e:  # noqa: BLE001 - reported as a result, compared with the reference's
        return ["raised", type(e).__name__, str(e)[:200]]


def _plain_call(r: list) -> list:
    return ["ok", _int(r[1])] if r[0] == "ok" else r


def _refused(r: list) -> list:
    return [r[0] == "raised" and r[1] == "ValueError", f"raised {r[1]}" if r[0] == "raised"
            else f"returned {_short.repr(r[1])}"]


def apply_op(cache, op: list, handles: list, alloc: Allocator) -> list:
    """Perform one operation of a workload; what it returned, as plain data."""
    kind, key, value, n = op
    alloc.freed.clear()
    if kind in ("insert", "bad_insert"):
        r = _call(cache.insert, list(key), list(value))
        if kind == "bad_insert":
            return ["bad", *_refused(r)]
        return ["insert", *_plain_call(r)]
    if kind in ("match", "lock", "bad_unlock"):
        r = _call(cache.match_prefix, list(key))
        if r[0] != "ok":
            return ["match", *r]
        m = _match_out(cache, r[1])
        if "problem" in m:
            return ["match", "malformed", m["problem"]]
        out, node = ["match", "ok", m["result"], m["node"]], r[1][1]
        if kind == "lock":
            d = _call(cache.inc_lock_ref, node)
            if d[0] == "ok":
                handles.append(node)
            out += ["lock", *_plain_call(d)]
        elif kind == "bad_unlock" and node is not cache.root_node and node.lock_ref == 0:
            out += ["bad", *_refused(_call(cache.dec_lock_ref, node))]
        return out
    if kind == "unlock":
        if not handles:
            return ["unlock", "nothing held"]
        return ["unlock", *_plain_call(_call(cache.dec_lock_ref, handles.pop(n % len(handles))))]
    if kind in ("evict", "bad_evict"):
        r = _call(cache.evict, n if kind == "evict" else -n)
        if kind == "bad_evict":
            return ["bad", *_refused(r)]
        if r[0] != "ok":
            return ["evict", *r]
        return ["evict", "ok", _ints(r[1]) if r[1] is not None else None, [list(f) for f in alloc.freed]]
    r = _call(cache.reset)
    handles.clear()
    return ["reset", r[0]]


def _sizes(cache) -> list:
    try:
        return [_int(cache.evictable_size()), _int(cache.protected_size()), _int(cache.total_size())]
    except Exception as e:  # noqa: BLE001
        return ["unreadable", type(e).__name__]


class SplitGuard(Exception):
    """A split that would leave an empty edge: always a bug, and the start of an endless loop when the walk goes
    on (a first-token child key at page_size > 1 splits at 0 tokens again and again)."""


def guarded(cls: type) -> type:
    """``cls`` with its _split_node refusing a split at 0 tokens or at the end of the edge."""
    inner = cls._split_node

    def _split_node(self, child, split_len):
        n = len(child.key)
        if not (isinstance(split_len, int) and 0 < split_len < n):
            raise SplitGuard(f"_split_node was called with split_len={split_len!r} on an edge of {n} tokens "
                             f"{_show(child.key)}: a split must leave tokens on both sides (0 < split_len < {n})")
        return inner(self, child, split_len)

    return type(cls.__name__, (cls,), {"_split_node": _split_node})


def run_ops(cache, ops: list, before=None) -> list:
    """Every operation's [result, sizes, view of the tree] on ``cache``; ``before(k, cache)`` is called before
    operation k (the recording's hook)."""
    handles, alloc = [], cache.token_to_kv_pool_allocator
    trace = []
    for k, op in enumerate(ops):
        if before is not None:
            before(k, cache)
        result = apply_op(cache, op, handles, alloc)
        tree = view(snapshot(cache))
        trace.append([result, _sizes(cache), tree["rows"], tree["problems"]])
    return trace


def drive_radix_cache(cls, where: str, work: dict) -> dict:
    """The learner's whole RadixCache class through a workload: each operation's result, the sizes and the tree
    after it; or the notebook's shared-prompt requests served through it (``work["serve"]``)."""
    if "serve" in work:
        return serve(cls, **work["serve"])
    cache = guarded(cls)(page_size=work["page_size"], eviction_policy=work["policy"],
                         token_to_kv_pool_allocator=Allocator())
    return {"trace": run_ops(cache, work["ops"])}


MAX_EVICTS = 1000          # evict calls in one scheduler step; the reference makes at most a few


class RunAway(Exception):
    """A scheduler step that calls evict again and again: its decode loop evicts while evictable_size() > 0, so
    sizes that say tokens are evictable when no leaf is would loop for ever."""


def counted(cache_class: type) -> type:
    """``cache_class`` with evict refusing to be called more than MAX_EVICTS times between two resets of
    ``evict_calls`` (one per step)."""
    def evict(self, num_tokens):
        self.evict_calls += 1
        if self.evict_calls > MAX_EVICTS:
            raise RunAway(f"evict was called {MAX_EVICTS} times in one step (evictable_size() is "
                          f"{self.evictable_size()}, yet nothing is freed?)")
        return cache_class.evict(self, num_tokens)
    return type(cache_class.__name__, (cache_class,), {"evict": evict, "evict_calls": 0})


def serve(cls, n_requests: int, prompt_len: int, cache_tokens: int) -> dict:
    """The notebook's first figure through a RadixCache class: ``n_requests`` requests sharing a ``prompt_len``-token
    system prompt served by the RadixScheduler; every step's batch and hits."""
    from servelab.engine import prefix_compare
    from servelab.engine.radix import RadixEngine
    from servelab.schedulers.radix_scheduler import RadixScheduler, Req

    workload = prefix_compare.shared_system_prompt(n_requests, prompt_len, max_tokens=2)
    scheduler = type("Scheduler", (RadixScheduler,), {"cache_class": counted(guarded(cls))})
    sch = scheduler(kv_capacity_tokens=cache_tokens, max_num_batched_tokens=prefix_compare._budget(workload, None))
    engine = RadixEngine(sch, check=False)
    step = engine.step

    def counted_step():
        sch.tree_cache.evict_calls = 0
        return step()

    engine.step = counted_step
    try:
        prefix_compare._drive(workload, engine, lambda r: Req(list(r.prompt), r.max_tokens, name=r.name))
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - part of the run
        return {"steps": _steps(engine), "problem": f"step {len(engine.trace)} raised {type(e).__name__}: {e}"}
    return {"steps": _steps(engine)}


def _steps(engine) -> list:
    return [[r.kind, [[n, k] for n, k in r.scheduled], [[n, k] for n, k in r.cached]] for r in engine.trace]


# ------------------------------------------------------------------------------------------------
# the reference's runs: where the cases come from (the learner's lab and the grader; never the sandbox)


EXERCISES = ("child_key", "_match_len", "_split_node", "match_prefix", "insert")
LOCKS = ("inc_lock_ref", "dec_lock_ref", "evict")   # chapter 05's, recorded in the same runs


class _Recorder:
    """Every call of every exercise in one reference run, with the state it was made in; for a method that calls
    other exercises, the replay of those calls."""

    def __init__(self, label: str):
        self.label, self.where = label, ""
        self.frames: list[dict] = []
        self.cases: dict = {name: [] for name in (*EXERCISES, *LOCKS)}
        self.seen: set = set()

    def pure(self, cache, name: str, args: tuple, out) -> None:
        case = (cache.page_size, *[_ints(a) if isinstance(a, tuple | list) else a for a in args])
        key = json.dumps([name, case])
        if key not in self.seen:
            self.seen.add(key)
            self.cases[name].append(case)
        if self.frames:
            self.frames[-1][name][pure_key(name, cache.page_size, args)] = out

    def stateful(self, cache, name: str, run, text: str, args: tuple, split=None):
        before = snapshot(cache)
        where = f"{self.where} (page_size {cache.page_size})"
        if self.frames:
            where += f", inside {self.frames[-1]['$call']}"
        frame = {"$call": text, "child_key": {}, "_match_len": {}, "_split_node": {}}
        self.frames.append(frame)
        try:
            out = run()
        finally:
            self.frames.pop()
            replay = {k: v for k, v in frame.items() if not k.startswith("$")}
            self.cases[name].append((where, before, *args, replay) if name in EXERCISES else (where, before, *args))
        if split is not None and self.frames:
            self.frames[-1]["_split_node"][split_key(before, split[0].id, split[1])] = {
                "before": before, "after": snapshot(cache), "result": out.id, "child": split[0].id,
                "split_len": split[1]}
        return out


def _recording_class(rec: _Recorder) -> type:
    base = RadixCache

    class Recording(base):
        def child_key(self, key, offset=0):
            out = base.child_key(self, key, offset)
            rec.pure(self, "child_key", (key, offset), out)
            return out

        def _match_len(self, edge, key, offset):
            out = base._match_len(self, edge, key, offset)
            rec.pure(self, "_match_len", (edge, key, offset), out)
            return out

        def _split_node(self, child, split_len):
            return rec.stateful(self, "_split_node", lambda: base._split_node(self, child, split_len),
                                f"_split_node(the node {_show(path_of(self, child))}, {split_len})",
                                (child.id, split_len), split=(child, split_len))

        def match_prefix(self, key):
            return rec.stateful(self, "match_prefix", lambda: base.match_prefix(self, key),
                                f"match_prefix({_show(key)})", (list(key),))

        def insert(self, key, value):
            return rec.stateful(self, "insert", lambda: base.insert(self, key, value),
                                f"insert({_show(key)}, ...)", (list(key), list(value)))

        def inc_lock_ref(self, node):
            return rec.stateful(self, "inc_lock_ref", lambda: base.inc_lock_ref(self, node), "inc_lock_ref",
                                (node.id,))

        def dec_lock_ref(self, node):
            return rec.stateful(self, "dec_lock_ref", lambda: base.dec_lock_ref(self, node), "dec_lock_ref",
                                (node.id,))

        def evict(self, num_tokens):
            return rec.stateful(self, "evict", lambda: base.evict(self, num_tokens), "evict", (num_tokens,))

    return Recording


_RECORDS: dict = {}


def record(work: dict) -> dict:
    """A run of the reference through ``work``: every call of each exercise (and of chapter 05's locks and
    eviction) with the state it was made in, each with the replay it needs. Made once per workload."""
    key = json.dumps(work, sort_keys=True)
    if key not in _RECORDS:
        rec = _Recorder(work["label"])
        cache = _recording_class(rec)(page_size=work["page_size"], eviction_policy=work["policy"],
                                      token_to_kv_pool_allocator=Allocator())
        if "start" in work:
            set_tree(cache, work["start"])

        def before(k, _):
            rec.where = f"operation {k} of '{work['label']}'"

        run_ops(cache, work["ops"], before)
        _RECORDS[key] = rec.cases
    return _RECORDS[key]


def cases_of(exercise: str, workloads) -> list[tuple]:
    """The cases of ``exercise`` (a method name, or "RadixCache" for the whole class) from reference runs."""
    if exercise == "RadixCache":
        return [(w["label"], w) for w in workloads]
    out, seen = [], set()
    for w in workloads:
        for case in record(w)[exercise]:
            if exercise in ("child_key", "_match_len"):
                key = json.dumps(case)
                if key in seen:
                    continue
                seen.add(key)
            out.append(tuple(case))
    return out


# ------------------------------------------------------------------------------------------------
# the notebook's workloads (the visible checks; the grader adds its own)


def chapter_workloads() -> list[dict]:
    """The notebook's walk-throughs and visible asserts, then one workload per pitfall (order matters: a pitfall is
    named on the first case that fails, so a case that tells two pitfalls apart comes before one that does not)."""
    return [
        # first: a match through three whole edges, no split (what tells apart the ways of not stamping a walk)
        workload("a deep match refreshes its whole path (LRU order)", 1, [
            ("insert", [1, 2]), ("insert", [1, 2, 3, 4]), ("insert", [7, 7]), ("insert", [1, 2, 3, 4, 5, 6]),
            ("insert", [9]), ("match", [1, 2, 3, 4, 5, 6]), ("evict", 2), ("evict", 2), ("evict", 2)]),
        workload("the walk-through: three inserts and a match", 1, [
            ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 9]), ("match", [1, 2, 3, 7]), ("insert", [1, 2, 3, 4, 5])]),
        workload("the tree of four inserts", 1, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("insert", [1, 2, 3, 7, 8]), ("insert", [1, 2, 3, 4, 5, 9]),
            ("insert", [9, 9])]),
        workload("the pages walk (page_size 4)", 4, [
            ("insert", list(range(1, 11))), ("insert", [1, 2, 3, 9, 5, 6, 7, 8]), ("match", [1, 2, 3, 4, 5, 6, 0, 0])]),
        workload("the visible match_prefix checks", 1, [
            ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 9]), ("match", [1, 2, 3, 7]), ("match", [5, 6]),
            ("match", [])]),
        workload("the visible match_prefix check at page_size 2", 2, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("match", [1, 2, 3, 9, 5, 6])]),
        workload("the visible insert checks", 1, [
            ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 7, 8, 9]), ("match", [1, 2, 7, 8, 9]), ("insert", [1, 2, 7]),
            ("bad_insert", [5, 6, 7])]),
        workload("a locked handle whose edge is split", 1, [
            ("insert", [1, 2, 3, 4]), ("lock", [1, 2, 3, 4]), ("match", [1, 2, 9]), ("lock", [1, 2, 8]),
            ("unlock", 0), ("unlock", 0), ("evict", BIG)]),
        workload("a locked 8-token edge split at a page edge (page_size 4)", 4, [
            ("insert", range(8)), ("lock", range(8)), ("lock", range(8)), ("match", [0, 1, 2, 3, 4, 5, 9, 9]),
            ("unlock", 0), ("unlock", 0), ("evict", BIG)]),
        workload("keys that share part of a page (page_size 4)", 4, [
            ("insert", [1, 2, 3, 4, 5, 6, 7, 8]), ("insert", [1, 2, 3, 9, 5, 6, 7, 8]),
            ("match", [1, 2, 3, 9, 5, 6, 7, 0]), ("match", [1, 2, 3, 4, 5, 6, 7, 8, 1, 2])]),
        workload("a match and an insert that leave an edge mid-page (page_size 2)", 2, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("match", [1, 2, 3, 9, 5, 6]), ("insert", [1, 2, 3, 4, 5, 7]),
            ("match", [1, 2, 3])]),
        workload("the split suffix is touched (LRU order)", 1, [
            ("insert", [1, 2, 3, 4]), ("insert", [5, 5]), ("match", [1, 2]), ("evict", 1), ("evict", 1)]),
        workload("first writer wins", 1, [
            ("insert", [5, 6, 7]), ("insert", [5, 6, 7, 8]), ("match", [5, 6, 7, 8]), ("insert", [5, 6]),
            ("evict", BIG), ("insert", [5, 6, 7]), ("match", [5, 6, 7])]),
        workload("an insert that leaves an edge mid-way, under a lock", 1, [
            ("insert", [1, 2]), ("lock", [1, 2]), ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 7, 8, 9]),
            ("insert", [1, 2, 3]), ("unlock", 0), ("evict", 2), ("evict", BIG)]),
        workload("empty keys and misses", 1, [
            ("match", []), ("insert", []), ("lock", []), ("insert", [1]), ("lock", [2, 3]), ("unlock", 0),
            ("unlock", 0), ("match", [1, 1])]),
        workload("bad input", 2, [
            ("insert", [1, 2, 3, 4]), ("bad_insert", [1, 2, 3]), ("bad_insert", [5, 6]),
            ("bad_unlock", [1, 2, 3, 4]), ("bad_evict", 1), ("match", [1, 2])]),
    ]


def deep_workload(depth: int, steps=None) -> dict:
    """A tree that is one path ``depth`` nodes deep (page_size 1, one token an edge, a last edge of three tokens),
    then ``steps(key)`` of the path's whole key (by default a match through all of it, a match that splits its last
    edge, and an insert that branches off it): a walk longer than any bound a loop might be capped at. Built
    directly (not by ``depth`` inserts) and recorded from there (``work["start"]``); method cases only, not the
    whole class's."""
    cache = RadixCache()
    node, key = cache.root_node, []
    for i in range(depth):
        edge = (i + 1,) if i < depth - 1 else (i + 1, 0, 0)
        leaf = cache._new_node(key=edge, value=tuple(range(100_000 + len(key), 100_000 + len(key) + len(edge))),
                               parent=node)
        node.children[edge[0]] = leaf
        key, node = key + list(edge), leaf
    cache.evictable_size_ = len(key)
    cache._update_leaf_status(node)
    steps = steps or (lambda k: [("match", k + [7]), ("match", k[:-1]), ("insert", k[:-2] + [5, 5])])
    work = workload(f"a path {depth} nodes deep", 1, steps(key))
    work["start"] = snapshot(cache)
    return work


SHARED_PROMPT_SERVE = {"label": "100 requests sharing a 2000-token system prompt",
                "serve": {"n_requests": 100, "prompt_len": 2000, "cache_tokens": 8192}}


def child_key_cases() -> list[tuple]:
    """The docstring's and the visible asserts' calls, then every call of the notebook's workloads."""
    return [(1, [5, 6, 7, 8], 1), (2, [5, 6, 7, 8], 2), (1, [1, 2, 3, 4, 5, 6, 7, 8], 0),
            (1, [1, 2, 3, 4, 5, 6, 7, 8], 5), (4, [1, 2, 3, 4, 5, 6, 7, 8], 0), (4, [1, 2, 3, 4, 5, 6, 7, 8], 4),
            (4, [1, 2, 3, 9, 5, 6, 7, 8], 0), *cases_of("child_key", chapter_workloads())]


def match_len_cases() -> list[tuple]:
    return [(1, [1, 2, 3, 4], [1, 2, 3, 9], 0), (2, [1, 2, 3, 4], [1, 2, 3, 9], 0), (1, [3, 4], [1, 2, 3, 4, 5], 2),
            (1, [3, 4, 5], [1, 2, 3], 2), (1, [7, 8], [1, 2], 0),
            (4, [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 0], 0),
            *cases_of("_match_len", chapter_workloads())]


# ------------------------------------------------------------------------------------------------
# reading and showing results


def _pure_norm(raw, args):
    if not isinstance(raw, dict) or "result" not in raw:
        raise Shape(f"the driver returned {_short.repr(raw)}")
    return raw["result"]


def _child_key_note(args, got, want) -> str:
    if isinstance(got, list) and isinstance(want, tuple):
        return " (A tuple: a dict key must be hashable.)"
    return ""


def _norm(keys: tuple[str, ...]):
    """A driven call's result as compared: its fields ``keys`` and the tree by path, or what it raised, or the
    call of another exercise it made in a state the reference never made it in."""
    def norm(raw, args):
        if not isinstance(raw, dict):
            raise Shape(f"the driver returned {_short.repr(raw)}")
        if "problem" in raw:
            raise Shape(str(raw["problem"]))
        out = {k: raw[k] for k in ("diverged", *keys) if k in raw}
        if "raised" in raw:
            out["raised"] = raw["raised"]
        out["tree"] = view(raw["state"])
        return out
    return norm


def _show_result(v: dict) -> str:
    if "diverged" in v:
        return f"(it called {v['diverged']} in a state the reference never calls it in)"
    if "raised" in v:
        return f"raised {v['raised']}"
    if "node" in v:
        where = _show(v["node"], 16) if isinstance(v["node"], list) else v["node"]
        return f"{_show(v['result'], 16)}, ending at the node whose path is {where}"
    if "handle" in v:
        new = "a new node" if v["new"] else "the node it was given (child itself)"
        return f"{new} ending at {_show(v['result'])}; child now ends at {_show(v['handle'])}"
    return str(v.get("result"))


def _before(args) -> dict | None:
    return next((a for a in args if isinstance(a, dict) and "nodes" in a), None)


def _replay_of(args) -> dict | None:
    return next((a for a in args if isinstance(a, dict) and "_split_node" in a), None)


def _note(args, got, want) -> str:
    before = _before(args)
    lines = []
    if "diverged" in got:
        body = "it made a call the reference does not make here"
        replay = _replay_of(args)
        entries = list(replay["_split_node"].values()) if replay else []
        if got["diverged"].startswith("_split_node") and entries:
            e = entries[0]
            theirs = view(e["before"])
            diff = tree_difference(got["tree"], theirs)
            body = (f"the reference calls _split_node(the node {_show(path_by_id(e['before'], e['child']))}, "
                    f"{e['split_len']}) in the tree below; " + (f"when yours called, {diff}" if diff else
                                                                "yours called it in that tree, with other arguments"))
        elif got["diverged"].startswith("_split_node"):
            body = "the reference does not split an edge in this call"
        lines.append(f"First difference: {body}")
    elif all(got.get(k) == want.get(k) for k in ("raised", "result", "node", "new", "handle")):
        # what it returned is right (the line above): the tree it left is not
        lines.append(f"First difference: {tree_difference(got['tree'], want['tree']) or 'the trees differ'}")
    if before is not None:
        lines.append("The tree before the call:")
        lines += [f"    {ln}" for ln in tree_text(before).splitlines()]
    return "\n" + "\n".join(lines)


def path_by_id(state: dict, node_id) -> list:
    rows = state["nodes"]
    parent = {j: i for i, r in enumerate(rows) for _, j in r[CHILDREN]}
    i = next((i for i, r in enumerate(rows) if r[ID] == node_id), 0)
    parts = []
    while i in parent:
        parts.append(rows[i][KEY])
        i = parent[i]
    return [t for p in reversed(parts) for t in p]


def _trace_norm(raw, args):
    if not isinstance(raw, dict) or not ("trace" in raw or "steps" in raw):
        raise Shape(f"the driver returned {_short.repr(raw)}")
    return raw


def _show_run(v: dict) -> str:
    if "steps" in v:
        skipped = sum(k for kind, _, cached in v["steps"] if kind == "P" for _, k in cached)
        return f"{skipped:,} prefill tokens from the cache in {len(v['steps'])} steps"
    last = v["trace"][-1][1] if v["trace"] else None
    sizes = f" leaving sizes (evictable, protected, total) {tuple(last)}" if isinstance(last, list) else ""
    return f"a run of {len(v['trace'])} operations{sizes}"


def result_text(result: list) -> str:
    kind = result[0]
    if kind == "bad":
        return result[2]
    if len(result) > 2 and result[1] == "raised":
        return f"raised {result[2]}: {result[3]}"
    if kind == "insert":
        return f"returned {result[2]}"
    if kind == "match":
        if result[1] == "malformed":
            return result[2]
        where = _show(result[3], 16) if isinstance(result[3], list) else result[3]
        text = f"returned {_show(result[2], 16)}, ending at the node whose path is {where}"
        rest = result[4:]
        if rest and rest[0] == "lock":
            text += f"; inc_lock_ref returned {rest[2]}" if rest[1] == "ok" else f"; inc_lock_ref raised {rest[2]}"
        elif rest and rest[0] == "bad":
            text += f"; dec_lock_ref {rest[2]}"
        return text
    if kind == "unlock":
        return f"returned {result[2]}" if len(result) > 2 else result[1]
    if kind == "evict":
        return f"returned {_show(result[2], 16)}; the allocator was handed {result[3]}"
    return "done"


def _observation_difference(mine: list, theirs: list) -> str:
    if mine[0] != theirs[0]:
        return "what the call returned (above)"
    if mine[1] != theirs[1]:
        return tree_difference({"sizes": mine[1], "problems": [], "rows": []},
                               {"sizes": theirs[1], "problems": [], "rows": []}) or "the sizes differ"
    return tree_difference({"sizes": [], "rows": mine[2], "problems": mine[3]},
                           {"sizes": [], "rows": theirs[2], "problems": theirs[3]}) or "the trees differ"


def trace_note(args, got, want, who: str = "Your RadixCache") -> str:
    """The first operation at which the learner's run differs from the reference's: the operations before it,
    the tree before it, both results, the first difference."""
    work = args[1]
    if "steps" in want:
        return _serve_note(got, want)
    for k, (mine, theirs) in enumerate(zip(got["trace"], want["trace"])):
        if mine == theirs:
            continue
        lines = [f"\n{who} differs from the reference at operation {k} of the workload '{work['label']}' "
                 f"(page_size {work['page_size']}):"]
        if k:
            lines.append("  operations before it (the same on both sides):")
            if k > 8:
                lines.append(f"    ... {k - 8} earlier operations")
            lines += [f"    {j:>3}  {op_text(work['ops'][j])} -> {result_text(want['trace'][j][0])}"
                      for j in range(max(0, k - 8), k)]
        lines.append(f"  operation {k}: {op_text(work['ops'][k])}")
        lines.append("  the tree before it:")
        rows = want["trace"][k - 1][2] if k else []
        lines += [f"    {ln}" for ln in rows_text(rows).splitlines()]
        if mine[0] != theirs[0]:
            lines.append(f"  yours:         {result_text(mine[0])}")
            lines.append(f"  the reference: {result_text(theirs[0])}")
        lines.append(f"First difference: {_observation_difference(mine, theirs)}")
        return "\n".join(lines)
    return f"\nYour run has {len(got['trace'])} operations; the reference's {len(want['trace'])}."


def _serve_note(got, want) -> str:
    for k, (mine, theirs) in enumerate(zip(got["steps"], want["steps"])):
        if mine != theirs:
            def show(s):
                pairs = lambda items: " ".join(f"{n}:{t}" for n, t in items)
                return f"{'prefill' if s[0] == 'P' else 'decode'} {pairs(s[1])} (cached {pairs(s[2])})"

            return f"\nFirst difference at step {k}: yours {show(mine)}; the reference's {show(theirs)}"
    if "problem" in got:
        return f"\n{got['problem']}"
    return f"\nYour run takes {len(got['steps'])} steps; the reference's {len(want['steps'])}."


def _at(args) -> str:
    return f" at {args[0]}"


def _split_call(a) -> str:
    return f"_split_node(the node {_show(path_by_id(a[1], a[2]))}, split_len={a[3]}){_at(a)}"


SPECS = {s.name: s for s in [
    Spec("child_key", ("page_size", "key", "offset"), RadixCache.child_key, _pure_norm, repr,
         driver=f"{__name__}:drive_child_key", note=_child_key_note,
         call=lambda a: f"child_key(key={_tuple(a[1])}, offset={a[2]}) with page_size {a[0]}"),
    Spec("_match_len", ("page_size", "edge", "key", "offset"), RadixCache._match_len, _pure_norm, repr,
         driver=f"{__name__}:drive_match_len",
         call=lambda a: f"_match_len(edge={_tuple(a[1])}, key={_tuple(a[2])}, offset={a[3]}) with page_size "
                        f"{a[0]}"),
    Spec("_split_node", ("where", "state", "child", "split_len", "replay"), RadixCache._split_node,
         _norm(("result", "new", "handle")), _show_result, driver=f"{__name__}:drive_split_node", note=_note,
         call=_split_call),
    Spec("match_prefix", ("where", "state", "key", "replay"), RadixCache.match_prefix,
         _norm(("result", "node")), _show_result, driver=f"{__name__}:drive_match_prefix", note=_note,
         call=lambda a: f"match_prefix({_show(a[2])}){_at(a)}"),
    Spec("insert", ("where", "state", "key", "value", "replay"), RadixCache.insert, _norm(("result",)),
         _show_result, driver=f"{__name__}:drive_insert", note=_note,
         call=lambda a: f"insert({_show(a[2])}, {_show(a[3])}){_at(a)}"),
    Spec("RadixCache", ("where", "workload"), RadixCache, _trace_norm, _show_run,
         driver=f"{__name__}:drive_radix_cache", note=trace_note,
         call=lambda a: f"your RadixCache on the workload '{a[0]}'"),
]}


VISIBLE = {"child_key": child_key_cases, "_match_len": match_len_cases,
           "RadixCache": lambda: [*cases_of("RadixCache", chapter_workloads()),
                                  (SHARED_PROMPT_SERVE["label"], SHARED_PROMPT_SERVE)]}


def visible_cases(name: str) -> list[tuple]:
    return VISIBLE[name]() if name in VISIBLE else cases_of(name, chapter_workloads())


def _pure_case(name: str, args: tuple):
    """A visible assert's own call of ``child_key(cache, key, offset=0)`` or ``_match_len(cache, edge, key,
    offset)`` as the case the Spec takes (the page size, the sequences as lists), or None when it is not one."""
    try:
        cache, *rest = args
        page_size = cache.page_size
        if name == "child_key" and len(rest) in (1, 2):
            return (page_size, list(rest[0]), rest[1] if len(rest) == 2 else 0)
        if name == "_match_len" and len(rest) == 3:
            return (page_size, list(rest[0]), list(rest[1]), rest[2])
    except (AttributeError, TypeError, ValueError):
        pass
    return None


def diagnose(exercise: str, fn, *args) -> str:
    """What is wrong with the learner's ``fn`` (their method, or their RadixCache class for ``"radix_cache"``) on
    the notebook's workloads, in their terms, for a visible assert's message. Never raises. For ``child_key`` and
    ``_match_len``, ``args`` are the failing assert's own arguments (the cache first): the message is about that
    very call."""
    name = "RadixCache" if exercise == "radix_cache" else exercise
    case = _pure_case(name, args) if args else None
    if case is not None:
        return spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, case, name)
    return spec.diagnose_cases(SPECS, ASSIGNMENT, fn, name, lambda: visible_cases(name), exercise)


__all__ = ["ASSIGNMENT", "SPECS", "build", "cases_of", "chapter_workloads", "diagnose", "record", "snapshot", "view",
           "workload"]
