"""Chapter 03's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch03.case`` (a model or GPU as its fields); ``schedule`` is graded one step at a
time, state in and state out: the states are the simulator's before each step of the reference's run of a
workload (the notebook's, one per pitfall, seeded random ones), and each case is one call of the learner's
``schedule`` on one of them.

What the sandbox's library lacks while this chapter grades (``references``), and what stays, by exercise:

- kv_bytes_per_token: nothing is blocked. ``ModelSpec.kv_bytes_per_token`` is a cached property the library
  prices every step with (and not a function the sandbox could stub). The driver hands the learner
  ``ch03.Shapes``, the model's fields without it: reading ``model.kv_bytes_per_token`` off the argument raises.
- step_time: nothing is blocked. ``costmodel.step_time`` (and under it ``step_cost``, ``cost_from_totals``,
  ``StepCost.seconds``) stays: the max_chunk solution bisects on it, the drills price steps with it. The call
  alone does not pass: the exercise takes (tokens, prefix) pairs where the library takes two lists (passed
  through, the pairs are a 2-D ``prefill_tokens`` and raise), and the cases hold several chunks on different
  prefixes, so dropping the prefixes or giving every chunk one prefix fails. A wrapper that splits the pairs
  faithfully would pass: the price of the library's step time being there for max_chunk and the drills.
- schedule: ``MixedBudget.schedule`` and ``MixedBudget._shortest_first`` are blocked (the driver subclasses
  MixedBudget only for its two limits). ``ServingState``'s helpers (``can_admit``, ``admit``,
  ``preempt_tail``, ``reserve_decode_slots``) stay: the exercise is written with them. ``PrefillFirst.schedule``
  (chapter 2's policy) stays, and fails the notebook's A/B/C at step 0.
- v1_schedule: ``vllm_scheduler.Scheduler.schedule`` is blocked; it is graded by running whole workloads (the
  notebook's cases, then seeded random ones) through the learner's method and comparing every step. What the
  method is written with stays: the KV-cache manager (``get_computed_blocks``, ``allocate_slots``: the prefix-cache
  lookup with its full-hit cap, the whole-prompt gate and caching at allocation live there, given),
  ``_preempt_request``, the waiting queue and ``Scheduler.output``. The V1 policy of the simulator calls the
  blocked method, so the cells that run it are demos.
- max_chunk: ``costmodel.max_prefill_chunk`` is blocked. ``costmodel._largest_fitting`` stays:
  ``max_decode_batch``, which the drills may use, bisects with it. Alone it answers nothing: the step-time
  predicate with the decodes and the prefix is the exercise, and where its pitfalls are.
- max_backlog: ``costmodel.max_backlog_tokens`` is blocked; nothing else in the library computes the limit
  (``BacklogAdmission`` is handed it). The drills' solution works drill 5 by hand for that reason.
- mlfq_level: ``ordering.mlfq_level``, ``mlfq_entry_level`` (its first half) and ``mlfq_levels`` (the same rule on
  arrays, which ``Ordered("mlfq")`` sorts with) are blocked; ``mlfq_quantum`` stays (one shift).

The walkthrough's cells that run the simulator (every one of them schedules with ``MixedBudget``, or shows the
learner's policy beside it) are demos: not run while grading. setup_1 (imports), setup_3 and setup_4 (the
shapes and step costs) run as they are.
"""

from __future__ import annotations

import functools
import math
import random

from servelab.analytic import costmodel, ordering
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B, ModelSpec
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch03, ch03_v1, common, spec
from servelab_autograder.exercises.ch03 import Scenario
from servelab_autograder.exercises.spec import DEFAULT
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point, unless_right

S = ch03.SPECS
OH = ch03.OVERHEAD_S
case = ch03.case
PUBLISHED = (LLAMA2_7B, LLAMA3_8B, LLAMA31_8B)
PAIRS = [(LLAMA2_7B, H100_SXM), (LLAMA3_8B, H100_SXM), (LLAMA3_8B, H200), (LLAMA31_8B, H100_SXM)]


def _fp8(model) -> dict:
    return {**spec.as_fields(model, ModelSpec), "name": f"{model.name}, fp8 KV", "bytes_per_kv_element": 1}


# ------------------------------------------------------------------------------------------------
# exercise 1: KV bytes per token


