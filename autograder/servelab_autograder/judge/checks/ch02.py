"""Chapter 02's grading table: each test cell, the exercise it grades, its cases; the drills' answers.

A case of a method is the scheduler's state at the moment nano-vllm's scheduler calls it, in a run of one workload
(``servelab_autograder.exercises.ch02.record``): the chapter's workloads, one per pitfall, the prefix cache's (fixed
cases, also the visible checks'), then seeded random workloads (shared prefixes, arrivals between steps, budgets,
``max_num_seqs`` and block sizes 1-8, caching on and off, some requests stopping at eos).

Blocked while grading: ``Scheduler.schedule``, ``Scheduler.preempt``, ``Scheduler.postprocess`` and
``BlockManager.can_allocate``; schedule's own calls of preempt and can_allocate are answered by the replay of the
reference run. Reachable, and why: ``needs_new_block`` (``BlockManager.can_append`` and ``may_append``, which
schedule calls, decide with it: the rule is the docstring's one line); ``BlockManager.allocate`` (schedule calls
it), which finds the hit blocks again by their chained hashes but neither compares tokens nor counts the free
list, so it does not answer can_allocate's cases (a forced hash collision among them).
"""

from __future__ import annotations

import copy
import math
import random

from servelab.analytic import costmodel, workloads
from servelab.engine.driver import Engine, expected
from servelab.schedulers.scheduler import BlockManager, SamplingParams, Scheduler, Sequence
from servelab_autograder.exercises import ch02, common, variants
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point, unless_right

S = ch02.SPECS


