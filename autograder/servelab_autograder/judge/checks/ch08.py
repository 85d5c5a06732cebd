"""Chapter 08's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch08.case`` (a model or GPU as its fields).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- every function of ``servelab.analytic.kv_tiers`` the exercises or the drills could be answered with is blocked
  (``recompute_time``, ``break_even_bandwidth``, ``effective_copy_bandwidth``, ``break_even_copy_bytes``,
  ``swap_copies``, ``swap_copy_bytes``, ``swap_time``); its constants stay (the notebook's setup reads them).
- ``costmodel.step_cost`` stays: recompute_time is written with it (its FLOPs, at a fraction of peak, are the
  exercise; a call that divides by the peak alone, or prices a one-token step, fails the cases), and drill 6 asks
  when it turns compute-bound.
- ``servelab.simulator`` (whose ``Swap`` prices copies with ``kv_tiers.swap_time``) and ``servelab.plots.kv`` (which
  draws ``effective_copy_bandwidth``) are used only by the walkthrough's cells, which are demos: not run while
  grading. setup_1 (imports) and setup_2 (the assumptions, read from constants) run as they are.

The drills are drawn per learner (``exercises.variants``): ``setup_drills`` prints the learner's numbers, and each
drill is judged on the numbers of the student id being graded.
"""

from __future__ import annotations

import dataclasses
import math
import random

from servelab.analytic import costmodel
from servelab.analytic import kv_tiers as K
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B, GPUSpec, ModelSpec
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch08, common, spec
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point, unless_right

S = ch08.SPECS
case = ch08.case
PAIRS = [(LLAMA2_7B, H100_SXM), (LLAMA3_8B, H100_SXM), (LLAMA3_8B, H200), (LLAMA31_8B, H100_SXM), (LLAMA2_7B, H200)]
TINY = ModelSpec("tiny, MQA", num_layers=2, hidden_size=256, num_heads=4, num_kv_heads=1, head_dim=64,
                 intermediate_size=512, vocab_size=1000)
A100ISH = GPUSpec("a 312 TFLOP/s GPU", peak_flops=312e12, hbm_bandwidth=2.0e12, memory_bytes=80e9)


def _fp8(model) -> ModelSpec:
    return dataclasses.replace(model, name=f"{model.name}, fp8 KV", bytes_per_kv_element=1)


def _random_model(rng: random.Random, k: int) -> dict:
    kv, group = rng.choice([1, 2, 4, 8, 8, 16]), rng.choice([1, 2, 4, 8])
    head_dim = rng.choice([64, 80, 128, 128, 256])
    hidden = kv * group * head_dim if rng.random() < 0.7 else rng.choice([2048, 4096, 5120])
    return {"name": f"random model {k}", "num_layers": rng.randint(1, 80), "hidden_size": hidden,
            "num_heads": kv * group, "num_kv_heads": kv, "head_dim": head_dim, "intermediate_size": 3 * hidden,
            "vocab_size": rng.choice([32000, 128256, 151936]), "bytes_per_param": 2,
            "bytes_per_kv_element": rng.choice([2, 2, 1, 4]), "tie_word_embeddings": rng.random() < 0.3}


def _random_gpu(rng: random.Random) -> dict:
    return {"name": "random GPU", "peak_flops": rng.uniform(100e12, 2000e12), "hbm_bandwidth": rng.uniform(1e12, 8e12),
            "memory_bytes": 80e9}


# ------------------------------------------------------------------------------------------------
# exercises 1 and 2: the recompute time and the break-even bandwidth (same arguments)


def _recompute_fixed(name: str):
    out = [case(name, LLAMA2_7B, H100_SXM, 1024, mfu=0.5),      # the visible asserts' first
           case(name, LLAMA3_8B, H100_SXM, 16, mfu=0.4), case(name, LLAMA3_8B, H200, 3000),
           case(name, LLAMA2_7B, H100_SXM, 1024), case(name, LLAMA3_8B, H100_SXM, 1024),
           case(name, LLAMA3_8B, H200, 4096, mfu=0.3), case(name, LLAMA3_8B, H200, 4096)]
    out += [case(name, LLAMA3_8B, H100_SXM, 1),                  # one token: the LM head is a third of it
            case(name, LLAMA31_8B, H100_SXM, 100_000, mfu=0.6),  # attention dominates a long context
            case(name, _fp8(LLAMA3_8B), H200, 1024),              # fp8 KV: half the bytes, the same FLOPs
            case(name, TINY, A100ISH, 7, mfu=1.0),                # MQA, at peak
            case(name, LLAMA2_7B, A100ISH, 2048, mfu=0.25)]
    return out


def _recompute_random(name: str):
    def cases(rng: random.Random):
        out = []
        for k in range(120):
            if rng.random() < 0.5:
                model, gpu = rng.choice(PAIRS)
                model, gpu = spec.as_fields(model, ModelSpec), spec.as_fields(gpu, GPUSpec)
            else:
                model, gpu = _random_model(rng, k), _random_gpu(rng)
            tokens = rng.choice([1, rng.randint(1, 64), rng.randint(64, 8192), rng.randint(8192, 131072)])
            out.append(case(name, model, gpu, tokens, mfu=rng.choice([0.5, 1.0, round(rng.uniform(0.05, 1.0), 3)])))
        return out
    return cases