def _kv_fixed():
    out = [case("kv_bytes_per_token", m) for m in PUBLISHED]          # the visible asserts' models first
    out += [case("kv_bytes_per_token", _fp8(m)) for m in PUBLISHED]    # bytes_per_kv_element != bytes_per_param
    shapes = dict(num_layers=1, hidden_size=2048, num_heads=16, num_kv_heads=1, head_dim=128,
                  intermediate_size=8192, vocab_size=32000, bytes_per_param=2, bytes_per_kv_element=2)
    out.append(case("kv_bytes_per_token", {**spec.as_fields(LLAMA2_7B, ModelSpec), **shapes, "name": "one layer, MQA"}))
    out.append(case("kv_bytes_per_token", {**spec.as_fields(LLAMA2_7B, ModelSpec), **shapes, "name": "4-bit KV, 1-byte "
                    "weights", "num_layers": 40, "hidden_size": 5120, "num_kv_heads": 4, "bytes_per_param": 1,
                    "bytes_per_kv_element": 0.5}))   # hidden_size != num_heads x head_dim
    return out


def _kv_random(rng: random.Random):
    out = []
    for k in range(120):      # GQA, MQA, hidden_size != num_heads x head_dim, weights and cache in other dtypes
        kv, group = rng.choice([1, 1, 2, 4, 8, 8, 16]), rng.choice([1, 1, 2, 4, 8])
        head_dim = rng.choice([64, 80, 96, 128, 128, 256])
        hidden = kv * group * head_dim if rng.random() < 0.7 else rng.choice([2048, 3072, 5120, 8192])
        bpp = rng.choice([2, 2, 1, 4])
        bkv = rng.choice([2, 2, 1, 4, 0.5]) if k % 3 else (1 if bpp != 1 else 2)
        out.append(({"name": f"random model {k}", "num_layers": rng.randint(1, 96), "hidden_size": hidden,
                     "num_heads": kv * group, "num_kv_heads": kv, "head_dim": head_dim, "intermediate_size": 4 * hidden,
                     "vocab_size": 32000, "bytes_per_param": bpp, "bytes_per_kv_element": bkv,
                     "tie_word_embeddings": False},))
    return out


# ------------------------------------------------------------------------------------------------
# exercise 2: the step time


def _step_fixed():
    return [
        case("step_time", LLAMA2_7B, H100_SXM, (), [0]),                      # the visible asserts' steps first
        case("step_time", LLAMA2_7B, H100_SXM, (), [0] * 64),                 # the weights once, not 64 times
        case("step_time", LLAMA2_7B, H100_SXM, [(4096, 0)], ()),              # compute-bound: LM head, attention
        case("step_time", LLAMA3_8B, H100_SXM, [(512, 7000)], [1024] * 32),   # a mixed step
        case("step_time", LLAMA2_7B, H100_SXM, (), [1000]),                   # a decode reads its context
        case("step_time", LLAMA3_8B, H200, [(3, 0), (4, 2)], [5, 7], 0.0),    # tiny, no overhead
        case("step_time", LLAMA31_8B, H100_SXM, [(16384, 114688)], [2048] * 48),
        # several chunks on different prefixes: each pair is its own (tokens, prefix)
        case("step_time", LLAMA3_8B, H100_SXM, [(2048, 0), (1024, 30_000), (512, 60_000)], [4096] * 16),
        case("step_time", LLAMA31_8B, H100_SXM, [(1, 100_000), (8000, 0)], [], 2e-3),
        case("step_time", LLAMA2_7B, H100_SXM, [(8192, 8192)], (), 0.0),
    ]


def _step_random(rng: random.Random):
    out = []
    for _ in range(150):
        model, gpu = rng.choice(PAIRS)
        chunks = [(rng.choice([1, rng.randint(1, 64), rng.randint(1, 8192)]), rng.choice([0, 0, rng.randint(1, 40000)]))
                  for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))]
        ctx = rng.choice([128, 1024, 4096, 16000])
        decodes = [rng.randint(0, ctx) for _ in range(rng.choice([0, 1, 4, 32, 100, 256]))]
        if not chunks and not decodes:
            decodes = [rng.randint(0, 4000)]
        out.append(case("step_time", model, gpu, chunks, decodes, rng.choice([0.0, OH, 2e-3, rng.uniform(0, 3e-3)])))
    return out


# ------------------------------------------------------------------------------------------------
# exercise 3: the budgeted mixed schedule, one step at a time

