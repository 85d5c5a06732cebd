"""Chapter 09's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch09.case`` (a model or GPU as its fields).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- every function of ``servelab.analytic.capacity`` an exercise is, and the two that would answer one in a call:
  ``running_ceilings`` (it holds compute_ridge_batch and kv_ceiling) and ``prefill_share_ratio`` (drill 5).
- ``costmodel`` stays whole: the exercises are written with ``step_cost`` (its ``bound``) and
  ``kv_capacity_tokens`` is one line of kv_ceiling, not the exercise (the pitfall is what is left of the memory).
- ``capacity.prefill_s_per_token`` and ``capacity.decode_s_per_token`` stay: fleet_size is written with them (the
  exercise is the day's GPU-hours, the phases and the whole GPUs, not pricing a step again).

The walkthrough's cells that call the library's references (the ceilings, the simulator against the fixed point,
the fleet's levers, the knee's table, the published budgets' table) are demos: not run while grading. setup_1
(imports) runs as it is.
"""

from __future__ import annotations

import dataclasses
import math
import random

from servelab.analytic import capacity
from servelab.analytic.costmodel import A100_PCIE, H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, MISTRAL_7B
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch09
from servelab_autograder.exercises.spec import DEFAULT
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, unless_right

S = ch09.SPECS
case = ch09.case
# an H100 at a thousandth of its FLOP/s: one decode's compute already outlasts the weights' read
SLOW_GPU = dataclasses.replace(H100_SXM, name="H100 SXM at 1/1000 of its FLOP/s", peak_flops=H100_SXM.peak_flops / 1000)

FP8_KV = dataclasses.replace(LLAMA3_8B, name="Llama-3-8B, fp8 KV", bytes_per_kv_element=1)
FP8 = dataclasses.replace(LLAMA3_8B, name="Llama-3-8B, fp8 weights and KV", bytes_per_param=1, bytes_per_kv_element=1)
H100_DERATED = dataclasses.replace(H100_SXM, name="H100 at 70% of peak FLOPs, 85% of bandwidth",
                                   peak_flops=0.7 * H100_SXM.peak_flops, hbm_bandwidth=0.85 * H100_SXM.hbm_bandwidth)
MODELS = (LLAMA2_7B, LLAMA3_8B, FP8_KV, FP8)
GPUS = (H100_SXM, H200, H100_DERATED)


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch09.ASSIGNMENT) / f"{name}.diff").message


def _pick(rng: random.Random):
    return rng.choice(MODELS), rng.choice(GPUS)


# ------------------------------------------------------------------------------------------------
# kv_ceiling


def _kv_fixed():
    return [case("kv_ceiling", LLAMA3_8B, H100_SXM, 2048), case("kv_ceiling", LLAMA3_8B, H100_SXM, 256),
            case("kv_ceiling", LLAMA2_7B, H100_SXM, 4096),          # 512 KiB a token: 30 sequences
            case("kv_ceiling", LLAMA3_8B, H200, 2048, 0.95),
            case("kv_ceiling", LLAMA3_8B, H100_SXM, 500_000)]       # not even one sequence fits


def _kv_random(rng: random.Random):
    out = []
    for _ in range(100):
        model, gpu = _pick(rng)
        out.append(case("kv_ceiling", model, gpu, rng.choice([1, 128, 256, 1000, 2048, 4096, 8192, 32768,
                                                             rng.randint(1, 200_000)]),
                        rng.choice([0.92, 0.92, 0.5, 0.8, 0.95, 1.0])))
    return out


# ------------------------------------------------------------------------------------------------
# compute_ridge_batch


def _ridge_fixed():
    return [case("compute_ridge_batch", LLAMA3_8B, H100_SXM, 256),
            case("compute_ridge_batch", LLAMA3_8B, H100_SXM, 2048),
            case("compute_ridge_batch", LLAMA3_8B, H100_SXM, 0),     # no KV read at all: the weights alone
            case("compute_ridge_batch", LLAMA2_7B, H100_SXM, 64),
            case("compute_ridge_batch", FP8_KV, H200, 512),
            case("compute_ridge_batch", LLAMA2_7B, H100_SXM, 1024),   # MHA: no ridge at 1K already
            case("compute_ridge_batch", LLAMA3_8B, SLOW_GPU, 256)]      # compute-bound from one sequence: 1


