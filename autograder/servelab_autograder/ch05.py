"""Hidden-test helpers for ``ch05_lock_ref_eviction``.

The learner writes the radix cache's locks and eviction (``inc_lock_ref``, ``dec_lock_ref``, ``evict``, methods
of :class:`servelab.radix_cache.RadixCache`) and the scheduler's hook that hands a finished or preempted
request's KV to the tree (``cache_finished_req``, a method of
:class:`servelab.radix_scheduler.RadixScheduler`).

The cache methods are checked with chapter 04's replay (:mod:`servelab_autograder.ch04`): the learner's method
on a subclass of the reference, the same operation sequences on both, and after every operation the results
(size changes, freed KV indices in order, what the allocator was handed), the three size counters and the whole
tree compared.

``cache_finished_req`` is checked in lockstep: the reference scheduler with the learner's hook and the reference
itself serve the same workload (FCFS and longest-prefix-first, page sizes 1, 2 and 4, pools small enough to
evict and preempt), and after every step the batch, the hits, the queues, the pool's free list in order, every
running request's KV row and locked prefix, the generated tokens, the sizes and the tree are compared. The
model reads each request's context back through its KV slots, so a slot handed to two owners shows up as a
wrong token.

The first difference is reported with the pitfall that explains it first, when one does.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from servelab.radix_cache import RadixCache
from servelab.radix_scheduler import (
    RadixEngine,
    RadixScheduler,
    Req,
    TokenToKVPoolAllocator,
    lpm_starvation,
    slot_model,
)
from servelab_autograder import ch04, common
from servelab_autograder.ch04 import (
    Case,
    learner_class,
    no_reference_calls,
    random_cases,
    reject_reference,
    run_cases,
    wrap,
)
from servelab_autograder.common import time_limit

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_cache_finished_req",
    "check_dec_lock_ref",
    "check_drills",
    "check_evict",
    "check_inc_lock_ref",
    "check_scheduler",
    "diagnose",
]

PITFALLS = {
    "lock_double_count": "Pitfall: sizes double-counted. A node's tokens move from evictable to protected only "
    "when its lock_ref goes from 0 to 1; a second lock on a locked node changes no size.",
    "lock_only_node": "Pitfall: the lock did not walk up to the root. inc_lock_ref increments every node from "
    "the given one up to (not including) the root: a lock protects the whole prefix.",
    "unlock_double_count": "Pitfall: sizes double-counted on unlock. A node's tokens go back to evictable only "
    "when its lock_ref goes from 1 to 0.",
    "unlock_no_check": "Pitfall: unlocking a node that holds no lock was not refused. dec_lock_ref raises "
    "ValueError when a non-root node's lock_ref is already 0 (it would go to -1).",
    "evict_locked": "Pitfall: evicting a locked node. evict takes only nodes with lock_ref == 0; a parent "
    "emptied by eviction that is on a running request's path stays.",
    "evict_no_cascade": "Pitfall: emptied parents not evicted in the same call. A node whose last child was just "
    "evicted joins the heap at once if it is unlocked, and evict keeps going until enough tokens are freed.",
    "evict_parent_at_once": "Pitfall: an emptied parent was evicted at once. It joins the heap with its own "
    "last access time, so an older leaf elsewhere goes first.",
    "evict_order": "Pitfall: eviction is not least recently used first. Pop the leaf with the smallest "
    "last_access_time (then the smallest id) first.",
    "evict_overshoot": "Pitfall: evict kept going after it had freed enough. It stops as soon as at least "
    "num_tokens tokens are freed (whole nodes only, so it may free a little more).",
    "evict_negative": "Pitfall: a negative eviction was not refused. evict raises ValueError when num_tokens < 0.",
    "evict_no_free": "Pitfall: evicted KV indices were not handed to the allocator. Each evicted node's value "
    "goes to token_to_kv_pool_allocator.free, or the pool never gets the slots back.",
    "finish_no_unlock": "Pitfall: forgot to unlock on finish or preemption. cache_finished_req ends with "
    "tree_cache.dec_lock_ref(req.last_node); without it the path stays protected for ever.",
    "finish_no_dup_free": "Pitfall: the duplicates were not freed. The tree keeps its own slots for the first "
    "new_prefix_len tokens; the request's copies kv_indices[len(prefix_indices):new_prefix_len] go back to the "
    "pool, or they leak.",
    "finish_frees_tree_slots": "Pitfall: freed slots that the tree owns. Only kv_indices[len(prefix_indices):"
    "new_prefix_len] are duplicates; the locked prefix and what insert just took belong to the tree.",
    "finish_no_tail_free": "Pitfall: the unaligned tail was not freed. With page_size > 1 the tokens after the "
    "last whole page are not inserted: kv_indices[aligned:] go back to the pool.",
    "finish_prompt_only": "Pitfall: only the prompt was cached. Insert every token that has KV, the generated "
    "ones too (all but the last sampled token), so a follow-up turn or a preempted request hits them.",
}
ch04.PITFALLS_ALL.update(PITFALLS)

_RANDOM_SEED = 5050
_short = ch04._short


def _show(tokens, limit: int = 10) -> str:
    return ch04._show(tokens, limit)


# --------------------------------------------------------------------------------------------------------
# the cache methods: pitfall variants and scenarios


def _lock_variant(double=False, only_node=False):
    def inc_lock_ref(self, node):
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 0 or double:
                self.evictable_size_ -= len(node.key)
                self.protected_size_ += len(node.key)
                delta -= len(node.key)
            node.lock_ref += 1
            self._update_leaf_status(node)
            if only_node:
                break
            node = node.parent
        return delta
    return inc_lock_ref


def _unlock_variant(double=False, check=True):
    def dec_lock_ref(self, node):
        if check and node is not self.root_node and node.lock_ref < 1:
            raise ValueError("no lock")
        delta = 0
        while node is not self.root_node:
            if node.lock_ref == 1 or double:
                self.evictable_size_ += len(node.key)
                self.protected_size_ -= len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        return delta
    return dec_lock_ref


def _evict_variant(lock_check=True, cascade=True, at_once=False, mru=False, stop=True, negative=True,
                   hand_over=True):
    def evict(self, num_tokens):
        if negative and num_tokens < 0:
            raise ValueError("negative")
        sign = -1 if mru else 1
        heap = [(sign * x.last_access_time, sign * x.id, x) for x in self.evictable_leaves]
        heapq.heapify(heap)
        freed = []
        while (len(freed) < num_tokens or not stop) and heap:
            _, _, x = heapq.heappop(heap)
            parent = x.parent
            if hand_over and self.token_to_kv_pool_allocator is not None:
                self.token_to_kv_pool_allocator.free(list(x.value))
            freed.extend(x.value)
            self._delete_leaf(x)
            if cascade and not parent.children and parent is not self.root_node and \
                    (parent.lock_ref == 0 or not lock_check):
                if at_once:
                    heapq.heappush(heap, (-math.inf, 0, parent))
                else:
                    heapq.heappush(heap, (sign * parent.last_access_time, sign * parent.id, parent))
        return freed
    return evict


def _cache_variants(key: str) -> dict[str, type]:
    table = {
        "inc_lock_ref": {"lock_double_count": _lock_variant(double=True),
                         "lock_only_node": _lock_variant(only_node=True)},
        "dec_lock_ref": {"unlock_no_check": _unlock_variant(check=False),
                         "unlock_double_count": _unlock_variant(double=True)},
        "evict": {"evict_locked": _evict_variant(lock_check=False),
                  "evict_no_cascade": _evict_variant(cascade=False),
                  "evict_parent_at_once": _evict_variant(at_once=True),
                  "evict_order": _evict_variant(mru=True),
                  "evict_overshoot": _evict_variant(stop=False),
                  "evict_negative": _evict_variant(negative=False),
                  "evict_no_free": _evict_variant(hand_over=False)},
    }
    return {p: [ch04.guarded(type(f"Pitfall_{p}", (RadixCache,), {key: fn}))] for p, fn in table[key].items()}


def _evict_prop(op, prev, m, w) -> str | None:
    """An eviction that freed KV indices of a node that was locked before it."""
    if op.kind != "evict" or prev is None or m.result[:2] != ("evict", "ok") or not isinstance(m.result[2], tuple):
        return None
    locked = {i for row in prev.rows if row[3] > 0 for i in row[2]}
    return "evict_locked" if locked & set(m.result[2]) else None


def lock_cases() -> list[Case]:
    s = ch04._script
    return [
        s("two requests lock a shared path, then one unlocks", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("lock", [1, 2, 3]), ("lock", [1, 2, 4]),
            ("lock", [1, 2, 3]), ("unlock", 0), ("evict", 10**6), ("unlock", 0), ("unlock", 0), ("evict", 10**6)]),
        s("a lock on a deep node protects the whole prefix", 1, [
            ("insert", [1, 2, 3, 4]), ("match", [1, 2, 9]), ("match", [1, 2, 3, 8]), ("lock", [1, 2, 3, 4]),
            ("insert", [5, 6]), ("evict", 10**6), ("unlock", 0), ("evict", 10**6)]),
        s("a new leaf under a locked node", 1, [
            ("insert", [1, 2]), ("lock", [1, 2]), ("insert", [1, 2, 3, 4]), ("evict", 10**6), ("insert", [1, 2, 5]),
            ("insert", [9]), ("evict", 10**6), ("unlock", 0), ("evict", 10**6)]),
        s("the parent is evicted in the same call", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("insert", [9]), ("evict", 10**6)]),
        s("an emptied parent waits behind an older leaf", 1, [
            ("insert", [1, 2, 3]), ("insert", [1, 2, 4]), ("insert", [9]), ("match", [1, 2]), ("evict", 2),
            ("evict", 1), ("evict", 1)]),
        s("whole nodes only; evict(0) frees nothing", 1, [
            ("insert", [1, 2, 3, 4, 5]), ("insert", [7, 7]), ("evict", 0), ("evict", 1), ("evict", 3),
            ("evict", 3)]),
        s("locks and eviction at page_size 2", 2, [
            ("insert", [1, 2, 3, 4, 5, 6]), ("insert", [1, 2, 3, 4, 7, 7]), ("lock", [1, 2, 3, 4, 5, 6]),
            ("insert", [1, 2, 9, 9]), ("evict", 3), ("evict", 10**6), ("unlock", 0), ("evict", 10**6)]),
        s("bad input", 1, [
            ("insert", [1, 2, 3]), ("bad_unlock", [1, 2, 3]), ("lock", [1, 2]), ("bad_unlock", [1, 2, 3]),
            ("bad_evict", 1), ("unlock", 0), ("bad_unlock", [1, 2]), ("evict", 10**6)]),
    ]


def _cache_cases(n_random: int, n_ops: int = 200) -> list[Case]:
    return lock_cases() + list(random_cases(_RANDOM_SEED, n_random, n_ops))


def check_inc_lock_ref(fn) -> None:
    """Hidden test of inc_lock_ref: the reference tree with the learner's inc_lock_ref, step by step."""
    reject_reference(fn, "inc_lock_ref")
    run_cases(learner_class("YourIncLockRef", inc_lock_ref=fn), "RadixCache with your inc_lock_ref",
              _cache_cases(12), _cache_variants("inc_lock_ref"))