SCENARIOS = (
    *ch03.VISIBLE_SCENARIOS,   # A/B/C, A/B/C with a preemption, three decoders and a long prompt
    # two long prompts: the second waits for the leftover of the first's last chunk
    Scenario("two prompts longer than the budget", (0.0, 0.0), (30, 25), (3, 3), 8, 8, 1000),
    # the head of waiting (30 tokens) does not fit in the KV left; the 2-token request behind it would
    Scenario("the head of waiting does not fit yet", (0.0, 0.01, 0.01), (20, 30, 2), (8, 2, 2), 64, 8, 52),
    # memory runs out while four sequences decode: the tail is preempted, and nobody is admitted then
    Scenario("memory runs out while four decode", (0.0,) * 4 + (0.02,), (5, 5, 5, 5, 3), (8, 8, 8, 8, 2), 32, 8, 28),
    Scenario("the running cap", (0.0,) * 4, (3, 3, 3, 3), (4, 4, 4, 4), 32, 2, 1000),   # max_num_seqs 2
    Scenario("a budget of one token", (0.0, 0.0), (3, 2), (2, 2), 1, 4, 1000),         # one token a step
)


# 2,200 one-token prompts at once into 2,200 tokens of KV: step 0 admits all of them, step 1 preempts 1,100 so
# that the other 1,100 can decode. Neither loop may stop at a count (a loop bounded at 1,024 passes every
# smaller step).
CROWD = Scenario("2,200 one-token prompts at once", (0.0,) * 2200, (1,) * 2200, (3,) * 2200, 4096, 4096, 2200)


@functools.cache
def _schedule_fixed() -> tuple:
    return tuple(s for sc in SCENARIOS for s in ch03.scenario_states(sc)) + tuple(ch03.scenario_states(CROWD)[:2])


def _preempts(s: dict) -> bool:
    """Fewer free KV slots than decoding sequences: the step must preempt."""
    return s["kv_free"] < sum(s["reserved"][i] < s["seq_len"][i] for i in s["running"])


def _eventful(s: dict) -> bool:
    """A step with a decision besides "everybody decodes": a queue to admit from or a prompt to chunk."""
    return bool(s["waiting"]) or any(s["reserved"][i] == s["seq_len"][i] for i in s["running"])


def _schedule_random(rng: random.Random, workloads: int = 160, per_workload: int = 3):
    """Seeded random workloads (tight KV with preemptions, budgets from 1 token, running caps, staggered
    arrivals); from each reference run, every step that preempts and a sample of the other eventful ones, and one
    plain decode step."""
    out = []
    for k in range(workloads):
        n = rng.randint(1, 9)
        prompt = tuple(rng.randint(1, rng.choice([4, 12, 40])) for _ in range(n))
        output = tuple(rng.randint(1, 12) for _ in range(n))
        need = max(p + o - 1 for p, o in zip(prompt, output))
        kv = need + rng.choice([0, rng.randint(0, 20), rng.randint(0, 200), 10_000])
        arrival = tuple(sorted(rng.choice([0.0, rng.uniform(0, 0.06)]) for _ in range(n)))
        sc = Scenario(f"random workload {k}", arrival, prompt, output,
                      rng.choice([1, 2, rng.randint(1, 16), rng.randint(8, 64)]), rng.randint(1, 8), kv)
        states = ch03.scenario_states(sc)
        preempting = [s for s in states if _preempts(s[1])]
        eventful = [s for s in states if _eventful(s[1]) and not _preempts(s[1])]
        plain = [s for s in states if not _eventful(s[1]) and not _preempts(s[1])]
        out += preempting + rng.sample(eventful, min(per_workload, len(eventful)))
        out += rng.sample(plain, min(1, len(plain)))
    return out


# ------------------------------------------------------------------------------------------------
# exercise 4: the largest chunk under a TPOT target


def _chunk_fixed():
    return [
        case("max_chunk", LLAMA3_8B, H100_SXM, 0.030, [1024] * 32),                   # the visible asserts' first
        case("max_chunk", LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, prefix=30_000),
        case("max_chunk", LLAMA2_7B, H100_SXM, 0.004, []),                            # even 1 token misses: 0
        case("max_chunk", LLAMA3_8B, H100_SXM, 0.030, []),                            # the chunk alone: 2013
        case("max_chunk", LLAMA3_8B, H100_SXM, 0.025, [2048] * 64, prefix=8000),
        case("max_chunk", LLAMA2_7B, H100_SXM, 0.010, [2048] * 16),
        case("max_chunk", LLAMA2_7B, H100_SXM, 0.012, [2048] * 32),                   # the decodes alone miss: 0
        case("max_chunk", LLAMA31_8B, H100_SXM, 0.400, [512] * 8, prefix=60_000, overhead_s=0.0),
        # a step exactly at the target meets it: the targets are the library's step times of 1500 and of 1 token
        case("max_chunk", LLAMA3_8B, H100_SXM, costmodel.step_time(LLAMA3_8B, H100_SXM, 1500, [1024] * 32),
             [1024] * 32),
        case("max_chunk", LLAMA2_7B, H100_SXM, costmodel.step_time(LLAMA2_7B, H100_SXM, 1, [], 30_000, 0.0), [],
             prefix=30_000, overhead_s=0.0),
        # the prefix left out: the function's own default (no cached tokens under the chunk)
        case("max_chunk", LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, prefix=DEFAULT),
        case("max_chunk", LLAMA2_7B, H100_SXM, costmodel.step_time(LLAMA2_7B, H100_SXM, 1, [2048] * 16), [2048] * 16,
             prefix=DEFAULT),
        # no cap on the search: a target so loose that the chunk passes 2**33 tokens
        case("max_chunk", LLAMA2_7B, H100_SXM, 1e11, []),
    ]


