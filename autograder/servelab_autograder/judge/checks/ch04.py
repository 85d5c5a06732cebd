"""Chapter 04's grading table: each test cell, the exercise it grades, its cases; the drills' answers.

A case of a method is the tree's state at the moment the reference tree calls it, in a run of one workload of
operations (``servelab_autograder.exercises.ch04.record``): the notebook's walk-throughs and visible asserts, one per
pitfall (fixed cases, also the visible checks'), then seeded random workloads (page sizes 1, 2 and 4; two or three
distinct tokens, so keys share prefixes and split edges often; locks held across splits; evictions, resets, empty
keys and bad input). ``child_key`` and ``_match_len`` also get random direct calls (page sizes 1 to 8). The whole
class runs the same workloads operation by operation, and serves the notebook's 100 shared-prompt requests.

Blocked while grading: ``RadixCache.child_key``, ``_match_len``, ``_split_node``, ``match_prefix`` and ``insert``;
the calls match_prefix and insert make of the other three (and _split_node's of child_key) are answered by the
replay of the reference run. Reachable, and why: the rest of ``RadixCache`` (the constructor, ``_tick``,
``_new_node``, ``_page_aligned``, ``_update_leaf_status``, ``_delete_leaf``, the sizes) which the solution's
methods call as the docstrings tell them to, and ``inc_lock_ref``, ``dec_lock_ref`` and ``evict``, which the
whole-class workloads and the RadixScheduler call (chapter 05's exercises, blocked while chapter 05 grades). None
of them looks up, splits or inserts: ``_page_aligned`` only cuts a key to whole pages.
"""

from __future__ import annotations

import random

from servelab.analytic.costmodel import LLAMA2_7B, KiB
from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.scheduler import BlockManager
from servelab.schedulers.scheduler import Sequence as NanoSequence
from servelab_autograder.exercises import ch04, common
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point, unless_right

S = ch04.SPECS
PAGE_SIZES = (1, 2, 4)


def random_workloads(rng: random.Random, n: int, n_ops: int) -> list[dict]:
    return [ch04.random_workload(rng, n_ops, PAGE_SIZES[i % 3],
                                 f"random workload {i} ({n_ops} operations, page_size {PAGE_SIZES[i % 3]})")
            for i in range(n)]


def _random(exercise: str, n: int, n_ops: int = 150, most: int | None = None):
    def make(rng: random.Random) -> list[tuple]:
        out = ch04.cases_of(exercise, random_workloads(rng, n, n_ops))
        return out if most is None or len(out) <= most else rng.sample(out, most)
    return make


def _deep(exercise: str, make, depth: int = 1100):
    """``make``'s cases, then the ones of a path ``depth`` nodes deep: longer than a walk capped at 32 or 1024."""
    return lambda rng: make(rng) + ch04.cases_of(exercise, [ch04.deep_workload(depth)])


def _fixed(exercise: str):
    return lambda: ch04.cases_of(exercise, ch04.chapter_workloads())


