"""Chapter 10's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

A case of ``postprocess`` is the asynchronous scheduler's state at the moment the reference calls it in a run of
one workload (``servelab_autograder.exercises.ch10.record``): the chapter's workloads (the worked trace, one per
pitfall: eos stops with and without a block, max_tokens stops, chunks, a preemption with a token in flight, caching on
and off, block size 1), then seeded random workloads (block sizes 1-4, budgets, ``max_num_seqs``, shared
prefixes, caching on and off, eos chosen among the tokens the recording model samples). A case of
``wasted_work`` is one such run's trace; ``overlap_speedup``'s are pairs of times, fixed then random.

Blocked while grading: ``AsyncScheduler.postprocess``, ``wasted_work`` and ``overlap_speedup`` (``walk``,
``run_async`` and the engine's asynchronous mode call postprocess, so they raise too). Reachable, and why:
``AsyncScheduler._hash_done_blocks`` (the prefix cache's hashing of finished blocks: postprocess calls it; the
exercise is the placeholder bookkeeping around it), ``trace_of`` (plain data out of a run), ``schedule`` and the
chapter 02 library the scheduler is built on. The drills are arithmetic on the chapter's rules and
``costmodel``'s roofline, which stays.
"""

from __future__ import annotations

import random

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.analytic.serving import ServingPoint
from servelab_autograder.exercises import ch10, common
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch10.SPECS


