"""Chapter 05's exercises as the visible tests and the grader both see them: the radix tree's locks and eviction, and
the scheduler hook that hands a finished or preempted request's KV to the tree.

``inc_lock_ref``, ``dec_lock_ref`` and ``evict`` are methods of the radix tree, driven as chapter 04's are: a case
is the tree's state (``radix_state.snapshot``) when the reference calls the method in a run of a workload of
operations (``radix_record.record``); the driver returns the result, what the KV allocator was handed and the
tree it left. None of the three calls another exercise.

``cache_finished_req`` is a method of the RadixScheduler: a case is the scheduler's state when the reference calls
it in a run of a workload of requests (``radix_requests``); its call of ``dec_lock_ref``, another exercise, is
answered from a **replay** of the reference run keyed by the whole tree (``radix_requests.with_unlock_replay``).
The whole scheduler is driven through the same workloads of operations on its cache class, then through
workloads of requests, step by step (``radix_requests.run_scheduler``).

:data:`SPECS` holds each exercise; :func:`diagnose` is a visible assert's message. The random workloads and the
verdicts are the grader's (``servelab_autograder.judge.checks.ch05``).
"""

from __future__ import annotations

from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.radix_scheduler import RadixScheduler
from servelab_autograder.exercises import spec
from servelab_autograder.exercises.ch05_drills import DRILLS, drill_numbers  # noqa: F401 - the notebook's names
from servelab_autograder.exercises.radix_record import record
from servelab_autograder.exercises.radix_requests import (  # noqa: F401 - the names other modules find here
    build_sched,
    random_request_workloads,
    record_scheduler,
    run_scheduler,
    sched_state,
    sched_workload,
    with_unlock_replay,
)
from servelab_autograder.exercises.radix_state import (
    ID,
    LOCK,
    SHORT,
    VALUE,
    build,
    node_by_id,
    path_by_id,
    plain_int,
    plain_ints,
    show,
    snapshot,
)
from servelab_autograder.exercises.radix_view import tree_difference, tree_text, view
from servelab_autograder.exercises.radix_workloads import BIG, Allocator, guarded, run_ops, trace_note, workload
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch05_lock_ref_eviction"


# ------------------------------------------------------------------------------------------------
# drivers of the tree's methods


def _node_text(state: dict, node_id) -> str:
    if state["nodes"][0][ID] == node_id:
        return "the root"
    return f"the node {show(path_by_id(state, node_id))}"


def _tree_call(fn, state: dict, arg, by_id: bool) -> dict:
    alloc = Allocator()
    cache = build(state, allocator=alloc)
    try:
        got = fn(cache, node_by_id(cache, arg) if by_id else arg)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - part of the result: the reference refuses bad input
        return {"raised": type(e).__name__, "message": str(e)[:300], "freed": alloc.freed,
                "state": snapshot(cache)}
    result = plain_int(got) if by_id else (plain_ints(got) if isinstance(got, list | tuple) else SHORT.repr(got))
    return {"result": result, "freed": alloc.freed, "state": snapshot(cache)}


def drive_inc_lock_ref(fn, where: str, state: dict, node: int) -> dict:
    return _tree_call(fn, state, node, by_id=True)


def drive_dec_lock_ref(fn, where: str, state: dict, node: int) -> dict:
    return _tree_call(fn, state, node, by_id=True)


def drive_evict(fn, where: str, state: dict, num_tokens: int) -> dict:
    return _tree_call(fn, state, num_tokens, by_id=False)


def drive_cache_finished_req(fn, where: str, state: dict, replay: dict) -> dict:
    sch, req = build_sched(state)
    answers = with_unlock_replay(sch.tree_cache, replay)
    kind, got = answers.run(lambda: fn(sch, req))
    if kind == "raised":   # freeing a slot twice raises in the pool: part of the result
        return {"raised": type(got).__name__, "message": str(got)[:300], "state": sched_state(sch, req)}
    if kind == "diverged":
        return {"diverged": got.call, "tree": got.state, "state": sched_state(sch, req)}
    return {"state": sched_state(sch, req)}


