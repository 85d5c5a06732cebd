"""Chapter 07's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first: the docstrings' examples, one for each pitfall (a cached prefix, a chunk that continues
mid-block, a decode at each side of a block boundary, a radix-cache step of one-slot pages), then every step the
reference engine takes on the chapter's workload of seed 0, with either cache. The random ones are the steps of
the workloads of seeds drawn from the run's seed, and sequences in random states (block sizes 1-16, shuffled block
ids, prefixes cached up to any token). The pitfall atlas of the learner-facing module is made from the fixed ones.

While this chapter grades, the sandbox's library has none of the ``references`` below: the engine's reference
pieces (``servelab.engine.llm.prepare_prefill``, ``prepare_decode``, ``paged_attention``) and every library function
that would store K/V through a slot mapping or attend through a block table for ``paged_attention`` (chapter 06's
kernels, their entry points and float64 references, ``gather_kv``). The cells that run the engine are demos. What
stays reachable: ``Batch``, ``block_tables`` and ``causal_attention`` (given to the learner), the schedulers, the
model.
"""

from __future__ import annotations

import random

from servelab.analytic import costmodel
from servelab_autograder.exercises import ch07
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch07.SPECS


_state, _decode_state = ch07._state, ch07.decode_state
WALK, DECODE_WALK = ch07.walk_case(), ch07.decode_walk_case()
PREFILL_FIXED = [
    WALK,
    ([_state(5, [40, 41, 12, 3, 77], 3, 2)], 1),                     # a radix step: one-slot pages
    ([_state(14, [2, 9, 4, 8], 6, 8)], 4),                            # a chunk continues mid-block, to the end
    ([_state(9, [5, 1, 6], 8, 1), _state(3, [0], 0, 3, first=300)], 4),   # a hit of all but the last token
    ([_state(20, [3, 0], 0, 20)], 16),                                # a whole prompt, no cache
]
DECODE_FIXED = [
    DECODE_WALK,
    ([_decode_state(17, [9, 2, 4, 7, 1]), _decode_state(16, [8, 5, 3, 6], first=200)], 4),  # both sides of 16
    ([_decode_state(2, [3])], 16),
    ([_decode_state(6, [8, 2, 13, 40, 5, 1])], 1),                  # radix: the last page is the new token's
]


# more than any loop a learner might cap (32, 1024) handles: a 1,100-token prompt, a decode step of 1,100 sequences
_TABLE = random.Random(1100).sample(range(2000), 69)
MANY = {"prefill": [([_state(1100, _TABLE, 0, 1100)], 16), ([_state(1100, _TABLE, 37, 1063)], 16)],
        "decode": [([_decode_state(2 + i % 3, [i]) for i in range(1100)], 16)]}


def _prefill_fixed():
    return [*PREFILL_FIXED, *(c for cache in ("blocks", "radix") for c in ch07.recorded_cases("prefill", 0, cache))]


def _decode_fixed():
    return [*DECODE_FIXED, *(c for cache in ("blocks", "radix") for c in ch07.recorded_cases("decode", 0, cache))]


