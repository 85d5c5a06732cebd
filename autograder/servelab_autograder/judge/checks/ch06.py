"""Chapter 06's grading table: each test cell, the kernel or function it grades and its cases; the drills' answers.

A kernel's case is plain data (shapes, lengths, a slot mapping, a seed): the chapter's drivers
(``servelab_autograder.exercises.ch06.drive_*``) build its tensors in the learner's kernel, launch the learner's kernel
and hand back what it wrote; on this side the same drivers run the float64 references. Fixed cases come first (the
notebook's, then those that catch a pitfall, then edge cases: block sizes 1, 4, 8 and 16, GROUP 1, 2 and 4,
lengths 1, one block, one past a block and several tiles, fp16, scores in the hundreds and scores of -1e4 or
below); the pitfall atlas is made from them. The random ones are drawn from the run's seed.

While this chapter grades, the sandbox's library has none of the ``references`` below: the float64 references
and the library's own store, decode, split-KV and prefill kernels and entry points, the tile loop
``attend_tiles`` they share (stage 1 of split-KV is computed by the driver in float64, ``ch06.stage_one``, so
nothing needs the library's), ``ref_merge``, ``decode_traffic`` and ``costmodel.shared_prefix_decode_traffic``
(with an empty prefix it is ``decode_traffic``; the drills' answers 5 and 6 come from it). What stays reachable, and
why:
``paged_decode_kernel`` (``servelab.kernels`` tells the interpreter from a compiled build by it when imported; it
cannot run without ``attend_tiles``), ``make_paged_batch``, ``split_bounds``, ``gather_kv`` and the
``launch_*`` launchers (the drivers build and launch with them), ``split_kv_partials`` (the given stage 1; with
``attend_tiles`` gone it only runs outside grading), ``roofline_time_s`` (setup_9 times the learner's traffic
with it), the walks and the plot (setup_3 and the demos). Cells that show a blocked reference are demos:
setup_2 (``decode_traffic``), setup_4 (``paged_decode``), setup_7 (``split_kv_partials``) and setup_12
(``shared_prefix_decode_traffic``); the benchmark cell needs CUDA and is skipped without it.
"""

from __future__ import annotations

import random

from servelab.analytic.costmodel import H200, shared_prefix_decode_traffic
from servelab.kernels import exercises as ex
from servelab_autograder.exercises import ch06
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch06.SPECS


def _store_random(rng: random.Random):
    out = []
    for _ in range(4):
        block_size, num_blocks = rng.choice([1, 2, 4, 8, 16]), rng.randint(2, 5)
        slots = rng.sample(range(num_blocks * block_size), min(6, num_blocks * block_size))
        out.append(([s if rng.random() > 0.25 else -1 for s in slots], block_size, num_blocks, rng.choice([1, 2]),
                    rng.choice([16, 32]), rng.choice(["float32", "float16"]), rng.randrange(10**6)))
    return out


def _batch_random(rng: random.Random, count: int) -> list[tuple]:
    out = []
    for _ in range(count):
        kv, group = rng.choice([1, 2]), rng.choice([1, 2, 4, 8])
        out.append(([rng.randint(1, 48) for _ in range(rng.randint(1, 3))], rng.choice([1, 2, 4, 8, 16]),
                    kv * group, kv, rng.choice([16, 32, 64]), rng.choice(["float32", "float16"]),
                    rng.choice(["normal", "normal", "large"]), rng.randrange(10**6)))
    return out


def _traffic_random(rng: random.Random):
    out = []
    for _ in range(100):
        kv, group = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8])
        out.append(([rng.randint(1, 9000) for _ in range(rng.randint(1, 12))], kv * group, kv,
                    rng.choice([64, 80, 128, 256]), rng.choice([1, 2, 4])))
    return out