def _ridge_random(rng: random.Random):
    out = []
    for _ in range(60):
        model, gpu = _pick(rng)
        out.append(case("compute_ridge_batch", model, gpu, rng.choice([0, 16, 64, 128, 256, 384, 512, 1024,
                                                                      rng.randint(0, 800), rng.randint(0, 8192)])))
    return out


# ------------------------------------------------------------------------------------------------
# resident_sequences


def _line(context: float, model=LLAMA3_8B, gpu=H100_SXM) -> tuple[float, float]:
    return capacity.step_line(model, gpu, context)


A319, B319 = _line(capacity.mean_context(64, 512))


def _resident_fixed():
    return [(50.0, 512, A319, B319), (100.0, 512, A319, B319), (200.0, 512, A319, B319),   # past the wall
            (0.0, 512, A319, B319), (10.0, 100, 0.005, 0.0),                               # no KV: N = rate L a
            (1.0, 1000, 0.004, 0.001),                                                     # exactly on the wall
            (30.0, 256, *_line(2047))]


def _resident_random(rng: random.Random):
    out = []
    for _ in range(150):
        a, b = rng.uniform(1e-3, 20e-3), rng.choice([0.0, rng.uniform(1e-6, 200e-6)])
        length = rng.choice([16, 100, 256, 512, 1000, 2048, rng.randint(1, 4096)])
        wall = 1 / (length * b) if b else 1000.0
        out.append((round(rng.uniform(0, 1.5) * wall, 6), length, a, b))
    return out


# ------------------------------------------------------------------------------------------------
# fleet_size


def _fleet_fixed():
    return [case("fleet_size", LLAMA3_8B, H100_SXM, 10e9, 0.5e9, 2000, 203),
            case("fleet_size", LLAMA3_8B, H100_SXM, 1e9, 1e9, 500, 64, 2048),     # chat-shaped: 1:1
            case("fleet_size", LLAMA3_8B, H200, 20e9, 0.2e9, 12000, 128),          # prompts longer than the budget
            case("fleet_size", LLAMA2_7B, H100_SXM, 2e9, 0.1e9, 1000, 32, 16384),
            case("fleet_size", LLAMA3_8B, H100_SXM, 1e8, 1e7, 1000, 128),         # under one GPU: still one
            # the budget left out: 8,193-token prompts take two chunks at 8,192 (one at 8,193), 16,384-token ones
            # two at 8,192 (three at 8,191)
            case("fleet_size", LLAMA3_8B, H100_SXM, 20e9, 0.2e9, 8193, 128, DEFAULT),
            case("fleet_size", LLAMA3_8B, H100_SXM, 20e9, 0.2e9, 16384, 128, DEFAULT)]


def _fleet_random(rng: random.Random):
    out = []
    for _ in range(40):
        model, gpu = _pick(rng)
        prompt = rng.choice([100, 500, 1000, 2000, 4000, 10000, rng.randint(16, 20000)])
        inp = rng.choice([1e8, 1e9, 5e9, 2e10, 1e11]) * rng.uniform(0.5, 2)
        out.append(case("fleet_size", model, gpu, round(inp), round(inp / rng.choice([1, 2, 5, 10, 20, 50])),
                        prompt, rng.choice([8, 32, 64, 128, 256]), rng.choice([2048, 4096, 8192, 16384])))
    return out


# ------------------------------------------------------------------------------------------------
# budget_knee


def _knee_fixed():
    return [case("budget_knee", LLAMA3_8B, H100_SXM, 64, 2048), case("budget_knee", LLAMA3_8B, H100_SXM, 0, 0),
            case("budget_knee", LLAMA3_8B, H100_SXM, 910, 256),     # the decodes alone just short: one token tips it
            case("budget_knee", LLAMA3_8B, H100_SXM, 128, 2048), case("budget_knee", LLAMA3_8B, H200, 32, 1024),
            case("budget_knee", LLAMA3_8B, H100_SXM, 1024, 16),            # the decodes alone are compute-bound
            case("budget_knee", LLAMA2_7B, H100_DERATED, 16, 4096)]


