"""Chapter 04's exercises as the visible tests and the grader both see them: SGLang's radix tree, piece by piece.

Every exercise is a method of the radix tree, so each is **driven**: a case is the tree's state as plain data
(``radix_state.snapshot``), taken from a run of the reference tree (``servelab.schedulers.radix_cache.RadixCache``)
through a workload of operations (``radix_workloads``) at the moment it calls that method (``radix_record``); the
driver (``drive_*``) builds a tree in that state, calls the learner's method once and returns what it returned
and the state it left, as plain data. The grader runs the same driver with the reference and compares the trees
by path (``radix_view.view``).

``match_prefix`` and ``insert`` call ``child_key``, ``_match_len`` and ``_split_node``, and ``_split_node``
calls ``child_key``: other exercises, whose references the grading sandbox does not have. The driver answers
those calls from a **replay** of the reference run (``radix_record.with_replay``, the engine of ``replay``); a
call the reference never made in that state is reported (``diverged``).

The whole class is driven through whole workloads (:func:`drive_radix_cache`) and the notebook's 100 requests
sharing a 2000-token system prompt. :data:`SPECS` holds each exercise; :func:`diagnose` is a visible assert's
message. The workloads here are the notebook's (one per pitfall); the grader adds random ones
(``servelab_autograder.judge.checks.ch04``); chapter 05 reuses the same modules for the locks and eviction.
"""

from __future__ import annotations

from servelab.schedulers.radix_cache import RadixCache
from servelab_autograder.exercises import spec
from servelab_autograder.exercises.ch04_drills import DRILLS, drill_numbers  # noqa: F401 - the notebook's names
from servelab_autograder.exercises.radix_record import (  # noqa: F401 - the names other modules find here
    EXERCISES,
    LOCKS,
    cases_of,
    record,
    with_replay,
)
from servelab_autograder.exercises.radix_state import (  # noqa: F401 - the names other modules find here
    ID,
    LOCK,
    VALUE,
    build,
    node_by_id,
    path_by_id,
    path_of,
    plain_int,
    set_tree,
    show,
    snapshot,
    state_key,
    tuple_text,
)
from servelab_autograder.exercises.radix_state import SHORT as _short
from servelab_autograder.exercises.radix_view import tree_difference, tree_text, view
from servelab_autograder.exercises.radix_workloads import (  # noqa: F401 - the names other modules find here
    BIG,
    OPS,
    Allocator,
    SplitGuard,
    counted,
    guarded,
    match_out,
    random_workload,
    run_ops,
    serve,
    trace_note,
    workload,
)
from servelab_autograder.exercises.replay import Diverged  # noqa: F401 - the one class, found here too
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch04_radix_cache"


# ------------------------------------------------------------------------------------------------
# drivers: one call of the learner's method on a state, the result and the state after as plain data


def drive_child_key(fn, page_size: int, key: list, offset: int) -> dict:
    return {"result": fn(RadixCache(page_size=page_size), tuple(key), offset)}


def drive_match_len(fn, page_size: int, edge: list, key: list, offset: int) -> dict:
    return {"result": fn(RadixCache(page_size=page_size), tuple(edge), tuple(key), offset)}


def _guarded_call(call, cache, answers) -> dict:
    """``call()``; what it raised (but a stub's NotImplementedError), or a divergence, as data."""
    kind, got = answers.run(call)
    if kind == "diverged":
        return {"diverged": got.call, "state": got.state}
    if kind == "raised":
        return {"raised": type(got).__name__, "message": str(got)[:300], "state": snapshot(cache)}
    return {"ok": got}


def drive_split_node(fn, where: str, state: dict, child: int, split_len: int, replay: dict) -> dict:
    cache = build(state)
    answers = with_replay(cache, replay, ("child_key",))
    handle = node_by_id(cache, child)
    out = _guarded_call(lambda: fn(cache, handle, split_len), cache, answers)
    if "ok" not in out:
        return out
    upper = out["ok"]
    return {"result": path_of(cache, upper), "new": upper is not handle, "handle": path_of(cache, handle),
            "state": snapshot(cache)}


def drive_match_prefix(fn, where: str, state: dict, key: list, replay: dict) -> dict:
    cache = build(state)
    answers = with_replay(cache, replay)
    out = _guarded_call(lambda: fn(cache, list(key)), cache, answers)
    if "ok" not in out:
        return out
    return {**match_out(cache, out["ok"]), "state": snapshot(cache)}


def drive_insert(fn, where: str, state: dict, key: list, value: list, replay: dict) -> dict:
    cache = build(state)
    answers = with_replay(cache, replay)
    out = _guarded_call(lambda: fn(cache, list(key), list(value)), cache, answers)
    if "ok" not in out:
        return out
    return {"result": plain_int(out["ok"]), "state": snapshot(cache)}


def drive_radix_cache(cls, where: str, work: dict) -> dict:
    """The learner's whole RadixCache class through a workload: each operation's result, the sizes and the tree
    after it; or the notebook's shared-prompt requests served through it (``work["serve"]``)."""
    if "serve" in work:
        return serve(cls, **work["serve"])
    cache = guarded(cls)(page_size=work["page_size"], eviction_policy=work["policy"],
                         token_to_kv_pool_allocator=Allocator())
    return {"trace": run_ops(cache, work["ops"])}



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
        where = show(v["node"], 16) if isinstance(v["node"], list) else v["node"]
        return f"{show(v['result'], 16)}, ending at the node whose path is {where}"
    if "handle" in v:
        new = "a new node" if v["new"] else "the node it was given (child itself)"
        return f"{new} ending at {show(v['result'])}; child now ends at {show(v['handle'])}"
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
            body = (f"the reference calls _split_node(the node {show(path_by_id(e['before'], e['child']))}, "
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




def _at(args) -> str:
    return f" at {args[0]}"


def _split_call(a) -> str:
    return f"_split_node(the node {show(path_by_id(a[1], a[2]))}, split_len={a[3]}){_at(a)}"


SPECS = {s.name: s for s in [
    Spec("child_key", ("page_size", "key", "offset"), RadixCache.child_key, _pure_norm, repr,
         driver=f"{__name__}:drive_child_key", note=_child_key_note,
         call=lambda a: f"child_key(key={tuple_text(a[1])}, offset={a[2]}) with page_size {a[0]}"),
    Spec("_match_len", ("page_size", "edge", "key", "offset"), RadixCache._match_len, _pure_norm, repr,
         driver=f"{__name__}:drive_match_len",
         call=lambda a: f"_match_len(edge={tuple_text(a[1])}, key={tuple_text(a[2])}, offset={a[3]}) with page_size "
                        f"{a[0]}"),
    Spec("_split_node", ("where", "state", "child", "split_len", "replay"), RadixCache._split_node,
         _norm(("result", "new", "handle")), _show_result, driver=f"{__name__}:drive_split_node", note=_note,
         call=_split_call),
    Spec("match_prefix", ("where", "state", "key", "replay"), RadixCache.match_prefix,
         _norm(("result", "node")), _show_result, driver=f"{__name__}:drive_match_prefix", note=_note,
         call=lambda a: f"match_prefix({show(a[2])}){_at(a)}"),
    Spec("insert", ("where", "state", "key", "value", "replay"), RadixCache.insert, _norm(("result",)),
         _show_result, driver=f"{__name__}:drive_insert", note=_note,
         call=lambda a: f"insert({show(a[2])}, {show(a[3])}){_at(a)}"),
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
