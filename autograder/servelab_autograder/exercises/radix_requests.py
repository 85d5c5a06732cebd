"""Workloads of requests through chapter 05's RadixScheduler: its state as plain data, a run, the reference's
recording of ``cache_finished_req`` and the replay of the unlock that hook makes.

A workload (:func:`sched_workload`) is a scheduler's settings and requests arriving before given steps;
:func:`run_scheduler` runs a RadixScheduler class through one, observing every step (the batch, the hits, the
queues, the pool's free list in order, every request's KV row, locked prefix and counters, the sizes and the
tree); the model reads each request's context back through its KV slots (``slot_model``), so a slot handed to two
owners shows up as a wrong token. :func:`record_scheduler` keeps every call of ``cache_finished_req`` with the
state it was made in (:func:`sched_state`) and, in its frame, the reference's ``dec_lock_ref`` answers keyed by
the whole tree (:func:`lock_key`); :func:`with_unlock_replay` answers the learner's hook from them.
"""

from __future__ import annotations

import random
from collections import deque

from servelab.engine.radix import RadixEngine, slot_model
from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.radix_scheduler import RadixScheduler, Req
from servelab.schedulers.scheduler import SequenceStatus
from servelab_autograder.exercises.radix_state import (
    SHORT,
    node_by_id,
    path_of,
    plain_int,
    plain_ints,
    set_tree,
    show,
    snapshot,
    state_key,
)
from servelab_autograder.exercises.radix_view import view
from servelab_autograder.exercises.radix_workloads import counted
from servelab_autograder.exercises.replay import Recording, Replay, digest, once_per_workload

MAX_STEPS = 2000           # more steps than any workload needs


# ------------------------------------------------------------------------------------------------
# the scheduler's state as plain data, for cache_finished_req


CONFIG = ("kv_capacity_tokens", "max_num_batched_tokens", "max_num_seqs", "page_size", "policy", "eos")


def req_state(tree, req) -> dict:
    node = req.last_node
    return {"name": req.name, "prompt": plain_ints(req.origin_input_ids), "output": plain_ints(req.output_ids),
            "max_new_tokens": req.max_new_tokens, "kv": plain_ints(req.kv_indices),
            "prefix": plain_ints(req.prefix_indices),
            "last_node": None if node is None else plain_int(getattr(node, "id", None)),
            "last_path": None if node is None else path_of(tree, node),
            "cached": plain_int(req.num_cached_tokens), "scheduled": plain_int(req.num_scheduled_tokens),
            "status": req.status.name if isinstance(req.status, SequenceStatus) else SHORT.repr(req.status)}


def sched_state(sch, req) -> dict:
    """What cache_finished_req works on: the settings, the pool's free list (in order), the tree, the request."""
    return {"config": {k: getattr(sch, k) for k in CONFIG},
            "free": plain_ints(list(sch.token_to_kv_pool_allocator.free_slots)),
            "tree": snapshot(sch.tree_cache), "req": req_state(sch.tree_cache, req)}


def build_sched(state: dict, cls=RadixScheduler):
    """A scheduler (of class ``cls``) and the request in ``state``."""
    sch = cls(**state["config"])
    pool = sch.token_to_kv_pool_allocator
    pool.free_slots = deque(state["free"])
    pool._free_set = set(state["free"])
    set_tree(sch.tree_cache, state["tree"])
    st = state["req"]
    req = Req(st["prompt"], st["max_new_tokens"], name=st["name"])
    req.output_ids = list(st["output"])
    req.kv_indices, req.prefix_indices = list(st["kv"]), list(st["prefix"])
    req.last_node = None if st["last_node"] is None else node_by_id(sch.tree_cache, st["last_node"])
    req.num_cached_tokens, req.num_scheduled_tokens = st["cached"], st["scheduled"]
    req.status = SequenceStatus[st["status"]]
    return sch, req




def lock_key(state: dict, node_id) -> str:
    """What an unlock depends on: the whole tree it is made in and the node."""
    return digest("dec_lock_ref", state_key(state), plain_int(node_id))


def with_unlock_replay(tree, replay: dict) -> Replay:
    """Answer the tree's dec_lock_ref calls from ``replay`` (the reference run's, keyed by the tree they are made
    in); returns the Replay, which keeps the first divergence."""
    answers = Replay(replay)

    def dec_lock_ref(node):
        entry = answers.get("dec_lock_ref", lock_key(snapshot(tree), getattr(node, "id", None)))
        if entry is None:
            where = path_of(tree, node)
            answers.diverge(f"dec_lock_ref(the node {show(where) if isinstance(where, list) else where})",
                            lambda: snapshot(tree))
        set_tree(tree, entry["after"])
        return entry["result"]

    tree.dec_lock_ref = dec_lock_ref
    return answers


# ------------------------------------------------------------------------------------------------
# workloads of requests, and the whole scheduler through them


def sched_workload(label: str, kv_capacity_tokens: int, budget: int, max_running: int, arrivals, page_size: int = 1,
                   policy: str = "fcfs") -> dict:
    """``arrivals``: [(step, [(name, prompt, max_new_tokens), ...]), ...]; a request is added just before that
    step (an idle scheduler takes the next ones at once, as RadixEngine.run does)."""
    return {"label": label, "config": {"kv_capacity_tokens": kv_capacity_tokens, "max_num_batched_tokens": budget,
                                       "max_num_seqs": max_running, "page_size": page_size, "policy": policy,
                                       "eos": -1},
            "arrivals": [[step, [[n, list(p), m] for n, p, m in reqs]] for step, reqs in arrivals]}


