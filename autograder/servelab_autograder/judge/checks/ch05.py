"""Chapter 05's grading table: each test cell, the exercise it grades, its cases; the drills' answers.

A case of ``inc_lock_ref``, ``dec_lock_ref`` or ``evict`` is the tree's state at the moment the reference tree calls
it in a run of a workload of operations (chapter 04's recording): the notebook's walk-through and visible asserts,
one per pitfall (fixed cases, also the visible checks'), then seeded random workloads (page sizes 1, 2 and 4; locks
held across splits; evictions of every size, resets and bad input). A case of ``cache_finished_req`` is the
scheduler's state when the reference scheduler finishes or preempts a request, in workloads of requests: the
notebook's, one per pitfall, then seeded random ones (shared prefixes, page sizes 1, 2 and 4, pools small enough to
evict and preempt, FCFS and longest prefix first). The whole scheduler runs every workload of both kinds.

Blocked while grading: ``RadixCache.inc_lock_ref``, ``dec_lock_ref``, ``evict`` and
``RadixScheduler.cache_finished_req``; cache_finished_req's call of dec_lock_ref is answered by the replay of the
reference run. Reachable, and why: chapter 04's methods (``match_prefix``, ``insert`` and their helpers, which this
chapter builds on: the hook inserts, the workloads match and insert), the tree's small helpers
(``_update_leaf_status``, ``_delete_leaf``, ``get_priority``, the sizes) that the docstrings tell the solution to
call, and the rest of the RadixScheduler (admission, decode, ``preempt``, ``postprocess``,
``cache_unfinished_req``), which the whole scheduler needs. None of them locks a path for a caller or evicts:
``cache_unfinished_req`` moves a lock after re-matching the prompt, which stamps the tree, so a hook built on it
neither unlocks in the reference's state nor leaves the reference's tree (tests/test_ch05_grading.py proves it).
"""

from __future__ import annotations

import random

from servelab.engine.radix import lpm_starvation
from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.radix_scheduler import MIN_NEW_TOKEN_RATIO_FACTOR, TokenToKVPoolAllocator, decode_reservation
from servelab_autograder.exercises import ch04, ch05, common
from servelab_autograder.judge.checks.ch04 import random_workloads
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch05.SPECS


def _random(exercise: str, n: int, n_ops: int = 150, most: int = 400):
    def make(rng: random.Random) -> list[tuple]:
        out = ch05.cases_of(exercise, random_workloads(rng, n, n_ops))
        return out if len(out) <= most else rng.sample(out, most)
    return make


def _deep(exercise: str, make, depth: int = 1100):
    """``make``'s cases, then the ones of a path ``depth`` nodes deep, locked along all of it, split under the lock
    and evicted whole: walks and evictions longer than a loop capped at 32 or 1024."""
    def steps(key):
        return [("lock", key), ("lock", key[:-1]), ("unlock", 0), ("unlock", 0), ("evict", ch04.BIG)]
    return lambda rng: make(rng) + ch05.cases_of(exercise, [ch04.deep_workload(depth, steps)])


def _finish_random(rng: random.Random) -> list[tuple]:
    out = ch05.cases_of("cache_finished_req", ch05.random_request_workloads(rng, 40))
    return out if len(out) <= 400 else rng.sample(out, 400)


def _whole_random(rng: random.Random) -> list[tuple]:
    return ch05.cases_of("RadixScheduler", [*random_workloads(rng, 6, 150), *ch05.random_request_workloads(rng, 24)])


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview", computed by the reference


V = {v.name: v for v in ch05.DRILLS}    # the drills' numbers, drawn per learner


def _drill_starvation(n) -> int:
    return lpm_starvation("lpm", n_hot=n.hot)[1]


def _drill_locked_room(n) -> int:
    """A pool; a running request hit a cached system prompt (locked now) and holds slots of its own; the tree also
    keeps unlocked tokens of finished requests. The most a new request that shares nothing can be given: free +
    evictable."""
    pool = TokenToKVPoolAllocator(n.pool)
    tree = RadixCache(token_to_kv_pool_allocator=pool)
    system, other = list(range(1, n.system + 1)), list(range(5000, 5000 + n.unlocked))
    tree.insert(system, pool.alloc(n.system))
    tree.insert(other, pool.alloc(n.unlocked))
    tree.inc_lock_ref(tree.match_prefix(system + [9])[1])
    pool.alloc(n.own)                                # the running request's own slots
    return pool.available_size() + tree.evictable_size()