# ------------------------------------------------------------------------------------------------
# exercise 3: what one copy delivers

COPY_FIXED = (
    (32768, 64e9, 10e-6),            # the visible asserts' first: Llama-3-8B's 16-token block
    (64000, 64e9, 1e-6),             # latency = transfer time: half the link
    (1e9, 64e9, 10e-6),              # a large copy: nearly all of it
    (131072, 64e9, 10e-6),           # LLaMA-2-7B's 16-token block
    (4096, 25e9, 5e-6),              # a tiny copy: almost all latency
    (2**20, 32e9, 0.0),              # no fixed cost: the link itself
    (1.5e6, 126e9, 2e-6),
)


def _copy_random(rng: random.Random):
    return [(rng.choice([rng.randint(1, 4096), rng.randint(4096, 2**20), rng.uniform(2**20, 2**32)]),
             rng.uniform(1e9, 200e9), rng.choice([0.0, rng.uniform(0, 100e-6), 10e-6])) for _ in range(150)]


# ------------------------------------------------------------------------------------------------
# exercise 4: the swap time of a sequence


def _swap_fixed():
    return [case("swap_time", LLAMA3_8B, 1000, 16, 64e9, 10e-6),     # the visible asserts' first
            case("swap_time", LLAMA2_7B, 17, 16, 64e9, 10e-6),       # a part-filled last block
            case("swap_time", LLAMA3_8B, 256, 64, 50e9, 0.0),        # whole blocks, no fixed cost
            case("swap_time", LLAMA3_8B, 2000, 16, 64e9),            # the walkthrough's sequence
            case("swap_time", LLAMA3_8B, 2000, 256, 64e9),
            case("swap_time", LLAMA2_7B, 3, 16, 64e9, 10e-6),        # fewer tokens than one block
            case("swap_time", LLAMA2_7B, 0, 16, 64e9, 10e-6),        # nothing to move
            case("swap_time", _fp8(LLAMA3_8B), 4097, 32, 25e9, 4e-6),
            case("swap_time", TINY, 5, 1, 1e9, 1e-3)]                # one-token blocks


def _swap_random(rng: random.Random):
    out = []
    for k in range(150):
        model = spec.as_fields(rng.choice(PAIRS)[0], ModelSpec) if rng.random() < 0.5 else _random_model(rng, k)
        bs = rng.choice([1, 8, 16, 16, 32, 64, 128, 256])
        tokens = rng.choice([rng.randint(0, 3 * bs), rng.randint(1, 40000)])
        out.append(case("swap_time", model, tokens, bs, rng.uniform(1e9, 200e9),
                        rng.choice([0.0, 10e-6, rng.uniform(0, 50e-6)])))
    return out


# ------------------------------------------------------------------------------------------------
# the drills: every expected value from the library


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch08.ASSIGNMENT) / f"{name}.diff").message


LINK = K.PCIE_GEN5_X16.bandwidth     # 53 GB/s: the course's one-direction PCIe Gen5 x16 figure


V = {v.name: v for v in ch08.DRILLS}    # each drill's numbers, drawn per learner
GPUS = {"H100": H100_SXM, "H200": H200}


def _per_layer_k(model) -> int:
    """Bytes of one token's K in one layer: what a paged cache's copy of one block holds per token."""
    return model.num_kv_heads * model.head_dim * 2


def _d1(n, model=None) -> float:
    return K.break_even_bandwidth(model or _fp8(LLAMA3_8B), GPUS[n.gpu], n.tokens, n.mfu_pct / 100) / _GB


def _d2(n, link=LINK, mfu_pct=None) -> float:
    return link / K.break_even_bandwidth(LLAMA2_7B, H100_SXM, n.tokens, (mfu_pct or n.mfu_pct) / 100)


def _at_50_hint(n) -> str:
    way = "slower, so the break-even is lower" if n.mfu_pct < 50 else "faster, so the break-even is higher"
    return f"That is the ratio at 50% of peak, the walkthrough's: at {n.mfu_pct}% recompute is {way}."


def _d3(n, nbytes=None) -> float:
    copy = K.swap_copy_bytes(LLAMA3_8B, n.block) if nbytes is None else nbytes
    return K.effective_copy_bandwidth(copy, LINK, n.latency_us * 1e-6) / _GB


def _d4(n) -> float:
    return K.swap_time(LLAMA2_7B, n.tokens, n.block, LINK, n.latency_us * 1e-6) * 1e3