def _chunk_random(rng: random.Random):
    out = []
    for _ in range(70):   # decode batches of 0-128 over contexts up to 8000, prefixes up to 60,000, 4 ms to 400 ms
        model, gpu = rng.choice(PAIRS)
        ctx = rng.choice([256, 2048, 8000])
        decodes = [rng.randint(1, ctx) for _ in range(rng.choice([0, 1, 8, 32, 64, 128]))]
        out.append(case("max_chunk", model, gpu, rng.choice([rng.uniform(0.004, 0.05), rng.uniform(0.05, 0.4)]),
                        decodes, rng.choice([0, 0, rng.randint(1, 60_000)]), rng.choice([0.0, OH, 1e-3])))
    return out


# ------------------------------------------------------------------------------------------------
# exercise 5: the admission rule


BACKLOG_FIXED = (
    (2048, 48, 0.030, 1.0),        # the docstring: 2000 x (33 - 1); the visible asserts' first
    (2048, 2048, 0.030, 1.0),      # decodes fill the budget: nothing drains
    (8192, 0, 0.1, 0.55),          # 5 steps end by the target, 4 after the one in flight
    (100, 0, 0.25, 1.0),           # exactly 4 steps (1.0 / 0.25 == 4.0): 3 after the one in flight
    (2048, 48, 0.1, 0.3),          # exactly 3 steps, though 0.3 / 0.1 == 2.9999999999999996 in floats
    (2048, 48, 0.030, 0.045),      # under two steps: 0
    (1767, 128, 0.02998667, 1.0),
    (512, 500, 0.01, 2.005),
    (2048, 48, 0.030, 0.0155),     # under one step: 0, not negative
    (4096, 96, 0.02, 0.1),         # 0.1 / 0.02 == 5.0
    (1000, 0, 0.1, 0.7),           # 0.7 / 0.1 == 6.999999999999999
    (1000, 10, 0.01, 0.07),        # 0.07 / 0.01 == 7.000000000000001
    (1, 0, 0.4, 30.0),             # a one-token budget
)


def _backlog_random(rng: random.Random):
    out = []
    while len(out) < 160:         # clear of whole step counts: floor() there is the whole-step cases' business
        budget = rng.choice([rng.randint(1, 64), rng.randint(64, 16384)])
        step, ttft = rng.uniform(0.002, 0.4), rng.uniform(0.01, 30.0)
        if 0.02 < (ttft / step) % 1 < 0.98:
            out.append((budget, rng.randint(0, budget), step, ttft))
    for _ in range(40):           # whole step counts written in decimals: the division rounds either way
        budget = rng.randint(1, 16384)
        step = rng.choice([0.001, 0.002, 0.005, 0.01, 0.02, 0.025, 0.03, 0.05, 0.1, 0.2, 0.25, 0.3,
                           round(rng.uniform(0.002, 0.4), 3)])
        out.append((budget, rng.randint(0, budget), step, round(rng.randint(1, 80) * step, 9)))
    return out


# ------------------------------------------------------------------------------------------------
# exercise 7: the skip-join MLFQ level