def random_states(rng: random.Random, kind: str) -> tuple[list[dict], int]:
    """Up to five sequences in random states: random lengths and tokens, shuffled block ids, a prefix cached up
    to any token (a hit, or the chunks so far) and a chunk of any length after it; a decode step's last token."""
    block_size = rng.choice([1, 2, 3, 4, 8, 16])
    pool = list(range(400))
    rng.shuffle(pool)
    states = []
    for _ in range(rng.randint(1, 5)):
        n = rng.randint(2 if kind == "decode" else 1, 40)
        table = [pool.pop() for _ in range(-(-n // block_size))]
        cached = n - 1 if kind == "decode" else rng.choice([0, rng.randint(0, n - 1)])
        scheduled = 1 if kind == "decode" else rng.randint(1, n - cached)
        states.append({"token_ids": [rng.randrange(128) for _ in range(n)], "block_table": table,
                       "num_cached_tokens": cached, "num_scheduled_tokens": scheduled})
    return states, block_size


def _engine_random(rng: random.Random, kind: str) -> list:
    seeds = [rng.randrange(1, 10**6) for _ in range(2)]
    return [c for seed, cache in zip(seeds, ("blocks", "radix"), strict=True)
            for c in ch07.recorded_cases(kind, seed, cache)]


def _random(kind: str):
    return lambda rng: [*_engine_random(rng, kind), *(random_states(rng, kind) for _ in range(100)), *MANY[kind]]


def _attention_fixed():
    cases = [ch07.attention_case(*WALK, "prefill", 0), ch07.attention_case(*DECODE_WALK, "decode", 1),
             ch07.attention_case(*WALK, "prefill", 2, heads=(4, 1, 8)),            # one KV head for all four
             ch07.attention_case(*PREFILL_FIXED[2], "prefill", 3), ch07.attention_case(*PREFILL_FIXED[1], "prefill", 4),
             ch07.attention_case(*DECODE_FIXED[1], "decode", 5, heads=(2, 2, 8))]
    for kind in ("prefill", "decode"):
        cases += [ch07.attention_case(*c, kind, 10 + i) for i, c in enumerate(ch07.recorded_cases(kind, 0)[::3])]
    return cases


def _attention_random(rng: random.Random):
    out = []
    for _ in range(60):
        kind = rng.choice(["prefill", "decode"])
        heads = rng.choice([(4, 2, 8), (4, 1, 8), (2, 2, 4), (6, 3, 8)])
        out.append(ch07.attention_case(*random_states(rng, kind), kind, rng.randrange(10**6), heads=heads))
    return out


# drills: a Llama-3-8B-shaped cache (costmodel.LLAMA3_8B: 32 layers, 8 KV heads of 128, bf16)
M = costmodel.LLAMA3_8B
V = {v.name: v for v in ch07.DRILLS}    # each drill's numbers, drawn per learner


def _no_cache(n) -> int:
    """Positions computed without a KV cache: each step runs the whole sequence so far."""
    return sum(n.prompt + t for t in range(n.new))


def _with_cache(n) -> int:
    return n.prompt + n.new - 1


def _block_bytes(n) -> int:
    """K and V of a block's tokens in every layer."""
    return int(n.block * M.kv_bytes_per_token)




CHAPTER = Chapter(
    assignment=ch07.ASSIGNMENT,
    prelude=("import torch\n\nfrom servelab.engine.llm import Batch, block_tables\n"
             "from servelab.engine.model import causal_attention\n"),
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6", "setup_7", "setup_8"),
    setup=("setup_drills",),
    references=(
        "servelab.engine.llm:prepare_prefill", "servelab.engine.llm:prepare_decode",
        "servelab.engine.llm:paged_attention", "servelab.engine.llm:paged_attention_batched",
        "servelab.kernels.reference:ref_store_kvcache", "servelab.kernels.reference:ref_paged_decode",
        "servelab.kernels.reference:ref_prefill_attention", "servelab.kernels.reference:attention_f64",
        "servelab.kernels.reference:gather_kv", "servelab.kernels.store:store_kvcache",
        "servelab.kernels.decode:paged_decode", "servelab.kernels.prefill:prefill_attention",
        "servelab.kernels.split_kv:split_kv_decode", "servelab.kernels.split_kv:decode_attention"),
    exercises=(
        Exercise(S["prepare_prefill"], "test_prepare_prefill", fixed=_prefill_fixed, random=_random("prefill")),
        Exercise(S["prepare_decode"], "test_prepare_decode", fixed=_decode_fixed, random=_random("decode")),
        Exercise(S["paged_attention"], "test_paged_attention", fixed=_attention_fixed, random=_attention_random),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], points=no_point,
              answer=lambda n: n.table[(n.prompt - 1) // 16] * 16 + (n.prompt - 1) % 16,
              hints=lambda n: ((n.table[(n.prompt - 1) // 16] * 16 + n.prompt % 16,
                                f"That is the slot of position {n.prompt}; the last of {n.prompt} tokens is position "
                                f"{n.prompt - 1}."),)),
        Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: n.prompt + n.second, points=no_point,
              hints=lambda n: ((n.prompt - n.cached + n.second,
                                "That is cu_seqlens_q[-1], the new tokens; cu_seqlens_k also counts the cached "
                                "ones."),)),
        Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: n.table[-1] * 16 + (n.length - 1) % 16,
              points=no_point,
              hints=lambda n: ((n.table[-1] * 16 + n.length % 16 - 1,
                                "len % block_size is 0 when the last block is full: the new token is row 15 of that "
                                "block, not row -1."),)),
        Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: n.gib * 2**30 // _block_bytes(n), points=no_point,
              hints=lambda n: ((n.gib * 2**30 // (_block_bytes(n) // M.num_layers),
                                "A block holds its tokens' K/V in every layer."),)),
        Drill("drill_5", "", variant=V["drill_5"], answer=_no_cache, points=no_point,
              hints=lambda n: ((n.prompt * n.new, "Each step recomputes the whole sequence so far, and it grows by one "
                                                  "token a step."),)),
        Drill("drill_6", "", variant=V["drill_6"], answer=lambda n: _no_cache(n) / _with_cache(n), rel_tol=0.01,
              points=no_point),
    ), read=ch07.as_float),
)