def _d4_hints(n) -> tuple:
    lat, blocks, full = n.latency_us * 1e-6, -(-n.tokens // n.block), n.tokens // n.block
    per_token, copies = LLAMA2_7B.kv_bytes_per_token, 2 * LLAMA2_7B.num_layers
    return ((blocks * 2 * (lat + n.block * per_token / 2 / LINK) * 1e3, _pitfall("swap_one_copy_per_block")),
            ((lat + blocks * n.block * per_token / LINK) * 1e3, _pitfall("swap_latency_once")),
            (full * copies * (lat + n.block * _per_layer_k(LLAMA2_7B) / LINK) * 1e3, _pitfall("swap_partial_block")))


def _d5(n) -> int:
    be = K.break_even_bandwidth(LLAMA2_7B, H100_SXM)
    return math.ceil(K.break_even_copy_bytes(be, LINK, n.latency_us * 1e-6) / K.swap_copy_bytes(LLAMA2_7B, 1))


def _d6(n, batch=None, context=None) -> int:
    decodes = [context or n.context] * (batch or n.batch)
    return costmodel._largest_fitting(lambda r: costmodel.step_cost(
        LLAMA3_8B, H100_SXM, prefill_tokens=r, decode_context_lens=decodes).bound == "memory")


_GB = 1e9
_BF16_HINT = "That is the bf16 cache's break-even: an fp8 cache holds half the bytes per token."
_ALL_LAYERS_HINT = ("That copy holds the block's K of every layer; the paged cache keeps one K tensor per layer, so "
                    "one copy holds one layer's.")
_BLOCK_HINT = "Each token of one layer's K is num_kv_heads x head_dim x 2 bytes; find where one copy reaches the line."
_DRILL_6_HINT = ("That is the walkthrough's step (128 sequences at 1,024 tokens); this one has other decodes, so "
                 "another amount of idle compute.")


def _prefill(model, gpu=H100_SXM, tokens=1024, **kw) -> ServingPoint:
    return ServingPoint(model, gpu, prefill_chunks=(tokens,), **kw)


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=_d1, rel_tol=0.01,
          points=lambda n: (_prefill(LLAMA3_8B, GPUS[n.gpu], n.tokens, kv_dtype="fp8"),),
          hints=lambda n: ((_d1(n, LLAMA3_8B), _BF16_HINT), (_d1(n) / 2, _pitfall("break_even_no_k_and_v")))),
    Drill("drill_2", "", variant=V["drill_2"], answer=_d2, rel_tol=0.01,
          points=lambda n: (_prefill(LLAMA2_7B, tokens=n.tokens),),
          hints=lambda n: ((_d2(n, 128e9), _pitfall("drills_bidirectional")), (_d2(n, mfu_pct=50), _at_50_hint(n)))),
    Drill("drill_3", "", variant=V["drill_3"], answer=_d3, rel_tol=0.01, points=no_point,
          hints=lambda n: ((LINK / _GB, _pitfall("effective_no_latency")),
                           (_d3(n, n.block * LLAMA3_8B.num_layers * _per_layer_k(LLAMA3_8B)), _ALL_LAYERS_HINT))),
    # 0.2%: up to 256 blocks, one block fewer (a part-filled last block dropped) is at least 0.39% less
    Drill("drill_4", "", variant=V["drill_4"], answer=_d4, rel_tol=0.002,
          points=lambda n: (ServingPoint.decode(LLAMA2_7B, H100_SXM, 1, n.tokens),), hints=_d4_hints),
    Drill("drill_5", "", variant=V["drill_5"], answer=_d5, points=lambda n: (_prefill(LLAMA2_7B),),
          hints=lambda n: unless_right(_d5(n), ((1, _pitfall("effective_no_latency")), (16, _BLOCK_HINT),
                                                 (32, _BLOCK_HINT)))),
    Drill("drill_6", "", variant=V["drill_6"], answer=_d6,
          points=lambda n: (ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(n.context,) * n.batch,
                                         prefill_chunks=(_d6(n),)),),
          hints=lambda n: unless_right(_d6(n), ((_d6(n, 128, 1024), _DRILL_6_HINT),))),
), read=lambda value, name: common.as_float(value, name, common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch08.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\nfrom servelab.analytic import costmodel, kv_tiers\n"
            "from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B\n",
    demos=("setup_3", "setup_4", "setup_5", "setup_6", "setup_7", "setup_8", "setup_9"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.kv_tiers:{n}" for n in (
        "recompute_time", "break_even_bandwidth", "effective_copy_bandwidth", "break_even_copy_bytes", "swap_copies",
        "swap_copy_bytes", "swap_time")),
    exercises=(
        Exercise(S["recompute_time"], "test_recompute_time", fixed=lambda: _recompute_fixed("recompute_time"),
                 random=_recompute_random("recompute_time")),
        Exercise(S["break_even_bandwidth"], "test_break_even_bandwidth",
                 fixed=lambda: _recompute_fixed("break_even_bandwidth"),
                 random=_recompute_random("break_even_bandwidth")),
        Exercise(S["effective_copy_bandwidth"], "test_effective_copy_bandwidth", fixed=lambda: list(COPY_FIXED),
                 random=_copy_random),
        Exercise(S["swap_time"], "test_swap_time", fixed=_swap_fixed, random=_swap_random),
    ),
    drills=DRILLS,
)