def _drill_evict(n) -> int:
    cache = RadixCache()
    prompt = list(range(1, n.prompt + 1))
    a, b = prompt + list(range(20_000, 20_000 + n.a)), prompt + list(range(30_000, 30_000 + n.b))
    cache.insert(a, range(len(a)))
    cache.insert(b, range(100_000, 100_000 + len(b)))
    cache.match_prefix(a)
    return len(cache.evict(n.target))


RESERVE_RATIO = 0.7


def _held(n, ratio: float = RESERVE_RATIO) -> float:
    """SGLang's reservation for the running requests: min(tokens left, 4096) x new_token_ratio each
    (servelab.schedulers.radix_scheduler.decode_reservation)."""
    return decode_reservation([n.left] * n.running, ratio)


def _drill_room_with_reservation(n) -> int:
    return round(n.free + n.evictable - _held(n))


def _drill_reservation_at_the_floor(n) -> int:
    """The same running requests once the ratio has decayed to its floor, 0.14 of its starting 0.7."""
    return round(_held(n, RESERVE_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR))


CHAPTER = Chapter(
    assignment=ch05.ASSIGNMENT,
    prelude="import heapq\nimport servelab.schedulers.radix_cache\nimport servelab.schedulers.radix_scheduler\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_6", "setup_7", "setup_8"),
    setup=("setup_5", "setup_drills"),
    references=(*(f"servelab.schedulers.radix_cache:RadixCache.{m}" for m in ("inc_lock_ref", "dec_lock_ref", "evict")),
                "servelab.schedulers.radix_scheduler:RadixScheduler.cache_finished_req"),
    exercises=(
        Exercise(S["inc_lock_ref"], "test_inc_lock_ref", fixed=lambda: ch05.visible_cases("inc_lock_ref"),
                 random=_deep("inc_lock_ref", _random("inc_lock_ref", 12))),
        Exercise(S["dec_lock_ref"], "test_dec_lock_ref", fixed=lambda: ch05.visible_cases("dec_lock_ref"),
                 random=_deep("dec_lock_ref", _random("dec_lock_ref", 12))),
        Exercise(S["evict"], "test_evict", fixed=lambda: ch05.visible_cases("evict"),
                 random=_deep("evict", _random("evict", 12))),
        Exercise(S["cache_finished_req"], "test_cache_finished_req",
                 fixed=lambda: ch05.visible_cases("cache_finished_req"), random=_finish_random),
        Exercise(S["RadixScheduler"], "test_scheduler", fixed=lambda: ch05.visible_cases("RadixScheduler"),
                 random=_whole_random),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], answer=_drill_starvation, points=no_point,
              hints=lambda n: ((3, "That is first come, first served: under LPM every waiting H matches 32 tokens and "
                                   "L none, so each H is sorted ahead of L."),)),
        Drill("drill_2", "", variant=V["drill_2"], answer=_drill_locked_room, points=no_point,
              hints=lambda n: ((n.pool - n.system - n.own - n.unlocked, "Unlocked tokens in the tree are room too: "
                                                                        "admission evicts them."),
                               (n.pool - n.system, "The running request's own slots are not room either."),
                               (n.pool, "The locked path and the running request's own slots cannot be given "
                                        "away."))),
        Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: n.prompt + n.a + n.b - _drill_evict(n),
              points=no_point,
              hints=lambda n: ((n.prompt + n.a + n.b - n.target, "evict frees whole nodes: it never cuts a leaf."),
                               (n.prompt + n.b, "The match refreshed A's path: the least recently used leaf is B's "
                                                "suffix."),
                               (0, "evict stops as soon as it has freed enough tokens."))),
        Drill("drill_4", "", variant=V["drill_4"], answer=_drill_room_with_reservation, points=no_point,
              hints=lambda n: ((n.free + n.evictable, "The running requests' future decode tokens are held back too: "
                                                      "tokens left x new_token_ratio each."),
                               (n.free + n.evictable - n.running * n.left,
                                "The reservation is scaled by new_token_ratio: a request is not expected to use all "
                                "of max_new_tokens."),
                               (_drill_room_with_reservation(n) - n.evictable,
                                "Evictable tokens are room too: admission evicts them."))),
        Drill("drill_5", "", variant=V["drill_5"], answer=_drill_reservation_at_the_floor, points=no_point,
              hints=lambda n: ((round(_held(n)), "That is at the starting ratio: decode steps without a retraction "
                                                 "take it down to its floor."),
                               (round(n.running * n.left * MIN_NEW_TOKEN_RATIO_FACTOR),
                                "The floor is 0.14 times the starting ratio, not 0.14."),
                               (0, "The ratio never falls to 0: it stops at its floor."))),
    ), read=lambda value, name: common.whole_number(value, name, ch04._short)),
)
