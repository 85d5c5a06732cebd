"""Hidden-test helpers for ``ch04_radix_cache``.

The learner writes SGLang's RadixCache piece by piece: ``child_key``, ``_match_len``, ``_split_node``,
``match_prefix`` and ``insert``. Each is a plain function taking the cache as ``self``; a check attaches it to a
subclass of the reference (:class:`servelab.radix_cache.RadixCache`), so everything else is the reference's,
and replays operation sequences on that class and on the reference side by side: insert, match, lock (a
match then ``inc_lock_ref`` of the node it returned), unlock, evict, reset, and bad input that must raise
``ValueError``. After every operation it compares what the call returned (lengths, KV indices, the path of
the returned node, freed indices in order, and what the allocator was handed), the three size counters and
the whole tree: every node's path, edge tokens, KV indices, ``lock_ref``, membership of ``evictable_leaves``,
the order of the nodes' last access times (only the order matters, so the clock may tick differently), the
child keys nodes are stored under and the parent pointers.

Sequences: one small scenario per named pitfall, then long seeded random ones (page sizes 1, 2 and 4, two or
three distinct tokens so keys share prefixes and split edges often, empty keys included). The first
difference is reported in the learner's terms: the scenario, the operations before it, the tree before it,
both results, and, first, the pitfall that explains it when one does (found by replaying the same operations
with that mistake built in and getting exactly the learner's results).

:mod:`servelab_autograder.ch05` reuses this machinery for ``inc_lock_ref``, ``dec_lock_ref`` and ``evict``.
Failures raise ``AssertionError`` explicitly (the checks also work under ``python -O``). :func:`diagnose`
returns the message a check would raise, for visible asserts.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from servelab.costmodel import LLAMA2_7B, KiB
from servelab.radix_cache import RadixCache, TreeNode
from servelab.scheduler import BlockManager
from servelab.scheduler import Sequence as NanoSequence
from servelab_autograder import common
from servelab_autograder.common import time_limit

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_child_key",
    "check_drills",
    "check_insert",
    "check_match_len",
    "check_match_prefix",
    "check_radix_cache",
    "check_split_node",
    "diagnose",
]

# Every pitfall the chapter names, in the words of its "Common pitfalls" list. Each known-wrong submission
# in autograder/known_wrong/ch04_radix_cache/ produces one of these messages.
PITFALLS = {
    "first_token_key": "Pitfall: page-size keys compared by first token only. With page_size > 1 a child hangs "
    "under its whole first page (a tuple of page_size tokens); under its first token, keys that share only part "
    "of a page collide, and the walk splits an edge at 0 tokens or loops for ever.",
    "not_rounded": "Pitfall: the common length was not rounded down to whole pages. Edges and matches hold whole "
    "pages only: 3 equal tokens at page_size 2 are one page (2 tokens).",
    "split_no_lock_copy": "Pitfall: lock_ref not copied on a split. Every lock through the old node also runs "
    "through its new upper part, and unlocking walks through it: with 0 there it goes to -1 and corrupts the "
    "size counters.",
    "split_new_lower": "Pitfall: the new node took the lower part of the split. The new node is the upper part; "
    "the original node object keeps the lower part, so handles held by running requests still end their prefix.",
    "match_no_split": "Pitfall: no split when a match ends mid-edge. The returned node must end exactly at the "
    "matched length, or a lock on it protects tokens that were not matched (and a later split sees them).",
    "match_no_touch": "Pitfall: the nodes a match walks were not stamped with the call's time. LRU eviction "
    "reads last_access_time: a match must refresh every node it reaches, the one it splits included.",
    "insert_overwrites": "Pitfall: insert overwrote KV that was already cached (last writer wins). The first "
    "writer wins: the tree keeps its indices and the caller frees its own copies of the returned prefix.",
    "insert_double_count": "Pitfall: sizes double-counted. insert adds only the new leaf's tokens to "
    "evictable_size_, not the whole key (the prefix that was already cached is counted already).",
    "insert_no_length_check": "Pitfall: insert accepted a value whose length differs from the key's. It must "
    "raise ValueError before changing anything: one KV index per token.",
    "insert_return": "Pitfall: insert must return how many leading tokens were already cached (the prefix the "
    "caller has to free its own indices for), not how many it added.",
}

_short = common.short_repr(12, 80)

_RANDOM_SEED = 4040
_CASE_SECONDS = 10          # a scenario that takes longer is an endless loop (the slowest takes ~0.1 s)
_TREE_LIMIT = 5000          # nodes; a learner's tree larger than this has a cycle or runs away


def _show(tokens, limit: int = 10) -> str:
    tokens = list(tokens)
    head = ", ".join(map(str, tokens[:limit]))
    return f"[{head}{', ...' if len(tokens) > limit else ''}]"


# --------------------------------------------------------------------------------------------------------
# operation sequences


@dataclass(frozen=True)
class Op:
    """One operation. lock: match_prefix(key) then inc_lock_ref(node); unlock: dec_lock_ref of held handle
    number n (modulo how many are held; nothing when none is); bad_insert: a value one index short;
    bad_unlock: match_prefix(key) then dec_lock_ref(node) when that node is not the root and holds no lock
    (must raise ValueError; a plain match otherwise); bad_evict: evict(-n)."""
    kind: str
    key: tuple = ()
    value: tuple = ()
    n: int = 0

    def text(self) -> str:
        k = _show(self.key)
        return {
            "insert": f"insert({k}, {_show(self.value)})",
            "match": f"match_prefix({k})",
            "lock": f"inc_lock_ref(match_prefix({k}) node)",
            "unlock": f"dec_lock_ref(held node #{self.n})",
            "evict": f"evict({self.n})",
            "reset": "reset()",
            "bad_insert": f"insert({k}, {_show(self.value)})  (one index short: must raise ValueError)",
            "bad_unlock": f"dec_lock_ref(match_prefix({k}) node)  (no lock on it: must raise ValueError)",
            "bad_evict": f"evict({-self.n})  (negative: must raise ValueError)",
        }[self.kind]


@dataclass(frozen=True)
class Case:
    label: str
    page_size: int
    ops: tuple[Op, ...]
    policy: str = "lru"


class _Kv:
    """Fresh KV indices for each insert, so values show who wrote them."""

    def __init__(self, start: int = 10):
        self.next = start

    def take(self, n: int) -> tuple:
        out = tuple(range(self.next, self.next + n))
        self.next += n
        return out


def _script(label: str, page_size: int, steps, policy: str = "lru") -> Case:
    """steps: ("insert", key) | ("match", key) | ("lock", key) | ("unlock", n) | ("evict", n) | ("reset",) |
    ("bad_insert", key) | ("bad_unlock", key) | ("bad_evict", n); insert values are fresh indices."""
    kv, ops = _Kv(), []
    for step in steps:
        kind = step[0]
        if kind in ("insert", "bad_insert"):
            key = tuple(step[1])
            value = kv.take(len(key))
            ops.append(Op(kind, key, value if kind == "insert" else value[:-1]))
        elif kind in ("match", "lock", "bad_unlock"):
            ops.append(Op(kind, tuple(step[1])))
        elif kind in ("unlock", "evict", "bad_evict"):
            ops.append(Op(kind, n=step[1]))
        else:
            ops.append(Op("reset"))
    return Case(label, page_size, tuple(ops), policy)


_EVICT_SIZES = (0, 1, 2, 3, 5, 8, 10**6)
_OPS = ("insert", "match", "lock", "unlock", "evict", "reset", "bad_insert", "bad_unlock", "bad_evict")


def random_case(seed: int, n_ops: int, page_size: int, weights=(30, 20, 12, 12, 15, 1, 1, 2, 1),
                label: str | None = None) -> Case:
    rng = random.Random(seed)
    alphabet = rng.choice([2, 3])
    kv, ops = _Kv(), []
    for _ in range(n_ops):
        kind = rng.choices(_OPS, weights=weights)[0]
        key = tuple(rng.randrange(alphabet) for _ in range(rng.randrange(0, 4 * page_size + 3)))
        if kind == "insert":
            ops.append(Op(kind, key, kv.take(len(key))))
        elif kind == "bad_insert":
            key = key or (0,)
            ops.append(Op(kind, key, kv.take(len(key) - 1)))
        elif kind in ("match", "lock", "bad_unlock"):
            ops.append(Op(kind, key))
        elif kind == "unlock":
            ops.append(Op(kind, n=rng.randrange(1000)))
        elif kind == "evict":
            ops.append(Op(kind, n=rng.choice(_EVICT_SIZES)))
        elif kind == "bad_evict":
            ops.append(Op(kind, n=rng.choice([1, 5])))
        else:
            ops.append(Op(kind))
    return Case(label or f"random sequence {seed} ({n_ops} operations, page_size {page_size})", page_size,
                tuple(ops))


@functools.cache
def random_cases(seed: int, n: int, n_ops: int) -> tuple[Case, ...]:
    return tuple(random_case(seed * 1000 + i, n_ops, (1, 2, 4)[i % 3]) for i in range(n))


# --------------------------------------------------------------------------------------------------------
# observing a cache


class Recorder:
    """The KV allocator: records what evict hands it."""

    def __init__(self):
        self.freed: list[list[int]] = []

    def free(self, indices):
        self.freed.append([_int(i) for i in indices])



def _int(x):
    if type(x) is int or isinstance(x, bool):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    return x


def _tuple(x) -> tuple:
    try:
        t = tuple(x)
    except TypeError:
        return (repr(x),)
    if all(type(i) is int for i in t):
        return t
    return tuple(_int(i) for i in t)


def _plain_key(x):
    if isinstance(x, tuple | list):
        return tuple(_int(t) for t in x)
    return _int(x)


def _ref_child_key(page_size: int, key: tuple):
    return key[0] if page_size == 1 else tuple(key[:page_size])


@dataclass(frozen=True)
class Obs:
    """What one operation did: its result, the sizes after it, the tree after it."""
    result: tuple
    sizes: tuple
    rows: tuple
    problems: tuple


def tree_rows(cache, page_size: int) -> tuple[tuple, tuple]:
    """(rows, problems). One row per node but the root, sorted by path: (path, edge, KV indices, lock_ref,
    rank of last_access_time, in evictable_leaves). Problems: broken parent pointers, wrong child keys, a bad
    root, a stale node in evictable_leaves."""
    root = cache.root_node
    leaves = getattr(cache, "evictable_leaves", set())
    rows, problems, seen = [], [], set()
    if getattr(root, "lock_ref", None) != 1 or tuple(getattr(root, "key", ())) != ():
        problems.append("the root must keep an empty key and lock_ref 1")
    stack = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            problems.append(f"the node at {_show(path)} is reachable twice (a cycle?)")
            continue
        seen.add(id(node))
        if len(seen) > _TREE_LIMIT:
            problems.append(f"the tree has more than {_TREE_LIMIT} nodes: a node links back to an ancestor?")
            break
        key = () if node is root else _tuple(node.key)
        full = path + key
        if node is not root:
            rows.append([full, key, _tuple(node.value), _int(node.lock_ref), node.last_access_time, node in leaves])
        children = getattr(node, "children", {})
        for ck, child in list(children.items()):
            ckey = _tuple(getattr(child, "key", ()))
            if not ckey:
                problems.append(f"the node under {_show(full)} has an empty edge (a split at 0 tokens?)")
            elif _plain_key(ck) != _ref_child_key(page_size, ckey):
                problems.append(f"the child {_show(full + ckey)} hangs under the child key {ck!r}; it should be "
                                f"{_ref_child_key(page_size, ckey)!r}")
            if getattr(child, "parent", None) is not node:
                problems.append(f"the node {_show(full + ckey)} has a parent pointer that is not the node it hangs "
                                "under")
            stack.append((child, full))
    stale = [n for n in leaves if id(n) not in seen]
    if stale:
        problems.append(f"evictable_leaves holds {len(stale)} node(s) no longer in the tree")
    try:
        times = sorted({r[4] for r in rows})
        rank = {t: i for i, t in enumerate(times)}
        for r in rows:
            r[4] = rank[r[4]]
    except TypeError:
        problems.append("last_access_time must be a number (use self._tick())")
    rows.sort(key=lambda r: r[0])
    return tuple(tuple(r) for r in rows), tuple(problems)


def tree_text(cache, limit: int = 40) -> str:
    """The tree, pretty_print style but safe on a broken tree; at most `limit` nodes."""
    lines, seen = [], set()
    stack = [(cache.root_node, 0)]
    while stack and len(lines) < limit:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        text = "root" if node is cache.root_node else f"{_show(_tuple(node.key))} kv={_show(_tuple(node.value))}"
        lines.append(f"{'  ' * depth}{text} r={node.lock_ref} t={node.last_access_time}")
        stack.extend((c, depth + 1) for c in reversed(list(getattr(node, "children", {}).values())))
    if stack:
        lines.append(f"{'  ' * 1}...")
    return "\n".join(lines)


class Side:
    """One cache driven through a case; apply(op) performs it and returns what it observed."""

    def __init__(self, cls: type, case: Case):
        self.case = case
        self.alloc = Recorder()
        self.cache = cls(page_size=case.page_size, eviction_policy=case.policy, token_to_kv_pool_allocator=self.alloc)
        self.handles: list = []

    def _call(self, fn, *args):
        try:
            return ("ok", fn(*args))
        except _ReferenceCalled:
            raise
        except NotImplementedError as e:
            raise _NotFilled(str(e)) from None
        except RecursionError:
            return ("raised", "RecursionError", "maximum recursion depth exceeded")
        except Exception as e:  # noqa: BLE001 - reported as a result, compared with the reference's
            return ("raised", type(e).__name__, str(e))

    def apply(self, op: Op) -> Obs:
        c = self.cache
        self.alloc.freed.clear()
        if op.kind == "insert":
            r = self._call(c.insert, list(op.key), list(op.value))
            result = ("insert", *_res(r, _int))
        elif op.kind == "bad_insert":
            r = self._call(c.insert, list(op.key), list(op.value))
            result = ("bad", r[0] == "raised" and r[1] == "ValueError", _kind(r))
        elif op.kind in ("match", "lock", "bad_unlock"):
            r = self._call(c.match_prefix, list(op.key))
            m = _match_result(c, r)
            result = ("match", *m)
            if r[0] == "ok" and m[0] == "ok":
                node = r[1][1]
                if op.kind == "lock":
                    d = self._call(c.inc_lock_ref, node)
                    if d[0] == "ok":
                        self.handles.append(node)
                    result += ("lock", *_res(d, _int))
                elif op.kind == "bad_unlock" and node is not c.root_node and _int(node.lock_ref) == 0:
                    d = self._call(c.dec_lock_ref, node)
                    result += ("bad", d[0] == "raised" and d[1] == "ValueError", _kind(d))
        elif op.kind == "unlock":
            if self.handles:
                node = self.handles.pop(op.n % len(self.handles))
                result = ("unlock", *_res(self._call(c.dec_lock_ref, node), _int))
            else:
                result = ("unlock", "nothing held")
        elif op.kind == "evict":
            r = self._call(c.evict, op.n)
            result = ("evict", *_res(r, lambda x: _tuple(x) if x is not None else None), _tuple_list(self.alloc.freed))
        elif op.kind == "bad_evict":
            r = self._call(c.evict, -op.n)
            result = ("bad", r[0] == "raised" and r[1] == "ValueError", _kind(r))
        else:
            r = self._call(c.reset)
            self.handles = []
            result = ("reset", r[0])
        try:
            sizes = (_int(c.evictable_size()), _int(c.protected_size()), _int(c.total_size()))
        except Exception as e:  # noqa: BLE001
            sizes = ("unreadable", type(e).__name__)
        rows, problems = tree_rows(c, self.case.page_size)
        return Obs(result, sizes, rows, problems)


def _tuple_list(chunks) -> tuple:
    return tuple(tuple(ch) for ch in chunks)


def _kind(r) -> str:
    return f"raised {r[1]}" if r[0] == "raised" else f"returned {_short.repr(r[1])}"


def _res(r, conv) -> tuple:
    if r[0] == "raised":
        return ("raised", r[1], r[2])
    try:
        return ("ok", conv(r[1]))
    except Exception:  # noqa: BLE001
        return ("ok", repr(r[1]))


def _path(cache, node) -> tuple:
    parts, guard = [], 0
    while node is not None and node is not cache.root_node and guard < _TREE_LIMIT:
        parts.append(_tuple(node.key))
        node = getattr(node, "parent", None)
        guard += 1
    if node is None:
        return ("not in the tree",)
    return tuple(t for p in reversed(parts) for t in p)


def _match_result(cache, r) -> tuple:
    if r[0] == "raised":
        return ("raised", r[1], r[2])
    got = r[1]
    if not isinstance(got, tuple) or len(got) != 2:
        return ("malformed", f"match_prefix returned {_short.repr(got)}; return (list of KV indices, last node)")
    indices, node = got
    if not isinstance(node, TreeNode):
        return ("malformed", f"match_prefix returned {_short.repr(node)} as its node; return the TreeNode where the "
                "match ends")
    try:
        indices = [_int(i) for i in indices]
    except TypeError:
        return ("malformed", f"match_prefix returned {_short.repr(indices)} as its indices; return a list of ints")
    return ("ok", tuple(indices), _path(cache, node))


# --------------------------------------------------------------------------------------------------------
# the learner's code must be the learner's


class _ReferenceCalled(AssertionError):
    pass


class _NotFilled(Exception):
    pass


# what each exercise replaces -> code objects of the reference it must not call (ch05 adds its hook's)
FORBIDDEN = {
    "child_key": common.codes(RadixCache.child_key),
    "_match_len": common.codes(RadixCache._match_len),
    "_split_node": common.codes(RadixCache._split_node),
    "match_prefix": common.codes(RadixCache.match_prefix),
    "insert": common.codes(RadixCache.insert),
    "inc_lock_ref": common.codes(RadixCache.inc_lock_ref),
    "dec_lock_ref": common.codes(RadixCache.dec_lock_ref),
    "evict": common.codes(RadixCache.evict),
}
_WATCH = common.ReferenceWatch(FORBIDDEN, _ReferenceCalled)
wrap = _WATCH.wrap


def reject_reference(fn, key: str, module: str = "servelab.radix_cache.RadixCache") -> None:
    common.reject_reference(fn, key, FORBIDDEN[key], _short, f"{module}.{key}")


def no_reference_calls(what: str = "servelab.radix_cache.RadixCache"):
    """Refuse calls into the reference while the learner's wrapped methods run; the message names the function
    called after the module of ``what`` (the reference class)."""
    return _WATCH.no_calls(what.rsplit(".", 1)[0])


# --------------------------------------------------------------------------------------------------------
# lockstep replay


def _result_text(result: tuple) -> str:
    kind = result[0]
    if kind == "bad":
        return result[2]
    if len(result) > 1 and result[1] == "raised":
        return f"raised {result[2]}: {result[3]}"
    if kind == "insert":
        return f"returned {result[2]}"
    if kind == "match":
        if result[1] == "malformed":
            return result[2]
        text = f"returned {_show(result[2], 16)}, ending at the node whose path is {_show(result[3], 16)}"
        rest = result[4:]
        if rest and rest[0] == "lock":
            text += f"; inc_lock_ref returned {rest[2]}" if rest[1] == "ok" else f"; inc_lock_ref raised {rest[2]}"
        elif rest and rest[0] == "bad":
            text += f"; dec_lock_ref {rest[2]}"
        return text
    if kind == "unlock":
        return f"returned {result[2]}" if len(result) > 2 else result[1]
    if kind == "evict":
        return f"returned {_show(result[2], 16)}; the allocator was handed {list(map(list, result[3]))}"
    return "done"


def _first_diff(mine: Obs, want: Obs) -> str | None:
    if mine.result != want.result:
        return "what the call returned (above)"
    if mine.sizes != want.sizes:
        names = ("evictable_size()", "protected_size()", "total_size()")
        if mine.sizes[0] == "unreadable":
            return f"reading the sizes raised {mine.sizes[1]}"
        i = next(i for i, (a, b) in enumerate(zip(mine.sizes, want.sizes)) if a != b)
        return (f"{names[i]} is {mine.sizes[i]}; the reference's is {want.sizes[i]} (evictable, protected, total: "
                f"yours {mine.sizes}, the reference's {want.sizes})")
    if mine.problems:
        return mine.problems[0]
    if mine.rows != want.rows:
        return _rows_diff(mine.rows, want.rows)
    return None


_ROW_FIELDS = ("path", "edge", "KV indices", "lock_ref", "last access order", "membership of evictable_leaves")


def _rows_diff(mine: tuple, want: tuple) -> str:
    m = {r[0]: r for r in mine}
    w = {r[0]: r for r in want}
    for path in sorted(set(m) | set(w)):
        if path not in m:
            return f"the reference's tree has a node ending at {_show(path)} (edge {_show(w[path][1])}); yours has none"
        if path not in w:
            return f"your tree has a node ending at {_show(path)} (edge {_show(m[path][1])}); the reference's has none"
        a, b = m[path], w[path]
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            if i == 4:
                order = lambda rows: " < ".join(_show(r[1]) for r in sorted(rows, key=lambda r: (r[4], r[0])))
                return ("the order of the nodes' last access times differs: yours "
                        f"{order(mine)}; the reference's {order(want)} (least recent first)")
            return f"the node ending at {_show(path)} has {_ROW_FIELDS[i]} {a[i]}; the reference's has {b[i]}"
    return "the trees differ"


class Diverged(AssertionError):
    pass


def _message(who: str, case: Case, k: int, body: str, pitfall: str | None, history: list[str], before: str,
             mine: Obs | None, want: Obs | None) -> str:
    lines = [PITFALLS_ALL[pitfall]] if pitfall else []
    lines.append(f"{who} differs from the reference at operation {k} of the scenario '{case.label}' "
                 f"(page_size {case.page_size}):")
    if history:
        lines.append("  operations before it (the same on both sides):")
        skipped = len(history) - 8
        if skipped > 0:
            lines.append(f"    ... {skipped} earlier operations")
        lines += [f"    {h}" for h in history[-8:]]
    lines.append(f"  operation {k}: {case.ops[k].text()}")
    lines.append("  the tree before it:")
    lines += [f"    {ln}" for ln in before.splitlines()]
    if mine is not None and want is not None and mine.result != want.result:
        lines.append(f"  yours:         {_result_text(mine.result)}")
        lines.append(f"  the reference: {_result_text(want.result)}")
    lines.append(f"First difference: {body}")
    return "\n".join(lines)


PITFALLS_ALL: dict[str, str] = dict(PITFALLS)   # ch05 adds its own


def replay(case: Case, cls: type) -> list[Obs]:
    """Run the case on one class; a learner error (NotImplementedError) propagates."""
    side = Side(cls, case)
    return [side.apply(op) for op in case.ops]


def lockstep(case: Case, cls: type, who: str, variants: Mapping[str, list] = (), prop=None) -> None:
    """Run the case on `cls` and on the reference; raise Diverged at the first difference, naming the pitfall
    whose variant reproduces every observation up to it, or else the one `prop(op, reference's observation
    before the op, yours, the reference's)` names."""
    mine, want = Side(cls, case), Side(RadixCache, case)
    seen: list[Obs] = []
    history: list[str] = []
    prev = None
    for k, op in enumerate(case.ops):
        w = want.apply(op)
        try:
            m = mine.apply(op)
        except _NotFilled:
            raise AssertionError(common.not_filled(who)) from None
        seen.append(m)
        body = _first_diff(m, w)
        if body:
            pitfall = _attribute(case, k, seen, variants)
            if pitfall is None and prop is not None:
                pitfall = prop(op, prev, m, w)
            before = Side(RadixCache, case)
            for earlier in case.ops[:k]:
                before.apply(earlier)
            raise Diverged(_message(who, case, k, body, pitfall, history, tree_text(before.cache), m, w))
        history.append(f"{k:>3}  {op.text()} -> {_result_text(w.result)}")
        prev = w


def _attribute(case: Case, k: int, seen: list[Obs], variants: Mapping[str, list]) -> str | None:
    short = Case(case.label, case.page_size, case.ops[:k + 1], case.policy)
    for key, classes in dict(variants).items():
        for cls in classes:
            try:
                with time_limit(2, "a pitfall replay"):
                    if replay(short, cls) == seen:
                        return key
            except (AssertionError, _NotFilled, RecursionError):
                continue
    return None


def run_cases(cls: type, who: str, cases, variants: Mapping[str, list] = (), prop=None, watched: int = 2) -> None:
    for i, case in enumerate(cases):
        guard = no_reference_calls() if common.watched(i, watched) else contextlib.nullcontext()
        with guard, time_limit(_CASE_SECONDS, f"{who} on the scenario '{case.label}'"):
            lockstep(case, cls, who, variants, prop)


class SplitGuard(Exception):
    """A split that would leave an empty edge: always a bug, and the start of an endless loop when the walk goes
    on (a first-token child key at page_size > 1 splits at 0 tokens again and again)."""


def guarded(cls: type) -> type:
    """`cls` with its _split_node refusing a split at 0 tokens or at the end of the edge."""
    inner = cls._split_node

    def _split_node(self, child, split_len):
        n = len(child.key)
        if not (isinstance(split_len, int) and 0 < split_len < n):
            raise SplitGuard(f"_split_node was called with split_len={split_len!r} on an edge of {n} tokens "
                             f"{_show(child.key)}: a split must leave tokens on both sides (0 < split_len < {n})")
        return inner(self, child, split_len)

    return type(cls.__name__, (cls,), {"_split_node": _split_node})


def learner_class(name: str, base: type = RadixCache, **methods) -> type:
    for key, fn in methods.items():
        reject_reference(fn, key)
    return guarded(type(name, (base,), {key: wrap(fn, key) for key, fn in methods.items()}))


# --------------------------------------------------------------------------------------------------------
# the pitfalls, built in (to name the one that explains a difference)


def _ck_first_token(self, key, offset=0):
    return key[offset]


def _ml_not_rounded(self, edge, key, offset):
    n = 0
    while n < min(len(edge), len(key) - offset) and edge[n] == key[offset + n]:
        n += 1
    return n


def _split_no_lock(self, child, split_len):
    upper = self._new_node(key=child.key[:split_len], value=child.value[:split_len], parent=child.parent)
    child.parent.children[self.child_key(child.key)] = upper
    child.key, child.value, child.parent = child.key[split_len:], child.value[split_len:], upper
    upper.children[self.child_key(child.key)] = child
    return upper


def _split_new_lower(self, child, split_len):
    lower = self._new_node(key=child.key[split_len:], value=child.value[split_len:], parent=child,
                           lock_ref=child.lock_ref)
    lower.children = child.children
    for c in lower.children.values():
        c.parent = lower
    child.key, child.value = child.key[:split_len], child.value[:split_len]
    child.children = {self.child_key(lower.key): lower}
    self._update_leaf_status(child)
    self._update_leaf_status(lower)
    return child


def _match_variant(split=True, touch=True):
    def match_prefix(self, key):
        key = self._page_aligned(tuple(key))
        if not key:
            return [], self.root_node
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        values, offset = [], 0
        while offset < len(key):
            child = node.children.get(self.child_key(key, offset))
            if child is None:
                break
            if touch:
                child.last_access_time = now
            n = self._match_len(child.key, key, offset)
            if n < len(child.key):
                if split:
                    node = self._split_node(child, n)
                    values.extend(node.value)
                else:
                    values.extend(child.value[:n])
                    node = child
                break
            values.extend(child.value)
            node = child
            offset += n
        return values, node
    return match_prefix


def _insert_variant(overwrite=False, double_count=False, check_len=True, return_added=False):
    def insert(self, key, value):
        key, value = tuple(key), tuple(value)
        if check_len and len(value) != len(key):
            raise ValueError("one KV index per token")
        key = self._page_aligned(key)
        value = value[:len(key)]
        now = self._tick()
        node = self.root_node
        node.last_access_time = now
        offset = 0
        while offset < len(key):
            child = node.children.get(self.child_key(key, offset))
            if child is None:
                break
            child.last_access_time = now
            n = self._match_len(child.key, key, offset)
            if overwrite:
                child.value = value[offset:offset + n] + child.value[n:]
            offset += n
            if n < len(child.key):
                child = self._split_node(child, n)
            node = child
        if offset < len(key):
            leaf = self._new_node(key=key[offset:], value=value[offset:], parent=node)
            node.children[self.child_key(leaf.key)] = leaf
            self.evictable_size_ += len(key) if double_count else len(leaf.key)
            self._update_leaf_status(node)
            self._update_leaf_status(leaf)
        return len(key) - offset if return_added else offset
    return insert


def _match_touch_end_only(self, key):
    key = self._page_aligned(tuple(key))
    if not key:
        return [], self.root_node
    now = self._tick()
    node, values, offset = self.root_node, [], 0
    while offset < len(key):
        child = node.children.get(self.child_key(key, offset))
        if child is None:
            break
        n = self._match_len(child.key, key, offset)
        if n < len(child.key):
            node = self._split_node(child, n)
            values.extend(node.value)
            break
        values.extend(child.value)
        node = child
        offset += n
    node.last_access_time = now
    return values, node


def _variants(key: str) -> dict[str, list[type]]:
    table = {
        "child_key": {"first_token_key": {"child_key": _ck_first_token}},
        "_match_len": {"not_rounded": {"_match_len": _ml_not_rounded}},
        "_split_node": {"split_no_lock_copy": {"_split_node": _split_no_lock},
                        "split_new_lower": {"_split_node": _split_new_lower}},
        "match_prefix": {"match_no_split": {"match_prefix": _match_variant(split=False)},
                         "match_no_touch": [{"match_prefix": _match_variant(touch=False)},
                                            {"match_prefix": _match_touch_end_only}]},
        "insert": {"insert_overwrites": {"insert": _insert_variant(overwrite=True)},
                   "insert_double_count": {"insert": _insert_variant(double_count=True)},
                   "insert_no_length_check": {"insert": _insert_variant(check_len=False)},
                   "insert_return": {"insert": _insert_variant(return_added=True)}},
    }
    return {p: [guarded(type(f"Pitfall_{p}", (RadixCache,), m))
                for m in (methods if isinstance(methods, list) else [methods])]
            for p, methods in table[key].items()}


def _only_times_differ(m: Obs, w: Obs) -> bool:
    return (m.result == w.result and m.sizes == w.sizes and not m.problems and len(m.rows) == len(w.rows)
            and all(a[:4] + a[5:] == b[:4] + b[5:] for a, b in zip(m.rows, w.rows)))


def _match_prop(op: Op, prev, m: Obs, w: Obs) -> str | None:
    """A match that leaves everything right but the order of access times did not stamp what it walked."""
    return "match_no_touch" if op.kind in ("match", "lock", "bad_unlock") and _only_times_differ(m, w) else None


# --------------------------------------------------------------------------------------------------------
# scenarios, one per pitfall


def pitfall_cases() -> list[Case]:
    return [
        _script("a match that ends mid-edge, then a lock through the split", 1, [
            ("insert", [1, 2, 3, 4]), ("lock", [1, 2, 3, 4]), ("match", [1, 2, 9]), ("lock", [1, 2, 8]),
            ("unlock", 0), ("unlock", 0), ("evict", 10**6)]),
        _script("a locked 8-token edge split at a page edge (page_size 4)", 4, [
            ("insert", range(8)), ("lock", range(8)), ("lock", range(8)), ("match", [0, 1, 2, 3, 4, 5, 9, 9]),
            ("unlock", 0), ("unlock", 0), ("evict", 10**6)]),
        _script("keys that share part of a page (page_size 4)", 4, [
            ("insert", [1, 2, 3, 4, 5, 6, 7, 8]), ("insert", [1, 2, 3, 9, 5, 6, 7, 8]),
            ("match", [1, 2, 3, 9, 5, 6, 7, 0]), ("match", [1, 2, 3, 4, 5, 6, 7, 8, 1, 2])]),
        _script("a match and an insert that leave an edge mid-page (page_size 2)", 2, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("match", [1, 2, 3, 9, 5, 6]), ("insert", [1, 2, 3, 4, 5, 7]),
            ("match", [1, 2, 3])]),
        _script("the split suffix is touched (LRU order)", 1, [
            ("insert", [1, 2, 3, 4]), ("insert", [5, 5]), ("match", [1, 2]), ("evict", 1), ("evict", 1)]),
        _script("first writer wins", 1, [
            ("insert", [5, 6, 7]), ("insert", [5, 6, 7, 8]), ("match", [5, 6, 7, 8]), ("insert", [5, 6]),
            ("evict", 10**6), ("insert", [5, 6, 7]), ("match", [5, 6, 7])]),
        _script("an insert that leaves an edge mid-way, under a lock", 1, [
            ("insert", [1, 2]), ("lock", [1, 2]), ("insert", [1, 2, 3, 4]), ("insert", [1, 2, 7, 8, 9]),
            ("insert", [1, 2, 3]), ("unlock", 0), ("evict", 2), ("evict", 10**6)]),
        _script("empty keys and misses", 1, [
            ("match", []), ("insert", []), ("lock", []), ("insert", [1]), ("lock", [2, 3]), ("unlock", 0),
            ("unlock", 0), ("match", [1, 1])]),
        _script("bad input", 2, [
            ("insert", [1, 2, 3, 4]), ("bad_insert", [1, 2, 3]), ("bad_insert", [5, 6]), ("bad_unlock", [1, 2, 3, 4]),
            ("bad_evict", 1), ("match", [1, 2])]),
    ]


def _cases(n_random: int, n_ops: int = 200) -> list[Case]:
    return pitfall_cases() + list(random_cases(_RANDOM_SEED, n_random, n_ops))


# --------------------------------------------------------------------------------------------------------
# the checks


def _direct(fn, key: str, cases, want: Callable, describe: Callable, pitfalls: Callable) -> None:
    """Call fn on each case's arguments and compare with the reference's answer, exactly."""
    wrapped = wrap(fn, key)
    with no_reference_calls(), time_limit(_CASE_SECONDS, key):
        for self_, args in cases:
            try:
                got = wrapped(self_, *args)
            except NotImplementedError:
                raise AssertionError(common.not_filled(key)) from None
            except _ReferenceCalled:
                raise
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"{describe(self_, args)} raised {type(e).__name__}: {e}") from None
            expect = want(self_, *args)
            if type(got) is not type(expect) or got != expect:
                msg = f"{describe(self_, args)} returned {_short.repr(got)}; expected {expect!r}"
                if isinstance(got, list) and isinstance(expect, tuple):
                    msg += " (a tuple: a dict key must be hashable)"
                pit = pitfalls(self_, args, got)
                raise AssertionError((PITFALLS[pit] + "\n" if pit else "") + msg)


def _child_key_inputs():
    rng = random.Random(_RANDOM_SEED + 1)
    caches = {ps: RadixCache(page_size=ps) for ps in (1, 2, 3, 4, 8)}
    out = [(caches[4], ((1, 2, 3, 4, 5, 6, 7, 8), 0)), (caches[4], ((1, 2, 3, 4, 5, 6, 7, 8), 4)),
           (caches[1], ((7, 8, 9), 1)), (caches[2], ((5, 6, 7, 8), 2))]
    for _ in range(300):
        ps = rng.choice(list(caches))
        n = rng.randrange(1, 5) * ps
        key = tuple(rng.randrange(4) for _ in range(n))
        out.append((caches[ps], (key, rng.randrange(0, n // ps) * ps)))
    return out


def check_child_key(fn) -> None:
    """Hidden test of child_key: exact answers on 300 keys and offsets (page sizes 1, 2, 3, 4, 8), then the
    reference tree with the learner's child_key on the scenarios and random sequences."""
    reject_reference(fn, "child_key")
    _direct(fn, "child_key", _child_key_inputs(),
            want=lambda self, key, offset: RadixCache.child_key(self, key, offset),
            describe=lambda self, a: f"child_key(key={_show(a[0])}, offset={a[1]}) with page_size {self.page_size}",
            pitfalls=lambda self, a, got: "first_token_key" if self.page_size > 1 and got == a[0][a[1]] else None)
    cls = learner_class("YourChildKey", child_key=fn)
    run_cases(cls, "RadixCache with your child_key", _cases(9, 150), _variants("child_key"))