MLFQ_FIXED = (
    # first, one case that sets the pitfalls apart: each one's first failing case is where it is named, and
    # here the mistakes that a later case confuses give answers of their own
    (18, 53, 4, 6),
    # the docstring's and the visible asserts': quanta 4, 8, 16, 32, 64, 128 over 6 levels
    (5, 8, 4, 6), (5, 9, 4, 6), (5, 24, 4, 6), (5, 25, 4, 6),
    (3, 3, 4, 6), (4, 4, 4, 6), (5, 5, 4, 6), (64, 64, 4, 6), (65, 65, 4, 6), (1000, 1000, 4, 6),
    (1, 4, 4, 6), (1, 5, 4, 6), (1, 12, 4, 6), (1, 13, 4, 6), (1, 28, 4, 6), (1, 29, 4, 6),
    (1, 10**6, 4, 6), (500, 10**6, 4, 1),
    # every edge of the entry: a first iteration of 0, of a quantum exactly and one more, past the last level's
    (0, 0, 4, 6), (8, 8, 4, 6), (9, 9, 4, 6), (128, 128, 4, 6), (129, 129, 4, 6), (129, 10**6, 4, 6),
    # every edge of the demotions from level 2 (joined with a 16-unit prefill): 16, 16 + 32, + 64, + 128
    (16, 16, 4, 6), (16, 17, 4, 6), (16, 48, 4, 6), (16, 49, 4, 6), (16, 112, 4, 6), (16, 113, 4, 6),
    (16, 240, 4, 6), (16, 241, 4, 6),
    # one level: everyone is at level 0; two levels: one demotion; first_quantum 1
    (0, 0, 1, 1), (3, 3, 1, 2), (1, 1, 1, 2), (1, 2, 1, 2), (2, 2, 1, 2), (0, 7, 1, 4), (0, 8, 1, 4),
    # the chapter's simulation: a 32K prompt is 64 steps of prefill; 512 tokens is one
    (64, 64, 4, 6), (64, 200, 4, 6), (1, 60, 4, 6), (1, 61, 4, 6), (1, 124, 4, 6), (1, 125, 4, 6),
    # a large first quantum: a long prompt still joins level 0
    (1000, 1000, 1024, 8), (1000, 1024, 1024, 8), (1000, 1025, 1024, 8), (1025, 1025, 1024, 8),
    # many levels: the quanta go past 2**40
    (1, 2**45, 1, 50), (2**40, 2**40, 1, 50), (2**40 + 1, 2**41, 1, 50),
    # past a thousand levels: neither loop may stop at a count (a first iteration one unit past a quantum: walking
    # down from a level too high up would stop a level short)
    (2**40 + 1, 2**40 + 1, 1, 50), (2**1050 + 1, 2**1050 + 1, 1, 1100), (2**1050, 2**1050, 1, 1100),
    (1, 2**1100, 1, 1200),
)


def _mlfq_random(rng: random.Random):
    out = []
    for _ in range(300):           # first iterations and service on every side of every boundary
        q, levels = rng.choice([1, 2, 3, 4, 8, 16, 64, rng.randint(1, 500)]), rng.randint(1, 12)
        k = rng.randint(0, levels)
        first = max(0, (q << k) + rng.choice([-1, 0, 0, 1, rng.randint(-q, q)]))
        entry = ordering.mlfq_entry_level(first, q, levels)
        j = rng.randint(entry, levels)
        edge = q * ((2 << j) - (1 << entry))                 # the quanta of levels entry..j together
        attained = max(first, edge + rng.choice([-1, 0, 0, 1, rng.randint(-edge, edge)]))
        out.append((first, attained, q, levels))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch03.ASSIGNMENT) / f"{name}.diff").message


def _prefill_s(model, prompt: int, chunk: int) -> float:
    """Seconds to prefill ``prompt`` tokens in chunks of ``chunk``, one chunk a step, nothing else in the steps."""
    return sum(costmodel.step_time(model, H100_SXM, prefill_tokens=min(chunk, prompt - p), prefill_context=p)
               for p in range(0, prompt, chunk))


# The walkthrough's claims print their own answers (the batch at 2048 tokens of context, the wait behind a
# 32,768-token prompt, the last step and the lockout of a 131,072-token one): drills 1-4 ask for variants of them.
Q1_CONTEXT = 4000                     # drill 1: tokens of context per sequence (LLaMA-2 holds 4,096)
Q2_PROMPT, Q2_BUDGET = 65536, 2048    # drill 2: the long prompt, the token budget
Q3_PROMPT, Q3_CHUNK = 98304, 16384    # drills 3 and 4: the long prompt, the token budget


def q2_short_ttft_s(prompt: int = Q2_PROMPT, budget: int = Q2_BUDGET) -> float:
    """Ten 256-token prompts behind a ``prompt``-token one, FCFS: the long prompt's chunk steps, then one
    budget-sized step for the short ones."""
    return _prefill_s(LLAMA31_8B, prompt, budget) + costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=budget)


def q3_worst_gap_s(prompt: int = Q3_PROMPT, chunk: int = Q3_CHUNK) -> float:
    """The step of the last chunk of a ``prompt``-token prompt, with 64 decoders at 2048."""
    return costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=chunk, prefill_context=prompt - chunk,
                               decode_context_lens=[2048] * 64)