def random_scenarios(rng: random.Random, n: int) -> list[dict]:
    """``n`` workloads the reference can run, all requests there at the start."""
    out: list[dict] = []
    while len(out) < n:
        bs = rng.choice([1, 2, 2, 4, 4])
        shared = [rng.randrange(1, 10) for _ in range(rng.choice([0, 2, 5]))]
        reqs = []
        for k in range(rng.randint(1, 5)):
            prompt = (shared if rng.random() < 0.5 else []) + [rng.randrange(1, 10) for _ in range(rng.randint(1, 8))]
            reqs.append((f"r{k}", prompt, rng.randint(1, 6), rng.random() < 0.25))
        need = max(-(-(len(p) + m - 1) // bs) for _, p, m, _ in reqs)
        sc = ch10.scenario(f"random workload {len(out)}", need + rng.choice([0, 1, 3, 20]), bs,
                           rng.choice([3, 6, 16, 64]), reqs, rng.choice([1, 2, 4, 8]), rng.random() < 0.6,
                           rng.choice([2, 4, 6, 8, rng.randrange(ch10.VOCAB)]))
        if ch10.record(sc) is not None:
            out.append(sc)
    return out


def _not_run() -> list[tuple]:
    """postprocess on the worked trace's first step before the model ran it (no tokens yet): ValueError."""
    where, state, step = ch10.cases_of("postprocess", ch10.visible_scenarios()[:1])[0]
    return [(f"{where}, before the model ran it", state, {**step, "tokens": []})]


def _postprocess_random(rng: random.Random) -> list[tuple]:
    return [*ch10.cases_of("postprocess", random_scenarios(rng, 12)), *_not_run()]


def _wasted_fixed() -> list[tuple]:
    hand = [
        # the docstring's: B stops on eos at its prefill; its decode at position 4 opens a block
        ([[["A", 0, 3, 5], ["B", 0, 4, 9]], [["A", 3, 1, 2], ["B", 4, 1, 7]], [["A", 4, 1, 8]]],
         {"A": [5, False], "B": [5, False]}, 9, 4),
        # B ignores eos: sampling it is no stop
        ([[["A", 0, 2, 9], ["B", 0, 2, 9]], [["A", 2, 1, 1], ["B", 2, 1, 1]], [["B", 3, 1, 1]]],
         {"A": [4, False], "B": [3, True]}, 9, 2),
        # nothing stops early: no waste
        ([[["A", 0, 2, 1]], [["A", 2, 1, 2]]], {"A": [2, False]}, 9, 4),
        # a chunk samples nothing; eos at the end of the prompt; block size 1
        ([[["A", 0, 2, None]], [["A", 2, 1, 9]], [["A", 3, 1, 4]]], {"A": [3, False]}, 9, 1),
        # a scheduler that did not know max_tokens: a slot after the max_tokens-th token is wasted too (counted
        # from the first sampled token, not from the chunk that sampled nothing), and it opens block 1
        ([[["A", 0, 3, 5]], [["A", 3, 1, 6]], [["A", 4, 1, 7]]], {"A": [2, True]}, 9, 4),
        ([[["A", 0, 2, None]], [["A", 2, 2, 5]], [["A", 4, 1, 6]], [["A", 5, 1, 7]]], {"A": [2, True]}, 9, 4),
    ]
    return [*ch10.cases_of("wasted_work", ch10.visible_scenarios()), *hand]


def _wasted_random(rng: random.Random) -> list[tuple]:
    return ch10.cases_of("wasted_work", random_scenarios(rng, 30))


SPEEDUP_FIXED = ((1e-3, 4e-3), (4e-3, 4e-3), (8e-3, 2e-3),    # the docstring's
                 (0.0, 3e-3), (5e-3, 0.0),                     # nothing to overlap
                 (0.5e-3, 7.4e-3), (2e-3, 6e-3), (30e-3, 10e-3))


def _speedup_random(rng: random.Random) -> list[tuple]:
    return [(rng.choice([rng.uniform(0, 1e-3), rng.uniform(0, 20e-3)]), rng.uniform(1e-4, 20e-3))
            for _ in range(120)]


# ------------------------------------------------------------------------------------------------
# the drills


def _gpu_s(batch: int, context: int) -> float:
    c = costmodel.step_cost(LLAMA3_8B, H100_SXM, decode_context_lens=[context] * batch)
    return max(c.compute_s, c.memory_s)


def _gain(cpu: float, gpu: float) -> float:
    return (cpu + gpu) / max(cpu, gpu)


V = {v.name: v for v in ch10.DRILLS}    # each drill's numbers, drawn per learner


def _seen(n) -> float:
    """The decode step with the fixed overhead: what StepCost.seconds() gives."""
    return costmodel.step_cost(LLAMA3_8B, H100_SXM, decode_context_lens=[n.context] * n.batch).seconds()


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=lambda n: _gain(n.cpu_ms, n.gpu_ms), rel_tol=0.01,
          points=no_point,
          hints=lambda n: (
              (max(n.cpu_ms, n.gpu_ms) / (n.cpu_ms + n.gpu_ms),
               "That is the overlapped step time over the synchronous one: the gain is the other way up."),
              (1 + max(n.cpu_ms, n.gpu_ms) / min(n.cpu_ms, n.gpu_ms),
               "That is 1 + longer / shorter: the shorter part hides behind the longer, so divide by the longer."))),
    Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: _gain(n.cpu_ms * 1e-3, _gpu_s(n.batch, n.context)),
          rel_tol=0.005, points=lambda n: (ServingPoint.decode(LLAMA3_8B, H100_SXM, n.batch, n.context),),
          hints=lambda n: ((_gain(n.cpu_ms * 1e-3, _seen(n)),
                            "StepCost.seconds() adds the fixed per-step overhead: that is CPU time already, so take "
                            "max(compute_s, memory_s) for the GPU part."),)),
    Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: 100 * 1 / n.eos_at, rel_tol=0.005,
          points=no_point,
          hints=lambda n: ((100 / (n.eos_at - 1), f"Divide the wasted slot by all {n.eos_at} slots, not by the "
                                                  f"{n.eos_at - 1} useful ones."),)),
    Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: 0.0, abs_tol=1e-9, points=no_point,
          hints=lambda n: ((100 / n.max_tokens, "A stop at max_tokens is known before the last token exists: the "
                                                "scheduler does not schedule that request again, so nothing is "
                                                "wasted."),)),
    Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: n.gpu_ms * (n.gain - 1), rel_tol=0.01,
          points=no_point,
          hints=lambda n: ((n.gpu_ms / (n.gain - 1), "That is the other answer, a CPU-bound step; the drill asks for "
                                                    "the smaller."),
                           (n.gain * n.gpu_ms, f"{n.gain} x the GPU time is the synchronous step, not the CPU part."))),
    Drill("drill_6", "", variant=V["drill_6"], answer=lambda n: n.stops // n.block, points=no_point,
          hints=lambda n: ((n.stops, "A wasted decode takes a block only when its position opens one: one offset "
                                     f"in {n.block}."),
                           (0, "The eos token's KV is computed by the wasted decode: it needs a slot, and a new block "
                               "when its position opens one."))),
), read=lambda value, name: common.as_float(value, name, common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch10.ASSIGNMENT,
    prelude="from servelab.analytic import costmodel\nfrom servelab.analytic.costmodel import H100_SXM, LLAMA3_8B\n"
            "from servelab.schedulers.scheduler import SequenceStatus\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6", "setup_7"),
    setup=("setup_drills",),
    references=tuple(f"servelab.schedulers.async_scheduler:{n}" for n in (
        "AsyncScheduler.postprocess", "wasted_work", "overlap_speedup")),
    exercises=(
        Exercise(S["postprocess"], "test_postprocess", fixed=lambda: ch10.cases_of("postprocess",
                                                                                   ch10.visible_scenarios()),
                 random=_postprocess_random),
        Exercise(S["wasted_work"], "test_wasted_work", fixed=_wasted_fixed, random=_wasted_random),
        Exercise(S["overlap_speedup"], "test_overlap_speedup", fixed=lambda: list(SPEEDUP_FIXED),
                 random=_speedup_random),
    ),
    drills=DRILLS,
)