# The notebook's decode batches (visible asserts), then the old hidden ones, then scores of -1e4 or below
DECODE = [
    ([4, 1, 21], 4, 8, 2, 32, "float32", "normal", 0),     # one block exactly, one token, two tiles
    ([17, 3], 1, 2, 2, 16, "float32", "normal", 1),        # block size 1, GROUP 1
    ([40], 16, 4, 1, 32, "float32", "large", 2),           # exp(score) overflows without the running max
    ([1, 16, 17], 1, 2, 2, 16, "float32", "normal", 1),
    ([1, 4, 5, 20], 4, 8, 2, 32, "float16", "normal", 2),   # GROUP 4, fp16
    ([8, 12, 13], 4, 4, 2, 16, "float32", "normal", 3),     # lengths at and past block boundaries, GROUP 2
    ([16, 17, 1, 40], 16, 4, 1, 64, "float32", "normal", 4),
    ([40, 7], 16, 4, 1, 32, "float32", "large", 5),
    ([40, 5], 4, 4, 2, 16, "float32", "negative", 6),       # a running max that starts at 0 gives 0 / 0
    ([1100, 3], 16, 2, 1, 16, "float32", "offset", 7),     # past 1,024 keys; out near 100: fp16 l or acc is off
    ([40, 9], 4, 4, 2, 16, "float32", "huge", 8),           # scores past fp16's 65,504: an fp16 max overflows
    ([9, 4], 4, 4, 2, 16, "float32", "far", 10),            # block ids 2**32 elements on: int64 offsets
]
DRILL_SHAPE = (64, 8, 128, 2)           # Llama-3-70B's attention: 64 query / 8 KV heads, head_dim 128, bf16
V = {v.name: v for v in ch06.DRILLS}    # the drills' numbers, drawn per learner: one step for all six


def _step(n):
    nbytes, flops = ex.decode_traffic([n.context] * n.batch, *DRILL_SHAPE)
    memory_s, compute_s = ex.roofline_time_s(nbytes, flops, H200)
    return nbytes, flops, memory_s, compute_s


def _shared(n, prefix_once: bool = True, prefix: int | None = None):
    """(bytes, flops) of the drills' step with its shared prefix read once (a cascade kernel) or per sequence."""
    prefix = n.prefix if prefix is None else prefix
    return shared_prefix_decode_traffic(prefix, [n.context - n.prefix] * n.batch, *DRILL_SHAPE, prefix_once=prefix_once)


# What the solution cells need on this side. Their kernels are decorated as this process's library was: a grader
# forked from a process that had imported servelab.kernels keeps the library but starts from an environment
# without the TRITON_INTERPRET it set.
PRELUDE = """\
import math
import os

import servelab.kernels
import torch
import triton
import triton.language as tl

os.environ["TRITON_INTERPRET"] = "1" if servelab.kernels.INTERPRETED else "0"
"""