def drive_scheduler(cls, where: str, work: dict) -> dict:
    """The learner's whole RadixScheduler class: its cache class (their locks and eviction) through a workload of
    operations, or the scheduler (with their cache_finished_req too) through a workload of requests."""
    if "ops" in work:
        cache = guarded(cls.cache_class)(page_size=work["page_size"], eviction_policy=work["policy"],
                                         token_to_kv_pool_allocator=Allocator())
        return {"trace": run_ops(cache, work["ops"])}
    return run_scheduler(cls, work)


def cases_of(exercise: str, workloads) -> list[tuple]:
    """The cases of ``exercise`` (a method name, or "RadixScheduler" for the whole scheduler) from reference runs
    of ``workloads`` (of operations for the tree's methods, of requests for cache_finished_req; both for the
    whole scheduler)."""
    if exercise == "RadixScheduler":
        return [(w["label"], w) for w in workloads]
    if exercise == "cache_finished_req":
        return [c for w in workloads if "arrivals" in w for c in record_scheduler(w)]
    return [tuple(c) for w in workloads if "ops" in w for c in record(w)[exercise]]


# ------------------------------------------------------------------------------------------------
# the notebook's workloads (the visible checks; the grader adds its own)


def lock_workloads() -> list[dict]:
    """The notebook's walk-through and visible asserts, then one workload of operations per pitfall (order
    matters: a pitfall is named on the first case that fails, so a case that tells two apart comes first)."""
    return [
        workload("the walk-through's locks and eviction", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4, 5]), ("insert", [7, 7, 7]), ("lock", [1, 2, 4, 5]),
            ("evict", 4), ("unlock", 0), ("evict", BIG)]),
        workload("the visible lock checks", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("lock", [1, 2, 3]), ("lock", [1, 2, 4]), ("lock", []),
            ("unlock", 0), ("unlock", 0), ("bad_unlock", [1, 2, 4])]),
        workload("the visible evict checks", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("insert", [9]), ("evict", BIG), ("insert", [1, 2]),
            ("lock", [1, 2]), ("insert", [1, 2, 3, 4]), ("evict", BIG), ("reset",), ("insert", [5, 6, 7, 8, 9]),
            ("evict", 0), ("evict", 1)]),
        workload("two requests lock a shared path, then one unlocks", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("lock", [1, 2, 3]), ("lock", [1, 2, 4]),
            ("lock", [1, 2, 3]), ("unlock", 0), ("evict", BIG), ("unlock", 0), ("unlock", 0), ("evict", BIG)]),
        workload("a lock on a deep node protects the whole prefix", 1, [
            ("insert", [1, 2, 3, 4]), ("match", [1, 2, 9]), ("match", [1, 2, 3, 8]), ("lock", [1, 2, 3, 4]),
            ("insert", [5, 6]), ("evict", BIG), ("unlock", 0), ("evict", BIG)]),
        workload("a new leaf under a locked node", 1, [
            ("insert", [1, 2]), ("lock", [1, 2]), ("insert", [1, 2, 3, 4]), ("evict", BIG), ("insert", [1, 2, 5]),
            ("insert", [9]), ("evict", BIG), ("unlock", 0), ("evict", BIG)]),
        workload("the parent is evicted in the same call", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("insert", [9]), ("evict", BIG)]),
        workload("an emptied parent waits behind an older leaf", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("insert", [9]), ("match", [1, 2]), ("evict", 3),
            ("evict", 1), ("evict", BIG)]),
        workload("whole nodes only; evict(0) frees nothing", 1, [
            ("insert", [1, 2, 3, 4, 5]), ("insert", [7, 7]), ("evict", 0), ("evict", 1), ("evict", 3),
            ("evict", 3)]),
        workload("locks and eviction at page_size 2", 2, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("insert", [1, 2, 3, 4, 7, 7]), ("lock", [1, 2, 3, 4, 5, 6]),
            ("insert", [1, 2, 9, 9]), ("evict", 3), ("evict", BIG), ("unlock", 0), ("evict", BIG)]),
        workload("bad input", 1, [
            ("insert", [1, 2, 3]), ("bad_unlock", [1, 2, 3]), ("lock", [1, 2]), ("bad_unlock", [1, 2, 3]),
            ("bad_evict", 1), ("unlock", 0), ("bad_unlock", [1, 2]), ("evict", BIG)]),
    ]