def _child_key_random(rng: random.Random) -> list[tuple]:
    out = []
    for _ in range(300):
        ps = rng.choice([1, 2, 3, 4, 8])
        n = rng.randrange(1, 5) * ps
        out.append((ps, [rng.randrange(4) for _ in range(n)], rng.randrange(0, n // ps) * ps))
    return out + _random("child_key", 6, most=300)(rng)


def _match_len_random(rng: random.Random) -> list[tuple]:
    out = []
    for _ in range(400):
        ps = rng.choice([1, 2, 3, 4])
        edge = [rng.randrange(2) for _ in range(rng.randrange(1, 5) * ps)]
        key = [rng.randrange(2) for _ in range(rng.randrange(1, 5) * ps)]
        offset = rng.randrange(0, len(key) // ps) * ps
        if rng.random() < 0.5:   # the two agree on a stretch, so long matches are common
            cut = rng.randrange(min(len(edge), len(key) - offset) + 1)
            key = key[:offset] + edge[:cut] + key[offset + cut:]
        out.append((ps, edge, key, offset))
    return out + _random("_match_len", 6, most=300)(rng)


def _whole_random(rng: random.Random) -> list[tuple]:
    return ch04.cases_of("RadixCache", random_workloads(rng, 9, 150))


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview", computed by the reference


V = {v.name: v for v in ch04.DRILLS}    # the drills' numbers, drawn per learner


def _drill_skipped(n) -> int:
    cache = RadixCache()
    prompt = list(range(1000, 1000 + n.prompt))           # the system prompt
    skipped, next_kv = 0, 0
    for i in range(n.requests):
        key = prompt + [50_000 + i, 7, 7]                 # each request's own question
        skipped += len(cache.match_prefix(key[:-1])[0])
        cache.insert(key, range(next_kv, next_kv + len(key)))
        next_kv += len(key)
    return skipped


def _mib(tokens: int) -> int:
    return int(tokens * LLAMA2_7B.kv_bytes_per_token // (KiB * KiB))


def _requests(n) -> tuple[list[int], list[int]]:
    """Drill 3's two requests: the cached one, and the new one with the same system prompt."""
    prompt = list(range(1000, 1000 + n.system))
    return prompt + [7] * n.own_before, prompt + [9] * n.own_now


def _block_hits(n) -> int:
    first, second = _requests(n)
    bm = BlockManager(num_blocks=64, block_size=256)
    seq = NanoSequence(first, block_size=256)
    bm.allocate(seq, bm.can_allocate(seq))
    seq.num_scheduled_tokens = len(first)
    bm.hash_blocks(seq)
    bm.deallocate(seq)
    return bm.can_allocate(NanoSequence(second, block_size=256)) * 256


def _reuse(n, page_size: int = 1) -> int:
    first, second = _requests(n)
    cache = RadixCache(page_size=page_size)
    cache.insert(first, range(len(first)))
    return len(cache.match_prefix(second[:-1])[0])


DIFF = "The drill asks for the difference: the block cache reuses whole blocks only."

CHAPTER = Chapter(
    assignment=ch04.ASSIGNMENT,
    prelude="import servelab.schedulers.radix_cache\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_7"),
    setup=("setup_6", "setup_drills"),
    # the five exercises, the walks that do their work for keys given as array('q'), and the comparisons
    references=(*(f"servelab.schedulers.radix_cache:RadixCache.{m}" for m in ch04.EXERCISES),
                *(f"servelab.schedulers.radix_packed:PackedKeys.{m}"
                  for m in ("_match_bulk", "_insert_bulk", "_bulk_match_len", "_split_packed")),
                "servelab.schedulers.radix_nodes:_common_len", "servelab.schedulers.radix_nodes:_cut_edge"),
    exercises=(
        Exercise(S["child_key"], "test_child_key", fixed=ch04.child_key_cases, random=_child_key_random),
        Exercise(S["_match_len"], "test_match_len", fixed=ch04.match_len_cases, random=_match_len_random),
        Exercise(S["_split_node"], "test_split_node", fixed=_fixed("_split_node"),
                 random=_random("_split_node", 12, most=400)),
        Exercise(S["match_prefix"], "test_match_prefix", fixed=_fixed("match_prefix"),
                 random=_deep("match_prefix", _random("match_prefix", 9, most=400))),
        Exercise(S["insert"], "test_insert", fixed=_fixed("insert"),
                 random=_deep("insert", _random("insert", 9, most=400))),
        Exercise(S["RadixCache"], "test_radix_cache", fixed=lambda: ch04.visible_cases("RadixCache"),
                 random=_whole_random),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], answer=_drill_skipped, points=no_point,
              hints=lambda n: ((n.requests * n.prompt, f"The first request computes the system prompt: only the other "
                                                       f"{n.requests - 1} skip it."),)),
        Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: _mib(n.prompt), points=no_point,
              hints=lambda n: ((n.prompt * 512, "That is KiB: divide by 1024 once more."),
                               (n.prompt, "512 KiB per token is half a MiB."))),
        Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: _reuse(n) - _block_hits(n), points=no_point,
              hints=lambda n: unless_right(_reuse(n) - _block_hits(n), (
                  (_reuse(n), DIFF), (_block_hits(n), DIFF),
                  (_block_hits(n) + 256 - n.system, "Blocks of 256: the block cache reuses whole blocks only, "
                                                    "rounded down, not up.")))),
        Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: _mib(n.requests * n.prompt), points=no_point,
              hints=lambda n: ((_mib(n.prompt), "That is the one copy the tree stores. Storing it once saves memory; "
                                                "each request's attention still reads the prompt's KV itself, every "
                                                "decode step."),
                               (n.requests * n.prompt * 512, "That is KiB: divide by 1024 once more."))),
        Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: _reuse(n, 16), points=no_point,
              hints=lambda n: unless_right(_reuse(n, 16), (
                  (n.system, "With pages the match is rounded down to whole 16-token pages."),
                  (-(-n.system // 16) * 16, "The match is rounded down to whole pages, not up: the equal tokens end "
                                             "inside a page."),
                  (_block_hits(n), "That is 256-token blocks: here a page is 16 tokens.")))),
    ), read=lambda value, name: common.whole_number(value, name, ch04._short)),
)