def q3_lockout_s(prompt: int = Q3_PROMPT, chunk: int = Q3_CHUNK) -> float:
    return _prefill_s(LLAMA31_8B, prompt, chunk)


def _as_printed(value: float, digits: int) -> tuple:
    """A number the walkthrough prints, as a wrong answer: exact, and rounded to the digits it shows."""
    return value, round(value, digits)


Q4_DECODES, Q4_PREFIX, Q4_TPOT_S, Q4_TTFT_S = [2048] * 128, 8000, 0.030, 1.0


def q4_plan(tpot_s: float = Q4_TPOT_S, ttft_s: float = Q4_TTFT_S, decodes: int = len(Q4_DECODES)) -> dict:
    """Llama-3-8B, TPOT 30 ms, TTFT 1 s, 128 decoders at 2048, chunks on 8000 cached tokens (by default): the chunk
    the TPOT target allows, the budget, the step, the whole steps within the TTFT target and the limit."""
    lens = [2048] * decodes
    chunk = costmodel.max_prefill_chunk(LLAMA31_8B, H100_SXM, tpot_s, lens, Q4_PREFIX)
    step = costmodel.step_time(LLAMA31_8B, H100_SXM, chunk, lens, Q4_PREFIX)
    budget = decodes + chunk
    return {"chunk": chunk, "budget": budget, "step_s": step, "steps": math.floor(ttft_s / step),
            "limit": costmodel.max_backlog_tokens(budget, decodes, step, ttft_s)}


def _plan(n) -> dict:
    return q4_plan(n.tpot_ms / 1e3, n.ttft_s, n.decodes)


def _drill_5_hints(n) -> tuple:
    # (sizing the chunk without the decodes lands within the drill's 2%: the longer step leaves fewer steps)
    plan = _plan(n)
    return ((plan["budget"] * (plan["steps"] - 1), _pitfall("backlog_counts_decodes")),
            (plan["chunk"] * plan["steps"], _pitfall("backlog_no_step_in_flight")))


GPUS = {"H100": H100_SXM, "H200": H200}
V = {v.name: v for v in ch03.DRILLS}    # each drill's numbers, drawn per learner


def _batch(n, gpu=None, context=None) -> int:
    return costmodel.max_decode_batch(LLAMA2_7B, GPUS[gpu or n.gpu], n.target_ms / 1e3,
                                      n.context if context is None else context)


_BATCH_HINT = "Find the batch where the step time reaches the target: the largest B with step_time(B) <= the target."
_CONTEXT_HINT = ("That is the batch at 2048 tokens of context, the walkthrough's: at this context every sequence reads "
                 "another amount of KV each step, while the weights' share of the step stays the same.")
_FCFS_HINT = ("FCFS: the short requests wait behind every chunk of the long prompt, then take one more step for "
              "their own prompts.")
_Q2_PREFIX_HINT = ("Each chunk of the long prompt attends to the prompt before it: price chunk k on its prefix of "
                   "k x budget cached tokens (prefill_context), not as the start of a prompt.")
_Q2_COPIED_HINT = ("That is the wait behind the walkthrough's 32,768-token prompt: this one has other chunks, and the "
                   "later ones attend to a longer prefix.")
_Q3_COPIED_HINT = "That is the walkthrough's 131,072-token prompt: this one has other chunks, on other prefixes."
_H100_HINT = "That is the batch on the H100, the walkthrough's: the H200 has the same compute and more bandwidth."


def first_compute_bound_chunk(model: ModelSpec = LLAMA3_8B, gpu=H100_SXM) -> int:
    """The fewest tokens of a chunk prefilled alone (no prefix, no decodes) whose step is compute-bound."""
    return costmodel._largest_fitting(
        lambda n: costmodel.step_cost(model, gpu, prefill_tokens=n).bound == "memory") + 1


_RIDGE_HINT = ("That is the GPU's ridge point, a number of FLOPs per byte, not of tokens: the step reads weights "
               "that do little per token (the embedding table, the LM head), so its FLOPs per byte stay below its "
               "token count.")

_NEWCOMER_HINT = ("A newcomer is not at priority 0: its priority is its own prompt, the tokens it needs, and it has "
                  "waited no time at all. The long prompt must come down to that, not below zero.")
_PER_SECOND_HINT = "The rate is in tokens a second: the gap to close is spread over the whole wait."


def _decode_point(n, gpu=None) -> ServingPoint:
    return ServingPoint.decode(LLAMA2_7B, GPUS[gpu or n.gpu], _batch(n), n.context - 1)


