"""Workloads of operations on a whole radix tree, for chapters 04 and 05: what they are, how one runs, how a run
that differs from the reference's is told.

A workload (:func:`workload`, :func:`random_workload`) is plain data: a page size, an eviction policy and a list
of operations (insert, match, lock, unlock, evict, reset, and calls that must raise). :func:`run_ops` runs one on a
tree, recording after each operation its result, the size counters and the tree (``radix_view.view``); the
reference's recorded run is where every method's cases come from (``radix_record``). :func:`guarded` and
:func:`counted` stop the two endless loops a wrong tree can start (a split at 0 tokens, a scheduler that evicts
for ever); :func:`serve` runs the notebook's shared-prompt requests through a tree class. :func:`trace_note` says
at which operation a run first differs from the reference's.
"""

from __future__ import annotations

import random

from servelab.schedulers.radix_cache import TreeNode
from servelab_autograder.exercises.radix_state import SHORT, path_of, plain_int, plain_ints, show, snapshot
from servelab_autograder.exercises.radix_view import rows_text, tree_difference, view

BIG = 10**6               # evict(BIG): everything evictable


# ------------------------------------------------------------------------------------------------
# workloads: operations on a whole tree (the whole class's cases, and where every method's cases come from)



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
        "insert": f"insert({show(key)}, {show(value)})",
        "match": f"match_prefix({show(key)})",
        "lock": f"inc_lock_ref(match_prefix({show(key)}) node)",
        "unlock": f"dec_lock_ref(held node #{n})",
        "evict": f"evict({n})",
        "reset": "reset()",
        "bad_insert": f"insert({show(key)}, {show(value)})  (one index short: must raise ValueError)",
        "bad_unlock": f"dec_lock_ref(match_prefix({show(key)}) node)  (no lock on it: must raise ValueError)",
        "bad_evict": f"evict({-n})  (negative: must raise ValueError)",
    }[kind]


class Allocator:
    """The KV allocator: records what evict hands it."""

    def __init__(self):
        self.freed: list = []

    def free(self, indices):
        self.freed.append(plain_ints(indices))


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


def match_out(cache, got) -> dict:
    """What match_prefix returned, as plain data: the indices and the path of its node, or the problem with it."""
    if not isinstance(got, tuple) or len(got) != 2:
        return {"problem": f"returned {SHORT.repr(got)}; return (list of KV indices, last node)"}
    indices, node = got
    if not isinstance(node, TreeNode):
        return {"problem": f"returned {SHORT.repr(node)} as its node; return the TreeNode where the match ends"}
    try:
        indices = plain_ints(list(indices))
    except TypeError:
        return {"problem": f"returned {SHORT.repr(indices)} as its indices; return a list of ints"}
    return {"result": indices, "node": path_of(cache, node)}


def _plain_call(r: list) -> list:
    return ["ok", plain_int(r[1])] if r[0] == "ok" else r


def _refused(r: list) -> list:
    return [r[0] == "raised" and r[1] == "ValueError", f"raised {r[1]}" if r[0] == "raised"
            else f"returned {SHORT.repr(r[1])}"]


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
        m = match_out(cache, r[1])
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
        return ["evict", "ok", plain_ints(r[1]) if r[1] is not None else None, [list(f) for f in alloc.freed]]
    r = _call(cache.reset)
    handles.clear()
    return ["reset", r[0]]


def _sizes(cache) -> list:
    try:
        return [plain_int(cache.evictable_size()), plain_int(cache.protected_size()), plain_int(cache.total_size())]
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
                             f"{show(child.key)}: a split must leave tokens on both sides (0 < split_len < {n})")
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
# a whole run's first difference, in the learner's terms


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
        where = show(result[3], 16) if isinstance(result[3], list) else result[3]
        text = f"returned {show(result[2], 16)}, ending at the node whose path is {where}"
        rest = result[4:]
        if rest and rest[0] == "lock":
            text += f"; inc_lock_ref returned {rest[2]}" if rest[1] == "ok" else f"; inc_lock_ref raised {rest[2]}"
        elif rest and rest[0] == "bad":
            text += f"; dec_lock_ref {rest[2]}"
        return text
    if kind == "unlock":
        return f"returned {result[2]}" if len(result) > 2 else result[1]
    if kind == "evict":
        return f"returned {show(result[2], 16)}; the allocator was handed {result[3]}"
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


__all__ = ["BIG", "EVICT_SIZES", "MAX_EVICTS", "OPS", "Allocator", "RunAway", "SplitGuard", "apply_op", "counted",
           "guarded", "match_out", "op_text", "random_workload", "result_text", "run_ops", "serve", "trace_note",
           "workload"]