def _observe(sch, record, reqs: dict) -> list:
    tree = sch.tree_cache
    step = [record.kind, [list(x) for x in record.scheduled], [list(x) for x in record.cached],
            list(record.preempted), list(record.finished)]
    tv = view(snapshot(tree))
    people = [[r["name"], r["output"], r["status"], r["kv"], r["prefix"], r["last_path"], r["cached"], r["scheduled"]]
              for r in (req_state(tree, q) for q in reqs.values())]
    return [step, [r.name for r in sch.waiting], [r.name for r in sch.running],
            plain_ints(list(sch.token_to_kv_pool_allocator.free_slots)), tv["sizes"], tv["problems"], tv["rows"],
            people]


def run_scheduler(cls, work: dict, before=None) -> dict:
    """``cls`` (a RadixScheduler class) through a workload of requests: every step's observation; a step that
    raises ends the run (a stub's NotImplementedError goes on up). ``before(step)``: the recording's hook."""
    if not isinstance(getattr(cls, "cache_class", None), type):
        return {"trace": [], "problem": f"cache_class is {SHORT.repr(getattr(cls, 'cache_class', None))}; it must "
                                        "be your RadixCache class"}
    sch = type(cls.__name__, (cls,), {"cache_class": counted(cls.cache_class)})(**work["config"])
    engine = RadixEngine(sch, model=slot_model(sch.token_to_kv_pool_allocator), check=False)
    pending = {step: reqs for step, reqs in work["arrivals"]}
    reqs: dict = {}
    trace: list = []
    for _ in range(MAX_STEPS):
        due = [k for k in pending if k <= len(engine.trace)]
        if not due and pending and sch.is_finished():
            due = [min(pending)]
        for k in sorted(due):
            for name, prompt, max_new in pending.pop(k):
                reqs[name] = Req(list(prompt), max_new, name=name)
                sch.add(reqs[name])
        if not pending and sch.is_finished():
            return {"trace": trace}
        if before is not None:
            before(len(engine.trace))
        sch.tree_cache.evict_calls = 0
        try:
            record = engine.step()
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - part of the run: the reference's never raises here
            return {"trace": trace, "problem": f"step {len(engine.trace)} raised {type(e).__name__}: {e}"}
        trace.append(_observe(sch, record, reqs))
    return {"trace": trace, "problem": f"the workload ran {MAX_STEPS} steps without finishing"}




# ------------------------------------------------------------------------------------------------
# the reference's runs: where the cases come from (the learner's lab and the grader; never the sandbox)


@once_per_workload
def record_scheduler(work: dict) -> list[tuple]:
    """Every call of cache_finished_req in a run of the reference scheduler through ``work``, with the state it was
    made in and the replay of its dec_lock_ref calls. Made once per workload."""
    rec = Recording(("cache_finished_req",))
    now = {"where": ""}

    class Tree(RadixCache):
        def dec_lock_ref(self, node):
            inside = bool(rec.frames)
            before = snapshot(self) if inside else None
            out = RadixCache.dec_lock_ref(self, node)
            if inside:
                rec.note("dec_lock_ref", lock_key(before, node.id),
                         {"after": snapshot(self), "result": out, "node": node.id})
            return out

    class RecordingScheduler(RadixScheduler):
        cache_class = Tree

        def cache_finished_req(self, req):
            why = "finishing" if req.status == SequenceStatus.FINISHED else "preempting"
            before = sched_state(self, req)
            with rec.frame(f"cache_finished_req({req.name})", ("dec_lock_ref",)) as frame:
                try:
                    RadixScheduler.cache_finished_req(self, req)
                finally:
                    rec.cases["cache_finished_req"].append((f"{now['where']}, {why} {req.name}", before,
                                                            frame.tables))

    def before(step):
        now["where"] = f"step {step} of '{work['label']}'"

    run = run_scheduler(RecordingScheduler, work, before)
    if "problem" in run:
        raise ValueError(f"the reference cannot run '{work['label']}': {run['problem']}")
    return rec.cases["cache_finished_req"]


def random_request_workloads(rng: random.Random, n: int) -> list[dict]:
    """Shared prefixes over three tokens, page sizes 1, 2 and 4, pools small enough to evict and preempt, FCFS and
    longest prefix first."""
    out = []
    while len(out) < n:
        ps, pool = rng.choice([1, 1, 2, 4]), rng.randint(12, 40)
        prefix = [rng.randint(0, 2) for _ in range(rng.randint(0, 12))]
        groups: dict[int, list] = {}
        for i in range(rng.randint(1, 7)):
            p = prefix[:rng.randint(0, len(prefix))] + [rng.randint(0, 2) for _ in range(rng.randint(1, 8))]
            mt = rng.randint(1, 8)
            if len(p) + mt - 1 <= pool:
                groups.setdefault(rng.choice([0, 0, 1, 3, 6]), []).append((f"r{i}", p, mt))
        if groups:
            policy = rng.choice(["fcfs", "lpm"])
            out.append(sched_workload(f"random workload {len(out)} ({policy}, page_size {ps}, {pool} slots)", pool,
                                      rng.randint(1, 40), rng.randint(1, 5), sorted(groups.items()), ps, policy))
    return out


__all__ = ["CONFIG", "MAX_STEPS", "build_sched", "lock_key", "random_request_workloads", "record_scheduler",
           "req_state", "run_scheduler", "sched_state", "sched_workload", "with_unlock_replay"]