def request_workloads() -> list[dict]:
    """The notebook's walk-through and the visible checks' runs, then one workload of requests per pitfall."""
    system = list(range(100, 112))
    walk = list(range(100, 110))
    return [
        sched_workload("the walk-through (32 slots)", 32, 64, 3,
                       [(0, [("A", walk + [1, 2], 6)]), (1, [("B", walk + [3], 6)]), (2, [("C", [7] * 8, 8)])]),
        sched_workload("two requests share a system prompt; one finishes while the other runs", 64, 64, 4,
                       [(0, [("A", system + [1, 2], 3)]), (1, [("B", system + [7], 5)])]),
        sched_workload("two requests with the same prompt in the same step (duplicates)", 64, 64, 4,
                       [(0, [("A", system, 3), ("B", system, 4)]), (1, [("C", system + [5], 2)])]),
        sched_workload("a follow-up request hits what the first one generated", 64, 64, 4,
                       [(0, [("A", [1, 2, 3, 4], 6)]), (8, [("B", [1, 2, 3, 4, 5], 2)])]),
        sched_workload("the pool runs out while three requests decode (evict, then preempt)", 24, 64, 4,
                       [(0, [("A", [1, 2, 3, 4, 5, 6], 6), ("B", [1, 2, 3, 7, 8], 6), ("C", [9, 9, 9], 6)])]),
        sched_workload("page_size 2: unaligned tails", 40, 64, 3,
                       [(0, [("A", [1, 2, 3, 4, 5], 4)]), (1, [("B", [1, 2, 3, 4, 6, 6, 6], 3)]),
                        (6, [("C", [1, 2, 3, 4, 5, 9], 2)])], page_size=2),
        sched_workload("longest prefix first", 64, 64, 1,
                       [(0, [("H0", system + [1], 2)]), (1, [("L", [7, 7, 7, 7], 2)]),
                        (2, [("H1", system + [2], 2)]), (4, [("H2", system + [3], 2)])], policy="lpm"),
    ]


def scheduler_workloads() -> list[dict]:
    return [*lock_workloads(), *request_workloads()]


# ------------------------------------------------------------------------------------------------
# reading and showing results


def _tree_norm(raw, args):
    if not isinstance(raw, dict) or "state" not in raw:
        raise Shape(f"the driver returned {SHORT.repr(raw)}")
    out = {k: raw[k] for k in ("result", "raised", "freed") if k in raw}
    out["tree"] = view(raw["state"])
    return out


def _show_tree_result(v: dict) -> str:
    text = f"raised {v['raised']}" if "raised" in v else str(v.get("result"))
    if v.get("freed"):
        text += f" (the allocator was handed {v['freed']})"
    return text


def _locked_freed(before: dict, got: dict) -> str:
    """What evict freed of nodes that were locked before the call (the pitfall's trace, whatever the code)."""
    freed = set(got.get("result") or []) if isinstance(got.get("result"), list) else set()
    for row in before["nodes"][1:]:
        if isinstance(row[LOCK], int) and row[LOCK] > 0 and freed & set(row[VALUE]):
            return (f" It freed KV indices of the node {show(path_by_id(before, row[ID]))}, which is "
                    f"locked (lock_ref {row[LOCK]}): evict takes only nodes with lock_ref == 0.")
    return ""


def _tree_note(args, got, want) -> str:
    before = args[1]
    lines = []
    if all(got.get(k) == want.get(k) for k in ("result", "raised", "freed")):
        lines.append(f"First difference: {tree_difference(got['tree'], want['tree']) or 'the trees differ'}")
    lines.append("The tree before the call:")
    lines += [f"    {ln}" for ln in tree_text(before).splitlines()]
    return _locked_freed(before, got) + "\n" + "\n".join(lines)


def _finish_norm(raw, args):
    if not isinstance(raw, dict) or "state" not in raw:
        raise Shape(f"the driver returned {SHORT.repr(raw)}")
    st = raw["state"]
    req = {k: st["req"][k] for k in ("kv", "prefix", "last_path", "cached", "scheduled")}
    out = {"free": st["free"], "tree": view(st["tree"]), "req": req}
    for k in ("raised", "diverged"):
        if k in raw:
            out[k] = raw[k]
    if "diverged" in raw:
        out["at"] = view(raw["tree"])
    return out


def _show_finish(v: dict) -> str:
    if "diverged" in v:
        return f"(it called {v['diverged']} in a state the reference never calls it in)"
    if "raised" in v:
        return f"raised {v['raised']}"
    return f"{len(v['free'])} free slots and {v['tree']['sizes'][2]} tokens in the tree"