CHAPTER = Chapter(
    assignment=ch06.ASSIGNMENT,
    prelude=PRELUDE,
    demos=("setup_2", "setup_4", "setup_7", "setup_12"),
    setup=("setup_drills",),
    references=(
        "servelab.kernels.exercises:decode_traffic", "servelab.kernels.exercises:ref_merge",
        "servelab.kernels.reference:ref_store_kvcache", "servelab.kernels.reference:ref_paged_decode",
        "servelab.kernels.reference:ref_prefill_attention", "servelab.kernels.reference:attention_f64",
        "servelab.kernels.store:store_kvcache", "servelab.kernels.store:store_kvcache_kernel",
        "servelab.kernels.decode:paged_decode", "servelab.kernels.tiles:attend_tiles",
        "servelab.kernels.split_kv:split_kv_decode", "servelab.kernels.split_kv:decode_attention",
        "servelab.kernels.split_kv:split_kv_decode_kernel", "servelab.kernels.split_kv:merge_splits_kernel",
        "servelab.kernels.prefill:prefill_attention", "servelab.kernels.prefill:prefill_attention_kernel",
        "servelab.analytic.costmodel:shared_prefix_decode_traffic"),
    exercises=(
        Exercise(S["store_kv_kernel"], "test_store_kv_kernel",
                 fixed=lambda: [([5, -1, 0], 4, 3, 1, 16, "float32", 0),            # the notebook's example
                                ([3, 0, 5, -1, 1], 1, 6, 2, 16, "float32", 1),       # block size 1
                                ([3, 4, -1, 19, 8, -1, 7], 4, 5, 2, 32, "float16", 2),  # boundaries, the last slot
                                ([17, 0, -1, 47, 30], 16, 3, 2, 16, "float32", 3),
                                # slots 2**32 elements on (and one near): int64 offsets, or a store wraps
                                # around into the cache (ch06.FAR_ELEMENTS)
                                ([ch06.far_slot(1, 4, 1, 16), 2, ch06.far_slot(6, 4, 1, 16)], 4, 3, 1, 16,
                                 "float32", 9)],
                 random=_store_random),
        Exercise(S["decode_kernel"], "test_decode_kernel", fixed=lambda: DECODE,
                 random=lambda rng: _batch_random(rng, 4)),
        Exercise(S["merge_kernel"], "test_merge_kernel",
                 fixed=lambda: [*[([40, 5, 1], 4, 8, 2, 16, "float32", "normal", 4, n) for n in (1, 3, 4)],
                                ([40, 7], 16, 4, 1, 32, "float32", "large", 5, 3),   # maxima far apart
                                ([40, 20, 3], 8, 4, 2, 16, "float32", "normal", 7, 5),  # SPLITS_PAD 8, empty splits
                                ([40, 5], 4, 4, 2, 16, "float32", "negative", 6, 3),  # every m_j -1e4 or below
                                ([33, 9], 4, 4, 1, 32, "float16", "normal", 8, 2)],
                 random=lambda rng: [(*c, rng.randint(1, 5)) for c in _batch_random(rng, 3)]),
        Exercise(S["decode_traffic"], "test_decode_traffic",
                 fixed=lambda: [([10, 6], 4, 2, 64, 2), ([100], 16, 1, 64, 2),        # the visible asserts
                                ([8192] * 16, 32, 8, 128, 2),                        # Llama-3-8B, bf16
                                ([2048] * 8, 32, 32, 128, 2),                        # LLaMA-2-7B (MHA)
                                ([1, 17, 300, 4096], 32, 8, 128, 1),                 # an fp8 cache
                                ([100, 200], 16, 1, 64, 2), ([1], 8, 2, 64, 4)],      # MQA; one token, fp32
                 random=_traffic_random),
    ),
    drills=Drills("test_drills", (
        Drill("drill_1", "", variant=V["drill_1"], answer=lambda n: _step(n)[0], rel_tol=0.005, points=no_point),
        Drill("drill_2", "", variant=V["drill_2"], answer=lambda n: _step(n)[1] / _step(n)[0], rel_tol=0.01,
              points=no_point,
              hints=lambda n: ((_step(n)[0] / _step(n)[1], "That is bytes per FLOP: arithmetic intensity is FLOPs "
                                                           "divided by bytes."),)),
        Drill("drill_3", "", variant=V["drill_3"], answer=lambda n: max(_step(n)[2:]) * 1e6, rel_tol=0.01,
              points=no_point,
              hints=lambda n: ((_step(n)[3] * 1e6, "That is the compute time: the step takes the larger of its memory "
                                                   "and compute times."), (_step(n)[2], "Give the time in "
                                                                                        "microseconds."))),
        Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: _step(n)[2] / _step(n)[3], rel_tol=0.01,
              points=no_point,
              hints=lambda n: ((_step(n)[3] / _step(n)[2], "That is compute time over memory time; the drill asks "
                                                           "memory time over compute time."),)),
        Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: _shared(n)[0], rel_tol=0.005, points=no_point,
              hints=lambda n: ((_shared(n, prefix_once=False)[0], "That reads the prefix once per sequence, as drill 1 "
                                                                  "does: the cascade kernel reads it once for all."),
                               (_shared(n, prefix=0)[0], "That leaves the prefix out: the cascade kernel reads it "
                                                         "once, not never."))),
        Drill("drill_6", "", variant=V["drill_6"], answer=lambda n: _shared(n)[1] / _shared(n)[0], rel_tol=0.01,
              points=no_point,
              hints=lambda n: ((_shared(n)[0] / _shared(n)[1], "That is bytes per FLOP: arithmetic intensity is FLOPs "
                                                               "divided by bytes."),)),
    ), read=ch06.as_float),
)