def check_dec_lock_ref(fn) -> None:
    """Hidden test of dec_lock_ref: the reference tree with the learner's dec_lock_ref, step by step."""
    reject_reference(fn, "dec_lock_ref")
    run_cases(learner_class("YourDecLockRef", dec_lock_ref=fn), "RadixCache with your dec_lock_ref",
              _cache_cases(12), _cache_variants("dec_lock_ref"))


def check_evict(fn) -> None:
    """Hidden test of evict: the reference tree with the learner's evict, step by step."""
    reject_reference(fn, "evict")
    run_cases(learner_class("YourEvict", evict=fn), "RadixCache with your evict", _cache_cases(12),
              _cache_variants("evict"), _evict_prop)


# --------------------------------------------------------------------------------------------------------
# cache_finished_req: the scheduler in lockstep


@dataclass(frozen=True)
class _R:
    name: str
    prompt: tuple[int, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class SchedCase:
    label: str
    pool_size: int
    budget: int
    max_running: int
    page_size: int = 1
    policy: str = "fcfs"
    arrivals: tuple[tuple[int, tuple[_R, ...]], ...] = ()

    def describe(self) -> str:
        head = (f"RadixScheduler(pool_size={self.pool_size}, max_prefill_tokens={self.budget}, "
                f"max_running_requests={self.max_running}, page_size={self.page_size}, policy={self.policy!r})")
        reqs = [f"    {r.name}: prompt {_show(r.prompt, 14)} ({len(r.prompt)} tokens), max_new_tokens="
                f"{r.max_new_tokens}, added before step {step}" for step, group in self.arrivals for r in group]
        return head + "\n  requests:\n" + "\n".join(reqs)


def _arr(*groups) -> tuple:
    return tuple((step, tuple(reqs)) for step, reqs in groups)


def _sched_pitfall_cases() -> list[SchedCase]:
    system = tuple(range(100, 112))
    return [
        SchedCase("two requests share a system prompt; one finishes while the other runs", 64, 64, 4,
                  arrivals=_arr((0, [_R("A", system + (1, 2), 3)]), (1, [_R("B", system + (7,), 5)]))),
        SchedCase("two requests with the same prompt in the same step (duplicates)", 64, 64, 4,
                  arrivals=_arr((0, [_R("A", system, 3), _R("B", system, 4)]), (1, [_R("C", system + (5,), 2)]))),
        SchedCase("a follow-up request hits what the first one generated", 64, 64, 4,
                  arrivals=_arr((0, [_R("A", (1, 2, 3, 4), 6)]), (8, [_R("B", (1, 2, 3, 4, 5), 2)]))),
        SchedCase("the pool runs out while three requests decode (evict, then preempt)", 24, 64, 4,
                  arrivals=_arr((0, [_R("A", (1, 2, 3, 4, 5, 6), 6), _R("B", (1, 2, 3, 7, 8), 6),
                                     _R("C", (9, 9, 9), 6)]))),
        SchedCase("page_size 2: unaligned tails", 40, 64, 3, page_size=2,
                  arrivals=_arr((0, [_R("A", (1, 2, 3, 4, 5), 4)]), (1, [_R("B", (1, 2, 3, 4, 6, 6, 6), 3)]),
                                (6, [_R("C", (1, 2, 3, 4, 5, 9), 2)]))),
        SchedCase("longest prefix first", 64, 64, 1, policy="lpm",
                  arrivals=_arr((0, [_R("H0", system + (1,), 2)]), (1, [_R("L", (7, 7, 7, 7), 2)]),
                                (2, [_R("H1", system + (2,), 2)]), (4, [_R("H2", system + (3,), 2)]))),
    ]


@functools.cache
def _random_sched_cases(seed: int, n: int) -> tuple[SchedCase, ...]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        ps = rng.choice([1, 1, 2, 4])
        pool = rng.randint(16, 64)
        prefix = [rng.randint(0, 2) for _ in range(rng.randint(0, 12))]
        groups: dict[int, list[_R]] = {}
        for i in range(rng.randint(1, 7)):
            p = prefix[:rng.randint(0, len(prefix))] + [rng.randint(0, 2) for _ in range(rng.randint(1, 8))]
            mt = rng.randint(1, 8)
            if len(p) + mt - 1 > pool:
                continue
            groups.setdefault(rng.choice([0, 0, 1, 3, 6]), []).append(_R(f"r{i}", tuple(p), mt))
        if not groups:
            continue
        out.append(SchedCase(f"random workload {len(out)} (seed {seed})", pool, rng.randint(1, 40), rng.randint(1, 5),
                             ps, rng.choice(["fcfs", "lpm"]), tuple(sorted((k, tuple(v)) for k, v in groups.items()))))
    return tuple(out)


class _SchedSide:
    def __init__(self, case: SchedCase, cls: type):
        self.case = case
        self.sch = cls(pool_size=case.pool_size, max_prefill_tokens=case.budget,
                       max_running_requests=case.max_running, page_size=case.page_size, policy=case.policy)
        self.engine = RadixEngine(self.sch, model=slot_model(self.sch.token_to_kv_pool_allocator), check=False)
        self.pending = {k: list(v) for k, v in case.arrivals}
        self.reqs: dict[str, Req] = {}

    def add_due(self):
        if not self.pending:
            return
        due = [k for k in self.pending if k <= len(self.engine.trace)]
        if not due and self.sch.is_finished():
            due = [min(self.pending)]
        for k in sorted(due):
            for r in self.pending.pop(k):
                req = Req(list(r.prompt), r.max_new_tokens, name=r.name)
                self.reqs[r.name] = req
                self.sch.add(req)

    def done(self) -> bool:
        return not self.pending and self.sch.is_finished()

    def brief(self) -> tuple:
        sch, tree = self.sch, self.sch.tree_cache
        return (None, tuple(r.name for r in sch.waiting), tuple(r.name for r in sch.running),
                tuple(sch.token_to_kv_pool_allocator.free_slots),
                (tree.evictable_size(), tree.protected_size(), tree.total_size()))

    def observe(self, record) -> tuple:
        sch, tree = self.sch, self.sch.tree_cache
        pool: TokenToKVPoolAllocator = sch.token_to_kv_pool_allocator
        step = None if record is None else (record.kind, tuple(record.scheduled), tuple(record.cached),
                                            tuple(record.preempted), tuple(record.finished))
        rows, problems = ch04.tree_rows(tree, self.case.page_size)
        running = tuple((r.name, tuple(r.kv_indices), tuple(r.prefix_indices),
                         ch04._path(tree, r.last_node) if r.last_node is not None else None) for r in sch.running)
        return (step, tuple(r.name for r in sch.waiting), tuple(r.name for r in sch.running), tuple(pool.free_slots),
                (tree.evictable_size(), tree.protected_size(), tree.total_size()), problems, rows, running,
                tuple((n, tuple(r.output_ids), r.status.name) for n, r in self.reqs.items()))


_OBS_FIELDS = ("the step", "waiting", "running", "the pool's free list", "(evictable, protected, total) sizes",
               "the tree", "the tree", "the running requests' KV rows", "the requests")


def _obs_diff(mine: tuple, want: tuple) -> str | None:
    for i, (a, b) in enumerate(zip(mine, want)):
        if a == b:
            continue
        if i == 0:
            text = lambda s: "nothing" if s is None else (
                f"{'prefill' if s[0] == 'P' else 'decode'} {' '.join(f'{n}:{k}' for n, k in s[1])}, cached "
                f"{' '.join(f'{n}:{k}' for n, k in s[2])}, preempted {list(s[3])}, finished {list(s[4])}")
            return f"the step: yours {text(a)}; the reference's {text(b)}"
        if i == 3:
            missing, extra = sorted(set(b) - set(a)), sorted(set(a) - set(b))
            if not missing and not extra:
                return (f"the pool's free list holds the right slots in another order: yours {_show(a, 16)}, "
                        f"the reference's {_show(b, 16)}")
            return (f"the pool has {len(a)} free slots; the reference's {len(b)}. Free in the reference's pool but "
                    f"not in yours: {_show(missing, 16)}; free in yours but not in the reference's: "
                    f"{_show(extra, 16)}")
        if i == 5:
            return a[0] if a else "the tree differs"
        if i == 6:
            return ch04._rows_diff(a, b)
        if i == 7:
            ma, wb = {r[0]: r for r in a}, {r[0]: r for r in b}
            for name in wb:
                if ma.get(name) != wb[name]:
                    got = ma.get(name)
                    if got is None:
                        return f"{name} is not running on your side"
                    what = ("kv_indices", "prefix_indices", "the path of last_node")
                    j = next(j for j in range(1, 4) if got[j] != wb[name][j])
                    return (f"{name}'s {what[j - 1]} is {_short.repr(got[j])}; the reference's is "
                            f"{_short.repr(wb[name][j])}")
            return "the running requests differ"
        if i == 8:
            for (n, out_a, st_a), (_, out_b, st_b) in zip(a, b):
                if (out_a, st_a) != (out_b, st_b):
                    return f"{n} has generated {list(out_a)} and is {st_a}; the reference's {list(out_b)}, {st_b}"
        return f"{_OBS_FIELDS[i]}: yours {_short.repr(a)}; the reference's {_short.repr(b)}"
    return None


def _sched_step(side: _SchedSide):
    """One step; an error of the learner's code is returned as an observation."""
    side.add_due()
    if side.done():
        return ("done",)
    try:
        record = side.engine.step()
    except NotImplementedError:
        raise ch04._NotFilled("") from None
    except ch04._ReferenceCalled:
        raise
    except Exception as e:  # noqa: BLE001
        return ("raised", type(e).__name__, str(e))
    return side.observe(record)


def _sched_lockstep(case: SchedCase, cls: type, who: str, variants: Mapping[str, type]) -> None:
    mine, want = _SchedSide(case, cls), _SchedSide(case, RadixScheduler)
    seen, history = [], []
    for step in range(2000):
        pre = want.brief()
        w = _sched_step(want)
        if w == ("done",):
            return
        try:
            m = _sched_step(mine)
        except ch04._NotFilled:
            raise AssertionError(common.not_filled(who)) from None
        seen.append(m)
        if m != w:
            if m[0] == "raised":
                body = f"your step raised {m[1]}: {m[2]}"
            elif m[0] == "done":
                body = "your scheduler had nothing left to do"
            else:
                body = _obs_diff(m, w) or "the states differ"
            pitfall = _sched_attribute(case, seen, variants)
            lines = [PITFALLS[pitfall]] if pitfall else []
            lines += [f"{who} differs from the reference at step {step} of the scenario '{case.label}':",
                      f"  {case.describe()}"]
            if history:
                lines.append("  steps before (the same on both sides):")
                lines += [f"    {h}" for h in history[-6:]]
            lines.append(f"  before step {step}: waiting [{', '.join(pre[1])}], running [{', '.join(pre[2])}], "
                         f"{len(pre[3])} free slots, tree sizes (evictable, protected, total) {pre[4]}")
            lines.append(f"First difference: {body}")
            raise AssertionError("\n".join(lines))
        kind, sched, cached, preempted, finished = w[0]
        history.append(f"step {step}: {'prefill' if kind == 'P' else 'decode'} "
                       f"{' '.join(f'{n}:{k}' for n, k in sched)} (cached {' '.join(f'{n}:{k}' for n, k in cached)})"
                       f"{', preempted ' + ' '.join(preempted) if preempted else ''}"
                       f"{', finished ' + ' '.join(finished) if finished else ''}; {len(w[3])} free slots, "
                       f"sizes {w[4]}")
    raise AssertionError(f"the scenario '{case.label}' ran 2000 steps without finishing")


def _sched_attribute(case: SchedCase, seen: list, variants: Mapping[str, type]) -> str | None:
    for key, cls in variants.items():
        side = _SchedSide(case, cls)
        try:
            with time_limit(2, "a pitfall replay"):
                if all(_sched_step(side) == obs for obs in seen):
                    return key
        except (AssertionError, ch04._NotFilled):
            continue
    return None


def _finish_variant(unlock=True, dups=True, tree_slots=False, tail=True, prompt_only=False):
    def cache_finished_req(self, req):
        tree, pool = self.tree_cache, self.token_to_kv_pool_allocator
        kv = req.kv_indices
        n = min(len(kv), req.num_prompt_tokens) if prompt_only else len(kv)
        tokens = req.token_ids[:n]
        aligned = n - n % self.page_size
        new_prefix_len = tree.insert(tokens[:aligned], kv[:aligned])
        if tree_slots:
            pool.free(kv[:new_prefix_len])
        elif dups:
            pool.free(kv[len(req.prefix_indices):new_prefix_len])
        if tail:
            pool.free(kv[aligned:])
        if unlock:
            tree.dec_lock_ref(req.last_node)
        req.kv_indices, req.prefix_indices, req.last_node = [], [], None
        req.num_cached_tokens = req.num_scheduled_tokens = 0
    return cache_finished_req


def _sched_variants() -> dict[str, type]:
    table = {"finish_no_unlock": _finish_variant(unlock=False), "finish_no_dup_free": _finish_variant(dups=False),
             "finish_frees_tree_slots": _finish_variant(tree_slots=True),
             "finish_no_tail_free": _finish_variant(tail=False),
             "finish_prompt_only": _finish_variant(prompt_only=True)}
    return {p: type(f"Pitfall_{p}", (RadixScheduler,), {"cache_finished_req": fn}) for p, fn in table.items()}


_FORBIDDEN_SCHED = {RadixScheduler.cache_finished_req.__code__: "RadixScheduler.cache_finished_req"}
ch04.FORBIDDEN["cache_finished_req"] = _FORBIDDEN_SCHED


def _run_sched_cases(cls: type, who: str, cases, variants: Mapping[str, type]) -> None:
    for i, case in enumerate(cases):
        guard = no_reference_calls("servelab.radix_scheduler.RadixScheduler") if common.watched(i) \
            else contextlib.nullcontext()
        with guard, time_limit(10, f"{who} on the scenario '{case.label}'"):
            _sched_lockstep(case, cls, who, variants)


def _sched_cases(n_random: int) -> list[SchedCase]:
    return _sched_pitfall_cases() + list(_random_sched_cases(_RANDOM_SEED, n_random))


def check_cache_finished_req(fn) -> None:
    """Hidden test of cache_finished_req: the reference RadixScheduler with the learner's hook, step by step
    against the reference on the pitfall scenarios and seeded random workloads."""
    reject_reference(fn, "cache_finished_req", "servelab.radix_scheduler.RadixScheduler")
    cls = type("YourScheduler", (RadixScheduler,), {"cache_finished_req": wrap(fn, "cache_finished_req")})
    _run_sched_cases(cls, "RadixScheduler with your cache_finished_req", _sched_cases(40), _sched_variants())


def check_scheduler(scheduler_cls) -> None:
    """Hidden test of the assembled scheduler: the learner's RadixScheduler subclass, whose cache_class carries
    their inc_lock_ref, dec_lock_ref and evict and whose cache_finished_req is theirs. Their cache on every
    operation sequence of the cache checks, then the whole scheduler step by step against the reference. When
    something differs, each method's own check runs to name the method (and the pitfall)."""
    if not (isinstance(scheduler_cls, type) and issubclass(scheduler_cls, RadixScheduler)):
        raise AssertionError(f"RadixScheduler is {_short.repr(scheduler_cls)}; run the cell that builds it")
    cache_cls = scheduler_cls.cache_class
    if not (isinstance(cache_cls, type) and issubclass(cache_cls, RadixCache)):
        raise AssertionError(f"RadixScheduler.cache_class is {_short.repr(cache_cls)}; it must be your RadixCache")
    fns = {key: cache_cls.__dict__.get(key, getattr(cache_cls, key)) for key in ("inc_lock_ref", "dec_lock_ref",
                                                                                  "evict")}
    hook = scheduler_cls.__dict__.get("cache_finished_req", scheduler_cls.cache_finished_req)
    for key, fn in fns.items():
        reject_reference(fn, key)
    reject_reference(hook, "cache_finished_req", "servelab.radix_scheduler.RadixScheduler")
    your_cache = ch04.guarded(type("YourRadixCache", (cache_cls,), {k: wrap(f, k) for k, f in fns.items()}))
    your = type("YourScheduler", (scheduler_cls,), {"cache_class": your_cache,
                                                     "cache_finished_req": wrap(hook, "cache_finished_req")})
    try:
        run_cases(your_cache, "Your RadixCache (your locks and eviction)", _cache_cases(12))
        _run_sched_cases(your, "Your RadixScheduler (your locks, eviction and cache_finished_req)",
                         _sched_cases(40), {})
    except AssertionError as combined:
        check_inc_lock_ref(fns["inc_lock_ref"])
        check_dec_lock_ref(fns["dec_lock_ref"])
        check_evict(fns["evict"])
        check_cache_finished_req(hook)
        raise combined from None


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview"

def _drill_starvation() -> int:
    return lpm_starvation("lpm", n_hot=8)[1]


def locked_room() -> int:
    """A pool of 1000 slots; a running request hit a cached 600-token system prompt (locked now) and holds 30
    slots of its own; the tree also keeps 200 unlocked tokens of finished requests. The most a new request
    that shares nothing can be given: free + evictable."""
    pool = TokenToKVPoolAllocator(1000)
    tree = RadixCache(token_to_kv_pool_allocator=pool)
    system, other = list(range(1, 601)), list(range(5000, 5200))
    tree.insert(system, pool.alloc(600))
    tree.insert(other, pool.alloc(200))
    _, node = tree.match_prefix(system + [9])
    tree.inc_lock_ref(node)
    pool.alloc(30)                                   # the running request's own slots
    return pool.available_size() + tree.evictable_size()


def _drill_evict() -> int:
    cache = RadixCache()
    prompt = list(range(1, 101))
    a, b = prompt + list(range(200, 220)), prompt + list(range(300, 330))
    cache.insert(a, range(len(a)))
    cache.insert(b, range(1000, 1000 + len(b)))
    cache.match_prefix(a)
    return len(cache.evict(25))


DRILLS = {
    "drill_1": ("step at which L is admitted under longest-prefix-first in the starvation workload",
                _drill_starvation,
                {3: "That is first come, first served: under LPM every waiting H matches 32 tokens and L none, so "
                    "each H is sorted ahead of L."}),
    "drill_2": ("number of slots a new request that shares nothing can be given (free + evictable)", locked_room,
                {170: "Unlocked tokens in the tree are room too: admission evicts them.",
                 400: "The running request's 30 slots of its own are not room either.",
                 1000: "The locked 600-token path and the running request's own 30 slots cannot be given away."}),
    "drill_3": ("number of tokens evict(25) frees", _drill_evict,
                {25: "evict frees whole nodes: it never cuts a leaf.",
                 20: "The match refreshed A's path: the least recently used leaf is B's 30-token suffix.",
                 150: "evict stops as soon as it has freed at least 25 tokens."}),
}


def check_drills(answers) -> None:
    """Hidden test of the drills (a mapping with drill_1..drill_3, or the three values in order)."""
    common.check_whole_number_drills(answers, DRILLS, _short)


# --------------------------------------------------------------------------------------------------------

_CHECKS = {
    "inc_lock_ref": check_inc_lock_ref,
    "dec_lock_ref": check_dec_lock_ref,
    "evict": check_evict,
    "cache_finished_req": check_cache_finished_req,
    "scheduler": check_scheduler,
}


def diagnose(exercise: str, obj) -> str:
    """What the hidden check of ``exercise`` says about ``obj``, without raising (a visible assert's message)."""
    return common.diagnose(_CHECKS, exercise, obj, "the reference on every sequence of the checks")