_REQ_FIELDS = {"kv": "kv_indices", "prefix": "prefix_indices", "last_path": "last_node (its path)",
               "cached": "num_cached_tokens", "scheduled": "num_scheduled_tokens"}


def free_difference(a: list, b: list) -> str:
    missing, extra = sorted(set(b) - set(a)), sorted(set(a) - set(b))
    if not missing and not extra:
        return (f"the pool's free list holds the right slots in another order: yours {show(a, 16)}, the "
                f"reference's {show(b, 16)}")
    return (f"the pool has {len(a)} free slots; the reference's {len(b)}. Free in the reference's pool but not in "
            f"yours: {show(missing, 16)}; free in yours but not in the reference's: {show(extra, 16)}")


def _finish_note(args, got, want) -> str:
    where, before, replay = args
    if "diverged" in got:
        entries = list(replay["dec_lock_ref"].values())
        body = "the reference does not unlock in this call" if not entries else (
            f"the reference calls it once, after insert, on req.last_node; when yours called, "
            f"{tree_difference(got['at'], view(entries[0]['after'])) or 'the tree was otherwise the same'}")
        body = f"First difference: {body}"
    elif got["free"] != want["free"]:
        body = f"First difference: {free_difference(got['free'], want['free'])}"
    elif got["req"] != want["req"]:
        k = next(k for k in _REQ_FIELDS if got["req"][k] != want["req"][k])
        body = (f"First difference: afterwards req.{_REQ_FIELDS[k]} is {SHORT.repr(got['req'][k])}; the "
                f"reference's is {SHORT.repr(want['req'][k])} (the hook clears the request)")
    else:
        body = f"First difference: {tree_difference(got['tree'], want['tree']) or 'the trees differ'}"
    r = before["req"]
    lines = [body, f"Before the call: {r['name']} has {len(r['prompt'])} prompt tokens and {len(r['output'])} "
                   f"generated, kv_indices {show(r['kv'], 16)}, prefix_indices {show(r['prefix'], 16)} (locked "
                   f"through the node {show(r['last_path'] or [])}), page_size {before['config']['page_size']}; "
                   f"{len(before['free'])} free slots",
             "The tree before the call:"]
    lines += [f"    {ln}" for ln in tree_text(before["tree"]).splitlines()]
    return "\n" + "\n".join(lines)


def _run_norm(raw, args):
    if not isinstance(raw, dict) or "trace" not in raw:
        raise Shape(f"the driver returned {SHORT.repr(raw)}")
    return raw


def _show_run(v: dict) -> str:
    return f"a run of {len(v['trace'])} {'steps' if v['trace'] and len(v['trace'][0]) == 8 else 'operations'}"


_OBS = ("the step", "waiting", "running", "the pool's free list", "(evictable, protected, total) sizes", "the tree",
        "the tree", "the requests")


def _step_text(s) -> str:
    pairs = lambda items: " ".join(f"{n}:{k}" for n, k in items)
    return (f"{'prefill' if s[0] == 'P' else 'decode'} {pairs(s[1])} (cached {pairs(s[2])})"
            f"{', preempted ' + ' '.join(s[3]) if s[3] else ''}{', finished ' + ' '.join(s[4]) if s[4] else ''}")


def _step_difference(mine: list, want: list) -> str:
    for i, (a, b) in enumerate(zip(mine, want)):
        if a == b:
            continue
        if i == 0:
            return f"the step: yours {_step_text(a)}; the reference's {_step_text(b)}"
        if i == 3:
            return free_difference(a, b)
        if i == 5:
            return (a or ["the tree is broken"])[0]
        if i == 6:
            return tree_difference({"sizes": [], "problems": [], "rows": a},
                                        {"sizes": [], "problems": [], "rows": b}) or "the trees differ"
        if i == 7:
            fields = ("output_ids", "status", "kv_indices", "prefix_indices", "last_node (its path)",
                      "num_cached_tokens", "num_scheduled_tokens")
            for ra, rb in zip(a, b):
                if ra != rb:
                    j = next(j for j in range(1, 8) if ra[j] != rb[j])
                    return f"{rb[0]}'s {fields[j - 1]} is {SHORT.repr(ra[j])}; the reference's is {SHORT.repr(rb[j])}"
        return f"{_OBS[i]}: yours {SHORT.repr(a)}; the reference's {SHORT.repr(b)}"
    return "the states differ"


