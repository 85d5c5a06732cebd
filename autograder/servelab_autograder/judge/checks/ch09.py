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
from servelab_autograder import paths
from servelab_autograder.exercises import ch09
from servelab_autograder.exercises.spec import DEFAULT
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise

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

D1_CONTEXT = 3000
D2_CONTEXT = 128
D3_RATE, D3_PROMPT, D3_OUTPUT = 60.0, 64, 512
D4 = dict(input_tokens_per_day=100e9, output_tokens_per_day=2e9, prompt_len=4000, batch=96)   # 114 fit at 4080
D5_PROMPT, D5_BATCH, D5_CONTEXT = 4000, 96, 4096
D6_DECODES, D6_CONTEXT = 96, 4096
D7_TBT_S, D7_DECODES, D7_CONTEXT = 0.05, 64, 4096


def d3_line() -> tuple[float, float]:
    return capacity.step_line(LLAMA3_8B, H100_SXM, capacity.mean_context(D3_PROMPT, D3_OUTPUT))


def d5_costs() -> tuple[float, float]:
    return (capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, D5_PROMPT),
            capacity.decode_s_per_token(LLAMA3_8B, H100_SXM, D5_BATCH, D5_CONTEXT))


def _d4_plan():
    return capacity.fleet_size(LLAMA3_8B, H100_SXM, **D4)


_H100_HINT = "That is the H100's answer: the H200 has the same compute, 141 GB instead of 80 and 4.8 TB/s."
_RIDGE_HINT = ("That is the H200's ridge point, a number of FLOPs per byte, not of sequences: each sequence also adds "
               "its KV to the bytes, so the batch where the step turns compute-bound is larger.")
_SHARE_HINT = ("That is share / (1 - share) alone: weigh it by what a token costs in each phase, decode_s / "
               "prefill_s.")
_D2_256_HINT = ("That is the batch at 256 tokens of context: at 128 each sequence reads half the KV, so the "
                "compute catches up with the bytes sooner.")
_KNEE_RIDGE_HINT = ("That is the H100's ridge point in FLOPs per byte: the knee is a number of tokens in the step, "
                    "decodes and chunk together.")

_D7_KV_HINT = ("That budget leaves out the decodes' KV reads: each of the 64 reads its 4,096 tokens of context "
               "every step, which takes time from the chunk.")
_D7_SARATHI_HINT = "That is the budget a paper ran with, not the largest one the target allows at the peaks."

DRILLS = Drills("test_drills", (
    Drill("drill_1", f"sequences of {D1_CONTEXT} tokens each whose KV fits on one H200 next to Llama-3-8B (92% of "
          "the memory)", lambda: capacity.kv_ceiling(LLAMA3_8B, H200, D1_CONTEXT),
          hints=((capacity.kv_ceiling(LLAMA3_8B, H100_SXM, D1_CONTEXT), _H100_HINT),
                 (int(0.92 * H200.memory_bytes // LLAMA3_8B.kv_bytes_per_token) // D1_CONTEXT,
                  _pitfall("kv_ignores_weights")))),
    Drill("drill_2", f"smallest decode batch of Llama-3-8B on one H200, {D2_CONTEXT} tokens of context each, whose "
          "step is compute-bound", lambda: capacity.compute_ridge_batch(LLAMA3_8B, H200, D2_CONTEXT),
          hints=((capacity.compute_ridge_batch(LLAMA3_8B, H100_SXM, D2_CONTEXT), _H100_HINT),
                 (capacity.compute_ridge_batch(LLAMA3_8B, H200, 256), _D2_256_HINT),
                 (round(H200.ridge_flops_per_byte), _RIDGE_HINT))),
    Drill("drill_3", f"running sequences at {D3_RATE:g} requests/s of {D3_PROMPT}-token prompts and {D3_OUTPUT} output "
          "tokens, Llama-3-8B on one H100", lambda: capacity.resident_sequences(D3_RATE, D3_OUTPUT, *d3_line()),
          rel_tol=0.01, hints=((D3_RATE * D3_OUTPUT * sum(d3_line()), _pitfall("resident_naive_step")),)),
    Drill("drill_4", "H100s for 100 billion input and 2 billion output tokens a day, 4000-token prompts, decode batch "
          f"{D4['batch']}, 8192-token prefill steps, Llama-3-8B", lambda: _d4_plan().gpus,
          hints=((math.ceil(_d4_plan().decode_gpu_hours / 24), _pitfall("fleet_decode_only")),
                 (math.floor(_d4_plan().gpu_hours / 24), _pitfall("fleet_rounds_down")))),
    Drill("drill_5", f"input:output token ratio at which prefill is three quarters of the GPU time ({D5_PROMPT}-token "
          f"prompts in 8192-token steps, decode batch {D5_BATCH} at {D5_CONTEXT} tokens, Llama-3-8B on H100s)",
          lambda: capacity.prefill_share_ratio(0.75, *d5_costs()), rel_tol=0.02,
          hints=((3.0, _pitfall("drills_share_unweighted")),)),
    Drill("drill_6", f"token budget at which a step of {D6_DECODES} decodes at {D6_CONTEXT} tokens plus one prefill "
          "chunk turns compute-bound, Llama-3-8B on one H100",
          lambda: capacity.budget_knee(LLAMA3_8B, H100_SXM, D6_DECODES, D6_CONTEXT), rel_tol=0.005,
          hints=((capacity.budget_knee(LLAMA3_8B, H100_SXM, D6_DECODES, 0), _pitfall("knee_ignores_decode_kv")),
                 (capacity.budget_knee(LLAMA3_8B, H100_SXM, D6_DECODES, D6_CONTEXT) - D6_DECODES,
                  _pitfall("knee_chunk_only")),
                 (round(H100_SXM.ridge_flops_per_byte), _KNEE_RIDGE_HINT))),
    Drill("drill_7", f"largest token budget a {D7_TBT_S:g} s time-between-tokens target allows: {D7_DECODES} decodes "
          f"at {D7_CONTEXT} tokens plus one chunk of a new prompt, Mistral-7B on one A100 80GB PCIe at its peaks",
          lambda: capacity.slo_budget(MISTRAL_7B, A100_PCIE, D7_TBT_S, D7_DECODES, D7_CONTEXT), abs_tol=1.5,
          hints=((capacity.slo_budget(MISTRAL_7B, A100_PCIE, D7_TBT_S, D7_DECODES, D7_CONTEXT) - D7_DECODES,
                  _pitfall("knee_chunk_only")),
                 (capacity.slo_budget(MISTRAL_7B, A100_PCIE, D7_TBT_S, D7_DECODES, 0), _D7_KV_HINT),
                 (capacity.budget_knee(MISTRAL_7B, A100_PCIE, D7_DECODES, D7_CONTEXT),
                  _pitfall("drills_slo_is_the_knee")),
                 (512, _D7_SARATHI_HINT))),
), read=lambda value, name: ch09.common.as_float(value, name, ch09.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch09.ASSIGNMENT,
    prelude="import dataclasses\nimport math\n\nfrom servelab.analytic import capacity, costmodel\n"
            "from servelab.analytic.costmodel import (A100_PCIE, DEFAULT_STEP_OVERHEAD_S, H100_SXM, H200, LLAMA2_7B, "
            "LLAMA3_8B, MISTRAL_7B)\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6", "setup_7", "setup_8", "setup_9"),
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