def _match_len_inputs():
    rng = random.Random(_RANDOM_SEED + 2)
    caches = {ps: RadixCache(page_size=ps) for ps in (1, 2, 3, 4)}
    out = [(caches[2], ((1, 2, 3, 4), (1, 2, 3, 9), 0)), (caches[1], ((3, 4), (1, 2, 3, 4, 5), 2)),
           (caches[4], ((1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 5, 6, 7, 0), 0)), (caches[1], ((5,), (5,), 0))]
    for _ in range(400):
        ps = rng.choice(list(caches))
        edge = tuple(rng.randrange(2) for _ in range(rng.randrange(1, 5) * ps))
        key = tuple(rng.randrange(2) for _ in range(rng.randrange(1, 5) * ps))
        offset = rng.randrange(0, len(key) // ps) * ps
        if rng.random() < 0.5:   # make the two agree on a stretch, so long matches are common
            n = min(len(edge), len(key) - offset)
            cut = rng.randrange(n + 1)
            key = key[:offset] + edge[:cut] + key[offset + cut:]
        out.append((caches[ps], (edge, key, offset)))
    return out


def check_match_len(fn) -> None:
    """Hidden test of _match_len: exact answers on 400 (edge, key, offset) triples, then the reference tree with
    the learner's _match_len on the scenarios and random sequences."""
    reject_reference(fn, "_match_len")

    def pit(self, a, got):
        edge, key, offset = a
        n = 0
        while n < min(len(edge), len(key) - offset) and edge[n] == key[offset + n]:
            n += 1
        return "not_rounded" if self.page_size > 1 and got == n else None

    _direct(fn, "_match_len", _match_len_inputs(),
            want=lambda self, edge, key, offset: RadixCache._match_len(self, edge, key, offset),
            describe=lambda self, a: (f"_match_len(edge={_show(a[0])}, key={_show(a[1])}, offset={a[2]}) with "
                                      f"page_size {self.page_size}"),
            pitfalls=pit)
    cls = learner_class("YourMatchLen", _match_len=fn)
    run_cases(cls, "RadixCache with your _match_len", _cases(9, 150), _variants("_match_len"))


def check_split_node(fn) -> None:
    """Hidden test of _split_node: the reference tree with the learner's _split_node, step by step."""
    reject_reference(fn, "_split_node")
    cls = learner_class("YourSplitNode", _split_node=fn)
    run_cases(cls, "RadixCache with your _split_node", _cases(12), _variants("_split_node"))


def check_match_prefix(fn) -> None:
    """Hidden test of match_prefix: the reference tree with the learner's match_prefix, step by step."""
    reject_reference(fn, "match_prefix")
    cls = learner_class("YourMatchPrefix", match_prefix=fn)
    run_cases(cls, "RadixCache with your match_prefix", _cases(12), _variants("match_prefix"), _match_prop)


def check_insert(fn) -> None:
    """Hidden test of insert: the reference tree with the learner's insert, step by step."""
    reject_reference(fn, "insert")
    cls = learner_class("YourInsert", insert=fn)
    run_cases(cls, "RadixCache with your insert", _cases(12), _variants("insert"))


_EXERCISES = ("child_key", "_match_len", "_split_node", "match_prefix", "insert")


def your_cache_class(cls) -> type:
    """The learner's assembled RadixCache, with each method wrapped (reference calls refused)."""
    if not (isinstance(cls, type) and issubclass(cls, RadixCache)):
        raise AssertionError(f"RadixCache is {_short.repr(cls)}; run the cell that builds it from your functions")
    methods = {}
    for key in _EXERCISES:
        fn = cls.__dict__.get(key, getattr(cls, key))
        reject_reference(fn, key)
        methods[key] = wrap(fn, key)
    return guarded(type("YourRadixCache", (cls,), methods))


def shared_prompt_skipped(cache_cls: type, n_requests: int = 100, prompt_len: int = 2000) -> int:
    """The lesson's figure on a RadixCache class: the prefill tokens skipped when n_requests requests sharing
    a prompt_len-token system prompt are served by the RadixScheduler (cache_unfinished_req / finished)."""
    from servelab.prefix_compare import run_radix, shared_system_prompt
    from servelab.radix_scheduler import RadixScheduler

    base = RadixScheduler.cache_class
    try:
        RadixScheduler.cache_class = cache_cls
        run = run_radix(shared_system_prompt(n_requests, prompt_len, max_tokens=2), cache_tokens=8192)
    finally:
        RadixScheduler.cache_class = base
    return run.skipped


def check_radix_cache(cls) -> None:
    """Hidden test of the assembled RadixCache (all five methods the learner wrote): the whole class step by step
    against the reference on every exercise's sequences, then the lesson's figure served through it. When the
    class differs from the reference, each exercise's own check runs to name the method (and the pitfall)."""
    your = your_cache_class(cls)
    try:
        run_cases(your, "Your RadixCache", _cases(12))
    except AssertionError as combined:
        for key, check in (("child_key", check_child_key), ("_match_len", check_match_len),
                           ("_split_node", check_split_node), ("match_prefix", check_match_prefix),
                           ("insert", check_insert)):
            check(cls.__dict__.get(key, getattr(cls, key)))
        raise combined from None
    with time_limit(_CASE_SECONDS * 3, "serving 100 requests through your RadixCache"):
        try:
            skipped = shared_prompt_skipped(your)
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"serving 100 requests through your RadixCache raised {type(e).__name__}: {e}") \
                from None
    if skipped != 99 * 2000:
        raise AssertionError(f"100 requests sharing a 2000-token system prompt skipped {skipped} prefill tokens "
                             "through your RadixCache; the lesson's figure is 99 * 2000 = 198,000")


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview"