def _describe(work: dict) -> str:
    c = work["config"]
    head = (f"RadixScheduler(kv_capacity_tokens={c['kv_capacity_tokens']}, "
            f"max_num_batched_tokens={c['max_num_batched_tokens']}, max_num_seqs={c['max_num_seqs']}, "
            f"page_size={c['page_size']}, policy={c['policy']!r})")
    reqs = [f"    {n}: prompt {show(p, 14)} ({len(p)} tokens), max_new_tokens={m}, added before step {step}"
            for step, group in work["arrivals"] for n, p, m in group]
    return head + "\n  requests:\n" + "\n".join(reqs)


def _run_note(args, got, want) -> str:
    work = args[1]
    if "ops" in work:
        return trace_note(args, got, want, "Your RadixCache (your locks and eviction)")
    who = "Your RadixScheduler (your locks, eviction and cache_finished_req)"
    for k, (mine, theirs) in enumerate(zip(got["trace"], want["trace"])):
        if mine == theirs:
            continue
        lines = [f"\n{who} differs from the reference at step {k} of the workload '{work['label']}':",
                 f"  {_describe(work)}"]
        if k:
            lines.append("  steps before (the same on both sides):")
            lines += [f"    step {j}: {_step_text(want['trace'][j][0])}; {len(want['trace'][j][3])} free slots, "
                      f"sizes {tuple(want['trace'][j][4])}" for j in range(max(0, k - 6), k)]
        lines.append(f"First difference: {_step_difference(mine, theirs)}")
        return "\n".join(lines)
    k = len(got["trace"])
    if "problem" in got:
        return (f"\n{who}, after {k} steps that match the reference's on the workload '{work['label']}': "
                f"{got['problem']}")
    return f"\nYour run takes {k} steps; the reference's {len(want['trace'])}."


def _at(args) -> str:
    return f" at {args[0]}"


SPECS = {s.name: s for s in [
    Spec("inc_lock_ref", ("where", "state", "node"), RadixCache.inc_lock_ref, _tree_norm, _show_tree_result,
         driver=f"{__name__}:drive_inc_lock_ref", note=_tree_note,
         call=lambda a: f"inc_lock_ref({_node_text(a[1], a[2])}){_at(a)}"),
    Spec("dec_lock_ref", ("where", "state", "node"), RadixCache.dec_lock_ref, _tree_norm, _show_tree_result,
         driver=f"{__name__}:drive_dec_lock_ref", note=_tree_note,
         call=lambda a: f"dec_lock_ref({_node_text(a[1], a[2])}){_at(a)}"),
    Spec("evict", ("where", "state", "num_tokens"), RadixCache.evict, _tree_norm, _show_tree_result,
         driver=f"{__name__}:drive_evict", note=_tree_note, call=lambda a: f"evict({a[2]}){_at(a)}"),
    Spec("cache_finished_req", ("where", "state", "replay"), RadixScheduler.cache_finished_req, _finish_norm,
         _show_finish, driver=f"{__name__}:drive_cache_finished_req", note=_finish_note,
         call=lambda a: f"cache_finished_req({a[1]['req']['name']}){_at(a)}"),
    Spec("RadixScheduler", ("where", "workload"), RadixScheduler, _run_norm, _show_run,
         driver=f"{__name__}:drive_scheduler", note=_run_note,
         call=lambda a: f"your RadixScheduler on the workload '{a[0]}'"),
]}


def visible_cases(name: str) -> list[tuple]:
    if name == "RadixScheduler":
        return cases_of(name, scheduler_workloads())
    if name == "cache_finished_req":
        return cases_of(name, request_workloads())
    return cases_of(name, lock_workloads())


def diagnose(exercise: str, fn) -> str:
    """What is wrong with the learner's ``fn`` (their method, or their RadixScheduler class for ``"scheduler"``) on
    the notebook's workloads, in their terms, for a visible assert's message. Never raises."""
    name = "RadixScheduler" if exercise == "scheduler" else exercise
    return spec.diagnose_cases(SPECS, ASSIGNMENT, fn, name, lambda: visible_cases(name), exercise)


__all__ = ["ASSIGNMENT", "SPECS", "cases_of", "diagnose", "lock_workloads", "record_scheduler", "request_workloads"]