def _chunk_point(prompt, chunk, decodes=()) -> ServingPoint:
    return ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=decodes, prefill_chunks=(chunk,),
                        prefill_prefix=prompt - chunk, max_num_batched_tokens=chunk + len(decodes))


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=_batch, points=lambda n: (_decode_point(n),),
          hints=lambda n: ((_batch(n, context=0), _pitfall("step_no_kv_read")),
                           *unless_right(_batch(n), ((_batch(n, context=2048), _CONTEXT_HINT), (16, _BATCH_HINT),
                                                     (32, _BATCH_HINT))))),
    Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: q2_short_ttft_s(n.prompt, n.budget), rel_tol=0.05,
          points=lambda n: (_chunk_point(n.prompt, n.budget),),
          hints=lambda n: ((costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=n.budget), _FCFS_HINT),
                           (costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=n.budget + 512), _FCFS_HINT),
                           ((n.prompt // n.budget + 1) * costmodel.step_time(LLAMA31_8B, H100_SXM,
                                                                            prefill_tokens=n.budget),
                            _Q2_PREFIX_HINT),
                           *((v, _Q2_COPIED_HINT) for v in _as_printed(q2_short_ttft_s(32768), 3)))),
    Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: q3_worst_gap_s(n.prompt, n.chunk), rel_tol=0.03,
          points=lambda n: (_chunk_point(n.prompt, n.chunk, (2048,) * 64),),
          hints=lambda n: tuple((v, _Q3_COPIED_HINT) for v in _as_printed(q3_worst_gap_s(131072), 3))),
    Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: q3_lockout_s(n.prompt, n.chunk), rel_tol=0.05,
          points=lambda n: (_chunk_point(n.prompt, n.chunk),),
          hints=lambda n: tuple((v, _Q3_COPIED_HINT) for v in _as_printed(q3_lockout_s(131072), 2))),
    Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: _plan(n)["limit"], rel_tol=0.02, hints=_drill_5_hints,
          points=lambda n: (ServingPoint(LLAMA31_8B, H100_SXM, decode_contexts=(2048,) * n.decodes,
                                         prefill_chunks=(_plan(n)["chunk"],), prefill_prefix=Q4_PREFIX,
                                         max_num_batched_tokens=_plan(n)["budget"]),)),
    Drill("drill_6", "", variant=V["drill_6"], answer=lambda n: first_compute_bound_chunk(LLAMA3_8B, GPUS[n.gpu]),
          points=lambda n: (ServingPoint(LLAMA3_8B, GPUS[n.gpu],
                                         prefill_chunks=(first_compute_bound_chunk(LLAMA3_8B, GPUS[n.gpu]),)),),
          hints=lambda n: ((round(GPUS[n.gpu].ridge_flops_per_byte), _RIDGE_HINT),
                           (GPUS[n.gpu].ridge_flops_per_byte, _RIDGE_HINT))),
    Drill("drill_7", "", variant=V["drill_7"], answer=_batch, points=lambda n: (_decode_point(n),),
          hints=lambda n: unless_right(_batch(n), ((_batch(n, gpu="H100"), _H100_HINT), (16, _BATCH_HINT),
                                                   (32, _BATCH_HINT)))),
    Drill("drill_8", "", variant=V["drill_8"], rel_tol=0.001, points=no_point,
          answer=lambda n: ordering.aging_rate_to_overtake(n.prompt, n.newcomer, float(n.wait_s)),
          hints=lambda n: ((n.prompt / n.wait_s, _NEWCOMER_HINT), ((n.prompt + n.newcomer) / n.wait_s, _NEWCOMER_HINT),
                           (n.prompt - n.newcomer, _PER_SECOND_HINT))),
), read=lambda value, name: common.as_float(value, name, common.short_repr(12, 120), finite=True))