def random_scenarios(rng: random.Random, n: int, cache: bool) -> list[dict]:
    """``n`` workloads the reference can run: shared prefixes, arrivals between steps, random budgets."""
    out: list[dict] = []
    while len(out) < n:
        bs, nb = rng.randint(1, 8), rng.randint(3, 12)
        budget, mns = rng.randint(1, 3 * bs + 4), rng.randint(1, 5)
        prefix = [rng.randint(0, 3) for _ in range(rng.randint(0, 3 * bs))]
        groups: dict[int, list] = {}
        for i in range(rng.randint(1, 6)):
            shared = prefix[:rng.randint(0, len(prefix))] if rng.random() < 0.7 else []
            prompt = shared + [rng.randint(0, 3) for _ in range(rng.randint(1, 2 * bs))]
            max_tokens = rng.randint(1, 2 * bs)
            if -(-(len(prompt) + max_tokens - 1) // bs) > nb:
                continue
            groups.setdefault(rng.choice([0, 0, 1, 2, 3, 5, 8]), []).append(
                (f"r{i}", prompt, max_tokens, rng.random() < 0.75))
        if not groups:
            continue
        eos = -1
        stoppers = [r for g in groups.values() for r in g if not r[3]]
        if stoppers and rng.random() < 0.8:
            name, prompt, max_tokens, _ = rng.choice(stoppers)
            eos = expected(prompt, max_tokens)[rng.randrange(max_tokens)]
        sc = ch02.scenario(f"random workload {len(out)} (caching {'on' if cache else 'off'})", nb, bs, budget,
                           sorted(groups.items()), mns, eos, cache)
        if ch02.record(sc) is not None:
            out.append(sc)
    return out


def _random(exercise: str, n: int, caching=(False, True)):
    def make(rng: random.Random) -> list[tuple]:
        return ch02.cases_of(exercise, [sc for cache in caching for sc in random_scenarios(rng, n, cache)])
    return make


def _fixed(exercise: str):
    return lambda: ch02.cases_of(exercise, ch02.visible_scenarios())


def _collisions() -> list[tuple]:
    """can_allocate where a block's chained hash maps to a block holding other tokens (a forced collision)."""
    out = []
    for where, bm, tokens in ch02.cases_of("can_allocate", ch02.cache_scenarios()):
        bs = bm["block_size"]
        h = BlockManager.compute_hash(tokens[:bs])
        block = dict(map(tuple, bm["hashes"])).get(h)
        if block is None or len(tokens) <= bs:
            continue
        bm = copy.deepcopy(bm)
        bm["blocks"][block][2] = [t + 1000 for t in tokens[:bs]]
        out.append((f"{where}, with a hash collision on block 0", bm, tokens))
    return out


def _lookalike_last_block() -> list[tuple]:
    """can_allocate where block 0 misses in the hash table while the last block of the pool (blocks[-1]) holds
    exactly block 0's tokens: a miss is the id -1, which must never be used as an index."""
    out = []
    for where, bm, _ in ch02.cases_of("can_allocate", ch02.cache_scenarios())[:3]:
        bs = bm["block_size"]
        tokens = [900 + t for t in range(2 * bs + 1)]
        bm = copy.deepcopy(bm)
        bm["blocks"][-1][2] = tokens[:bs]
        out.append((f"{where}, a new prompt whose first block the pool's last block holds unhashed", bm, tokens))
    return out


def many_requests(n: int) -> dict:
    """``n`` two-token requests at once, each decoding one token: a prefill step and a decode step that each pick
    all ``n``, past any loop capped at 32 (or 1024) sequences."""
    return ch02.scenario(f"{n} short requests at once", n + 1, 4, 2 * n,
                         [(0, [(f"r{i}", [i % 4, 1], 2, True) for i in range(n)])], max_num_seqs=n)


def long_shared_prompt(n: int) -> dict:
    """A's ``n``-token prompt at block size 1, then B with the same prompt and one more token after A finished:
    B's can_allocate walks ``n`` hit blocks, past any loop capped at 32 (or 1024) blocks."""
    prompt = [t % 7 for t in range(n)]
    return ch02.scenario(f"a shared {n}-token prompt at block size 1", 2 * n + 8, 1, n + 4,
                         [(0, [("A", prompt, 1, True)]), (3, [("B", [*prompt, 9], 1, True)])], max_num_seqs=2,
                         cache=True)


def _many(exercise: str) -> list[tuple]:
    if exercise == "can_allocate":
        return ch02.cases_of(exercise, [long_shared_prompt(40), long_shared_prompt(1100)])
    if exercise == "Scheduler":   # a whole run replays every step: the 1,100-request one is schedule's alone
        return ch02.cases_of(exercise, [many_requests(40)])
    return ch02.cases_of(exercise, [many_requests(40), many_requests(1100)])


def _rule_random(rng: random.Random) -> list[tuple[int, int]]:
    return [(rng.randint(1, 10**6), rng.choice([1, 2, 3, 4, 16, 256, rng.randint(1, 4096)])) for _ in range(300)]


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview", computed by the reference


def _seq(name, tokens, max_tokens):
    return Sequence(tokens, SamplingParams(max_tokens=max_tokens, ignore_eos=True), name=name)


def _tight_memory(bs: int) -> list[Sequence]:
    """The notebook's tight_memory(bs): prompts of 3bs, 1, bs + 1, 2bs - 1 and bs tokens, each generating bs + 2."""
    prompts = [list(range(i * 10000, i * 10000 + n)) for i, n in enumerate([3 * bs, 1, bs + 1, 2 * bs - 1, bs])]
    return [_seq(str(i), p, bs + 2) for i, p in enumerate(prompts)]


def _drill_tight_prefilled(n) -> int:
    """Tokens prefilled over the tight-memory run at blocks of ``n.bs``: 5 blocks, a budget of 6, caching off."""
    sch = Scheduler(num_blocks=5, block_size=n.bs, max_num_batched_tokens=6, enable_prefix_caching=False)
    trace = Engine(sch).run(_tight_memory(n.bs))
    if sum(len(r.preempted) for r in trace) != 3:
        raise RuntimeError(f"the drill's run at blocks of {n.bs} must preempt three times, as at blocks of 4")
    return sum(r.num_batched_tokens for r in trace if r.is_prefill)


def _drill_cached_system_prompt(n) -> int:
    system = list(range(n.system))
    sch = Scheduler(num_blocks=400, block_size=16, max_num_batched_tokens=4096)
    Engine(sch).run([_seq("first", system + [7] * n.own_before, 1)])
    return sch.block_manager.can_allocate(Sequence(system + [9] * n.own_now, name="new", block_size=16)) * 16


def _drill_same_step(n) -> int:
    prompt = list(range(n.prompt))
    sch = Scheduler(num_blocks=40, block_size=16, max_num_batched_tokens=4096)
    trace = Engine(sch).run([_seq("R1", prompt, 2), _seq("R2", prompt, 2)], arrivals={1: [_seq("R3", prompt, 2)]})
    return sum(r.num_batched_tokens for r in trace if r.is_prefill)


def _drill_second_prefill(n) -> int:
    """Tokens of B's second prefill: A (``n.a`` tokens) decodes, B (``n.b``-token prompt) arrives a step later, 6
    blocks of 8; when A's ninth token needs a block (step 10 - a: A's prefill, B's, then one token a step), B, the
    tail of running, is preempted, once (no block is free before that step: B does not preempt itself)."""
    sch = Scheduler(num_blocks=6, block_size=8, max_num_batched_tokens=64, enable_prefix_caching=False)
    trace = Engine(sch).run([_seq("A", list(range(n.a)), 16)],
                            arrivals={1: [_seq("B", list(range(100, 100 + n.b)), 10)]})
    preempted = [(r.step, name) for r in trace for name in r.preempted]
    if preempted != [(10 - n.a, "B")] or trace[9 - n.a].free_blocks != 0 or "A" not in dict(trace[10 - n.a].scheduled):
        raise RuntimeError(f"the drill's run on {dict(n)} must preempt B once, when A's 9th token needs a block; "
                           f"it preempted {preempted}")
    return next(k for r in trace[10 - n.a:] if r.is_prefill for name, k in r.scheduled if name == "B")


def _paged_workload() -> list[int]:
    """The final lengths of the notebook's "Why paged KV at all" requests (its setup cell draws the same)."""
    prompts = workloads.output_lengths(2000, "lognormal", seed=21, mu=math.log(500), sigma=1.0, max_len=4096)
    outputs = workloads.output_lengths(2000, "geometric", seed=22, mean=200, max_len=4096)
    return [p + o for p, o in zip(prompts, outputs)]


def _drill_paged_fit(block_size: int) -> int:
    """How many of those requests, in order, fit at once in Llama-3-8B's KV budget on an H100, in blocks."""
    free = costmodel.kv_capacity_tokens(costmodel.LLAMA3_8B, costmodel.H100_SXM) // block_size
    for n, length in enumerate(_paged_workload()):
        free -= -(-length // block_size)
        if free < 0:
            return n
    return len(_paged_workload())


V = {v.name: v for v in ch02.DRILLS}    # the drills' numbers, drawn per learner

CHAPTER = Chapter(
    assignment=ch02.ASSIGNMENT,
    prelude="import servelab.schedulers.scheduler\n"
            "from servelab.schedulers.scheduler import BlockManager, SamplingParams, Sequence, SequenceStatus\n",
    demos=("setup_2", "setup_3", "setup_5", "setup_6", "setup_7", "setup_9"),
    setup=("setup_4", "setup_8", "setup_drills"),
    references=tuple(f"servelab.schedulers.scheduler:{n}" for n in (
        "Scheduler.schedule", "Scheduler.preempt", "Scheduler.postprocess", "BlockManager.can_allocate")),
    exercises=(
        Exercise(S["needs_new_block"], "test_needs_new_block", fixed=ch02.rule_cases, random=_rule_random),
        Exercise(S["preempt"], "test_preempt", fixed=_fixed("preempt"), random=_random("preempt", 40)),
        Exercise(S["schedule"], "test_schedule", fixed=_fixed("schedule"),
                 random=lambda rng: [*_random("schedule", 40)(rng), *_many("schedule")]),
        Exercise(S["postprocess"], "test_postprocess", fixed=_fixed("postprocess"),
                 random=_random("postprocess", 40)),
        Exercise(S["Scheduler"], "test_lesson_step2",
                 fixed=lambda: ch02.cases_of("Scheduler", ch02.scheduler_scenarios()),
                 random=lambda rng: [*_random("Scheduler", 30, caching=(False,))(rng), *_many("Scheduler")]),
        Exercise(S["can_allocate"], "test_can_allocate", fixed=lambda: [*_fixed("can_allocate")(), *_collisions(),
                                                                        *_lookalike_last_block()],
                 random=lambda rng: [*_random("can_allocate", 60, caching=(True,))(rng), *_many("can_allocate")]),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], answer=_drill_tight_prefilled, points=no_point,
              hints=lambda n: unless_right(_drill_tight_prefilled(n), (
                  (7 * n.bs + 1, "That is the prompt tokens alone: three sequences are preempted and prefilled "
                                 "again, generated tokens included: count those second prefills too."),
                  (_drill_tight_prefilled(variants.Numbers(bs=4)), "That is the run at blocks of 4 tokens; the "
                                                                  "drill scales every length with the block.")))),
        Drill("drill_2", "", variant=V["drill_2"], answer=_drill_cached_system_prompt, points=no_point,
              hints=lambda n: ((n.system, "Hits are whole blocks: the block holding the system prompt's last tokens "
                                          "mixes them with the request's own, so it is not a hit."),)),
        Drill("drill_3", "", variant=V["drill_3"], answer=_drill_same_step, points=no_point,
              hints=lambda n: unless_right(_drill_same_step(n), (
                  (n.prompt + 2 * (n.prompt - (n.prompt - 1) // 16 * 16),
                   "R1 and R2 are admitted in the same step: R1's blocks are hashed only in postprocess, so R2 "
                   "cannot hit them."),
                  (3 * n.prompt, "R3 arrives after R1's and R2's blocks were hashed: its full blocks hit."),
                  (2 * n.prompt, "R3 still computes its last (partial) block: hits are whole blocks and never the "
                                 "last.")))),
        Drill("drill_4", "", variant=V["drill_4"], answer=_drill_second_prefill, points=no_point,
              hints=lambda n: ((n.b, "B had generated tokens before it was preempted: recompute covers them too."),
                               (n.b + 8 - n.a, "B's prefill step sampled a token too: recompute covers it."))),
        Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: _drill_paged_fit(n.block), points=no_point,
              hints=lambda n: ((_drill_paged_fit(16), "That is at blocks of 16 tokens; the drill asks for other "
                                                      "blocks."),
                               (costmodel.kv_capacity_tokens(costmodel.LLAMA3_8B, costmodel.H100_SXM) // 8192,
                                "That is one contiguous max_model_len buffer per request; the drill asks for "
                                "blocks."))),
    ), read=lambda value, name: common.whole_number(value, name, ch02._short)),
)