def _knee_random(rng: random.Random):
    out = []
    for _ in range(50):
        model, gpu = _pick(rng)
        out.append(case("budget_knee", model, gpu, rng.choice([0, 1, 8, 32, 64, 128, 256, rng.randint(0, 300)]),
                        rng.choice([0, 128, 512, 1024, 2048, 4096, rng.randint(0, 8192)])))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V = {v.name: v for v in ch09.DRILLS}    # each drill's numbers, drawn per learner


def _d3_line(n) -> tuple[float, float]:
    return capacity.step_line(LLAMA3_8B, H100_SXM, capacity.mean_context(n.prompt, n.output))


def _d4_args(n) -> tuple:
    return (LLAMA3_8B, H100_SXM, n.input_billions * 1e9, n.output_billions * 1e9, n.prompt, n.batch)


def _d4_context(n) -> int:
    """The decode batch's mean context, as fleet_size prices it: the prompt and half the output per request."""
    out = n.output_billions / (n.input_billions / n.prompt)
    return round(n.prompt + out / 2)


def _d5_costs(n) -> tuple[float, float]:
    return (capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, n.prompt),
            capacity.decode_s_per_token(LLAMA3_8B, H100_SXM, n.batch, n.context))


def _d7(n, context=None) -> int:
    return capacity.slo_budget(MISTRAL_7B, A100_PCIE, n.tbt_ms / 1e3, n.decodes, n.context if context is None else
                               context)


_H100_HINT = "That is the H100's answer: the H200 has the same compute, 141 GB instead of 80 and 4.8 TB/s."
_RIDGE_HINT = ("That is the H200's ridge point, a number of FLOPs per byte, not of sequences: each sequence also adds "
               "its KV to the bytes, so the batch where the step turns compute-bound is larger.")
_D2_TWICE_HINT = ("That is the batch at twice this context: here each sequence reads half that KV, so the compute "
                  "catches up with the bytes sooner.")
_KNEE_RIDGE_HINT = ("That is the H100's ridge point in FLOPs per byte: the knee is a number of tokens in the step, "
                    "decodes and chunk together.")
_D7_KV_HINT = ("That budget leaves out the decodes' KV reads: each decode reads its whole context every step, which "
               "takes time from the chunk.")
_D7_SARATHI_HINT = "That is the budget a paper ran with, not the largest one the target allows at the peaks."

DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V["drill_1"], answer=lambda n: capacity.kv_ceiling(LLAMA3_8B, H200, n.context),
          points=lambda n: (ServingPoint.decode(LLAMA3_8B, H200, capacity.kv_ceiling(LLAMA3_8B, H200, n.context),
                                                n.context - 1),),
          hints=lambda n: ((capacity.kv_ceiling(LLAMA3_8B, H100_SXM, n.context), _H100_HINT),
                           (int(0.92 * H200.memory_bytes // LLAMA3_8B.kv_bytes_per_token) // n.context,
                            _pitfall("kv_ignores_weights")))),
    Drill("drill_2", "", variant=V["drill_2"],
          answer=lambda n: capacity.compute_ridge_batch(LLAMA3_8B, H200, n.context),
          points=lambda n: (ServingPoint.decode(LLAMA3_8B, H200, capacity.compute_ridge_batch(LLAMA3_8B, H200,
                                                                                             n.context),
                                                n.context - 1),),
          hints=lambda n: unless_right(capacity.compute_ridge_batch(LLAMA3_8B, H200, n.context), (
              (capacity.compute_ridge_batch(LLAMA3_8B, H100_SXM, n.context), _H100_HINT),
              (capacity.compute_ridge_batch(LLAMA3_8B, H200, 2 * n.context), _D2_TWICE_HINT),
              (round(H200.ridge_flops_per_byte), _RIDGE_HINT)))),
    Drill("drill_3", "", variant=V["drill_3"],
          answer=lambda n: capacity.resident_sequences(n.rate, n.output, *_d3_line(n)), rel_tol=0.01,
          points=lambda n: (ServingPoint.decode(
              LLAMA3_8B, H100_SXM, math.ceil(capacity.resident_sequences(n.rate, n.output, *_d3_line(n))),
              round(capacity.mean_context(n.prompt, n.output))),),
          hints=lambda n: ((n.rate * n.output * sum(_d3_line(n)), _pitfall("resident_naive_step")),)),
    Drill("drill_4", "", variant=V["drill_4"], answer=lambda n: capacity.fleet_size(*_d4_args(n)).gpus,
          points=lambda n: (ServingPoint.decode(LLAMA3_8B, H100_SXM, n.batch, _d4_context(n)),),
          hints=lambda n: unless_right(capacity.fleet_size(*_d4_args(n)).gpus, (
              (math.ceil(capacity.fleet_size(*_d4_args(n)).decode_gpu_hours / 24), _pitfall("fleet_decode_only")),
              (math.floor(capacity.fleet_size(*_d4_args(n)).gpu_hours / 24), _pitfall("fleet_rounds_down"))))),
    Drill("drill_5", "", variant=V["drill_5"], answer=lambda n: capacity.prefill_share_ratio(0.75, *_d5_costs(n)),
          rel_tol=0.02, points=lambda n: (ServingPoint.decode(LLAMA3_8B, H100_SXM, n.batch, n.context),),
          hints=lambda n: ((3.0, _pitfall("drills_share_unweighted")),)),
    Drill("drill_6", "", variant=V["drill_6"],
          answer=lambda n: capacity.budget_knee(LLAMA3_8B, H100_SXM, n.decodes, n.context), rel_tol=0.005,
          points=lambda n: (ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(n.context,) * n.decodes,
                                         prefill_chunks=(capacity.budget_knee(LLAMA3_8B, H100_SXM, n.decodes,
                                                                              n.context) - n.decodes,)),),
          hints=lambda n: (
              (capacity.budget_knee(LLAMA3_8B, H100_SXM, n.decodes, 0), _pitfall("knee_ignores_decode_kv")),
              (capacity.budget_knee(LLAMA3_8B, H100_SXM, n.decodes, n.context) - n.decodes,
               _pitfall("knee_chunk_only")),
              (round(H100_SXM.ridge_flops_per_byte), _KNEE_RIDGE_HINT))),
    Drill("drill_7", "", variant=V["drill_7"], answer=_d7, abs_tol=1.5,
          points=lambda n: (ServingPoint(MISTRAL_7B, A100_PCIE, decode_contexts=(n.context,) * n.decodes,
                                         prefill_chunks=(_d7(n) - n.decodes,)),),
          hints=lambda n: unless_right(_d7(n), (
              (_d7(n) - n.decodes, _pitfall("knee_chunk_only")),
              (_d7(n, context=0), _D7_KV_HINT),
              (capacity.budget_knee(MISTRAL_7B, A100_PCIE, n.decodes, n.context), _pitfall("drills_slo_is_the_knee")),
              (512, _D7_SARATHI_HINT)))),
), read=lambda value, name: ch09.common.as_float(value, name, ch09.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch09.ASSIGNMENT,
    prelude="import dataclasses\nimport math\n\nfrom servelab.analytic import capacity, costmodel\n"
            "from servelab.analytic.costmodel import (A100_PCIE, DEFAULT_STEP_OVERHEAD_S, H100_SXM, H200, LLAMA2_7B, "
            "LLAMA3_8B, MISTRAL_7B)\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6", "setup_7", "setup_8", "setup_9"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.capacity:{n}" for n in (
        "kv_ceiling", "compute_ridge_batch", "running_ceilings", "resident_sequences", "fleet_size",
        "prefill_share_ratio", "budget_knee")),
    exercises=(
        Exercise(S["kv_ceiling"], "test_kv_ceiling", fixed=_kv_fixed, random=_kv_random),
        Exercise(S["compute_ridge_batch"], "test_compute_ridge_batch", fixed=_ridge_fixed, random=_ridge_random),
        Exercise(S["resident_sequences"], "test_resident_sequences", fixed=_resident_fixed, random=_resident_random),
        Exercise(S["fleet_size"], "test_fleet_size", fixed=_fleet_fixed, random=_fleet_random),
        Exercise(S["budget_knee"], "test_budget_knee", fixed=_knee_fixed, random=_knee_random),
    ),
    drills=DRILLS,
)