def _drill_skipped() -> int:
    cache = RadixCache()
    prompt = list(range(1000, 2500))                    # a 1500-token system prompt
    skipped = 0
    next_kv = 0
    for i in range(200):
        key = prompt + [50_000 + i, 7, 7]               # each request's own question
        indices, _ = cache.match_prefix(key[:-1])
        skipped += len(indices)
        cache.insert(key, range(next_kv, next_kv + len(key)))
        next_kv += len(key)
    return skipped


def _drill_mib() -> int:
    return int(1500 * LLAMA2_7B.kv_bytes_per_token // (KiB * KiB))


def _drill_block_vs_radix() -> int:
    prompt = list(range(1000, 2000))
    first, second = prompt + [7] * 20, prompt + [9] * 50
    bm = BlockManager(num_blocks=64, block_size=256)
    seq = NanoSequence(first, block_size=256)
    bm.allocate(seq, bm.can_allocate(seq))
    seq.num_scheduled_tokens = len(first)
    bm.hash_blocks(seq)
    bm.deallocate(seq)
    block_hits = bm.can_allocate(NanoSequence(second, block_size=256)) * 256
    cache = RadixCache()
    cache.insert(first, range(len(first)))
    radix_hits = len(cache.match_prefix(second[:-1])[0])
    return radix_hits - block_hits


# name -> (question, expected value computed by the reference, {wrong answer: hint})
DRILLS = {
    "drill_1": ("number of prefill tokens the radix cache skips for 200 requests sharing a 1500-token system "
                "prompt", _drill_skipped,
                {300000: "The first request computes the system prompt: only the other 199 skip it."}),
    "drill_2": ("number of MiB of KV one copy of that 1500-token prompt takes in LLaMA-2-7B (fp16, 512 KiB per "
                "token)", _drill_mib,
                {768000: "That is KiB: divide by 1024 once more.",
                 150000: "512 KiB per token is half a MiB: 1500 tokens are 750 MiB."}),
    "drill_3": ("number of extra prompt tokens the radix cache (page size 1) reuses compared with a block-hash "
                "cache with 256-token blocks, for a 1000-token system prompt followed by the request's own tokens",
                _drill_block_vs_radix,
                {1000: "The question asks for the difference: the block cache reuses whole blocks only.",
                 768: "The question asks for the difference: the block cache reuses whole blocks only.",
                 24: "Blocks of 256: the block cache reuses 3 whole blocks (768 tokens), not 1024 - 24."}),
}


def check_drills(answers) -> None:
    """Hidden test of the drills. ``answers``: a mapping with ``drill_1``..``drill_3`` or the three values in
    order."""
    common.check_whole_number_drills(answers, DRILLS, _short)


# --------------------------------------------------------------------------------------------------------
# messages for visible asserts

_CHECKS = {
    "child_key": check_child_key,
    "_match_len": check_match_len,
    "_split_node": check_split_node,
    "match_prefix": check_match_prefix,
    "insert": check_insert,
    "radix_cache": check_radix_cache,
}


def diagnose(exercise: str, obj) -> str:
    """What the hidden check of ``exercise`` says about ``obj`` (the learner's function, or their RadixCache
    class for ``"radix_cache"``), without raising. Meant as a visible assert's message."""
    return common.diagnose(_CHECKS, exercise, obj, "the reference on every sequence of the checks")