V1_HIDDEN = (
    # three one-token prompts and a budget of 3: in step 1 the third decode gets the last token of the budget
    (dict(block_size=4, num_blocks=8, max_num_batched_tokens=3, max_num_seqs=4),
     [[0, "A", [1], 3, 0], [0, "B", [2], 3, 0], [0, "C", [3], 3, 0]]),
    # a threshold of 1 token: every prompt goes one token a step while another request is there
    (dict(block_size=4, num_blocks=16, max_num_batched_tokens=8, max_num_seqs=4, long_prefill_token_threshold=1),
     [[0, "A", ch03_v1.tokens_from(100, 5), 2, 0], [0, "B", ch03_v1.tokens_from(200, 3), 2, 0],
      [3, "C", ch03_v1.tokens_from(300, 4), 2, 0]]),
    # 1,100 one-token prompts in one step, then 1,100 decodes in the next: no loop may stop at a count
    (dict(block_size=16, num_blocks=1200, max_num_batched_tokens=2048, max_num_seqs=2048,
          enable_prefix_caching=False), [[0, f"s{i}", [i], 2, 0] for i in range(1100)]),
    # A takes 1,100 tokens a step under the threshold, 1,100 one-token requests fill the rest of the cache; in step
    # 1, A's next 1,100 slots preempt 1,050 of them, one at a time from the tail
    (dict(block_size=1, num_blocks=2251, max_num_batched_tokens=2200, max_num_seqs=2048,
          long_prefill_token_threshold=1100, enable_prefix_caching=False, reserve_full_prompt=False),
     [[0, "A", [7] * 2200, 2, 0]] + [[0, f"s{i}", [i % 1000], 5, 0] for i in range(1100)]),
)


def _v1_random(rng: random.Random) -> list:
    """Workloads for V1's schedule: shared prefixes, small caches (preemption), small budgets (chunks), the
    threshold on and off, arrivals over the first steps, both policies, prefix caching on and off, both gates."""
    cases = []
    for _ in range(40):
        block_size = rng.choice([1, 4, 16])
        usable = rng.choice([32, 48, 64, 96]) // block_size * block_size
        config = dict(block_size=block_size, num_blocks=usable // block_size + 1,
                      max_num_batched_tokens=rng.choice([4, 8, 16, 48]), max_num_seqs=rng.choice([2, 4, 8]),
                      long_prefill_token_threshold=rng.choice([0, 0, 4, 10]),
                      enable_prefix_caching=rng.random() < 0.75, policy=rng.choice(["fcfs", "priority"]),
                      reserve_full_prompt=rng.random() < 0.8)
        prefixes = [[rng.randrange(1000) for _ in range(rng.randint(1, 24))] for _ in range(3)]
        workload = []
        for i in range(rng.randint(2, 8)):
            prompt = rng.choice(prefixes)[:rng.randint(1, 24)] + [rng.randrange(1000) for _ in range(rng.randint(0, 8))]
            max_tokens = rng.randint(1, 12)
            prompt = prompt[:max(1, usable - max_tokens + 1)]
            workload.append([rng.randint(0, 10), f"r{i}", prompt, min(max_tokens, usable - len(prompt) + 1),
                             rng.randint(0, 2)])
        cases.append((config, sorted(workload, key=lambda w: w[0])))
    return cases


CHAPTER = Chapter(
    assignment=ch03.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\nfrom servelab.analytic import costmodel\n"
            "from servelab.analytic.costmodel import (DEFAULT_STEP_OVERHEAD_S, H100_SXM, H200, LLAMA2_7B, LLAMA3_8B,\n"
            "                                         LLAMA31_8B)\n"
            "from servelab.schedulers.vllm_scheduler import RequestStatus\n",
    demos=("setup_2", "setup_5", "setup_6", "setup_7", "setup_8", "setup_9", "setup_10", "setup_11", "setup_12",
           "setup_13"),
    setup=("setup_drills",),
    references=("servelab.analytic.costmodel:max_prefill_chunk", "servelab.analytic.costmodel:max_backlog_tokens",
                "servelab.simulator.policies:MixedBudget.schedule",
                "servelab.simulator.policies:MixedBudget._shortest_first",
                "servelab.schedulers.vllm_scheduler:Scheduler.schedule", "servelab.analytic.ordering:mlfq_level",
                "servelab.analytic.ordering:mlfq_entry_level", "servelab.analytic.ordering:mlfq_levels"),
    exercises=(
        Exercise(S["kv_bytes_per_token"], "test_kv_bytes_per_token", fixed=_kv_fixed, random=_kv_random),
        Exercise(S["step_time"], "test_step_time", fixed=_step_fixed, random=_step_random),
        Exercise(S["schedule"], "test_schedule", fixed=lambda: list(_schedule_fixed()), random=_schedule_random),
        Exercise(S["v1_schedule"], "test_v1_schedule", fixed=lambda: [*ch03.V1_CASES.values(), *V1_HIDDEN],
                 random=_v1_random),
        Exercise(S["max_chunk"], "test_max_chunk", fixed=_chunk_fixed, random=_chunk_random),
        Exercise(S["max_backlog"], "test_max_backlog", fixed=lambda: list(BACKLOG_FIXED), random=_backlog_random),
        Exercise(S["mlfq_level"], "test_mlfq_level", fixed=lambda: list(MLFQ_FIXED), random=_mlfq_random),
    ),
    drills=DRILLS,
)
