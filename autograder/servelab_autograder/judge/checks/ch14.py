"""Chapter 14's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch14.case`` (a model or a GPU as its fields).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- the four functions of ``servelab.analytic.disaggregation`` the exercises are (``tpot_stretch``,
  ``exposed_transfer_s``, ``break_even_bandwidth``, ``pd_pools``), and ``goodput_per_gpu``, which calls ``pd_pools``.
- ``costmodel`` stays whole (the exercises are written with ``step_time``), and so do ``split_ttft`` and
  ``decode_tpot`` (the queues' closed forms ``pd_pools`` searches over: the exercise is the search and the KV check),
  ``prefill_s``, ``kv_transfer_bytes`` and the links.

The walkthrough's cells that run the library or the simulator (the stretch picture, the transfer table, goodput and
the crossover, the simulator against the closed forms) are demos: not run while grading. setup_1 (imports) runs as
it is. The drills are drawn per learner (``exercises.variants``): ``setup_drills`` prints the learner's numbers, and
each drill is judged on the numbers of the student id being graded.
"""

from __future__ import annotations

import math
import random

from servelab.analytic import disaggregation as dg
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA31_8B, GPUSpec
from servelab.analytic.serving import ServingPoint
from servelab_autograder import paths
from servelab_autograder.exercises import ch14
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise

S = ch14.SPECS
case = ch14.case
M, G = LLAMA31_8B, H100_SXM
MODELS, GPUS = (LLAMA31_8B, LLAMA2_7B), (H100_SXM, H200)
RDMA = dg.RDMA_400G.bandwidth


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch14.ASSIGNMENT) / f"{name}.diff").message


def _prompt(rng: random.Random, model) -> int:
    top = min(8192, model.max_position_embeddings or 8192)
    return rng.choice([1, 512, 2000, 4000, rng.randint(1, top)])


# ------------------------------------------------------------------------------------------------
# tpot_stretch


def _stretch_fixed():
    return [case("tpot_stretch", M, G, 4000, 32, 4000), case("tpot_stretch", M, G, 256, 32, 4000),
            case("tpot_stretch", M, G, 4000, 64, 4000), case("tpot_stretch", M, G, 2000, 64, 3000),
            case("tpot_stretch", M, G, 0, 8, 1000),                   # no prefill: 1
            case("tpot_stretch", M, G, 8000, 1, 0),
            case("tpot_stretch", LLAMA2_7B, H200, 1024, 16, 2000)]


def _stretch_random(rng: random.Random):
    out = []
    for _ in range(100):
        model = rng.choice(MODELS)
        out.append(case("tpot_stretch", model, rng.choice(GPUS), rng.choice([0, 256, 1024, _prompt(rng, model)]),
                        rng.randint(1, 128), rng.choice([0, 1000, rng.randint(1, 4000)])))
    return out


# ------------------------------------------------------------------------------------------------
# exposed_transfer_s


def _transfer_fixed():
    return [case("exposed_transfer_s", M, G, 4000, RDMA, False), case("exposed_transfer_s", M, G, 4000, RDMA, True),
            case("exposed_transfer_s", LLAMA2_7B, G, 4000, 5e9, True),   # the link falls behind the prefill
            case("exposed_transfer_s", M, G, 0, RDMA, True), case("exposed_transfer_s", M, G, 0, RDMA, False),
            case("exposed_transfer_s", M, G, 6000, RDMA, False),
            case("exposed_transfer_s", M, G, 8000, 450e9, True), case("exposed_transfer_s", M, G, 1, 53e9, True),
            case("exposed_transfer_s", LLAMA2_7B, H200, 2000, 20e9, True)]


def _transfer_random(rng: random.Random):
    out = []
    for _ in range(100):
        model = rng.choice(MODELS)
        bw = rng.choice([450e9, 50e9, 53e9, 5e9, 1e9, rng.uniform(1e9, 500e9)])
        out.append(case("exposed_transfer_s", model, rng.choice(GPUS), rng.choice([0, _prompt(rng, model)]), bw,
                        rng.random() < 0.6))
    return out


# ------------------------------------------------------------------------------------------------
# break_even_bandwidth


def _break_even_fixed():
    return [case("break_even_bandwidth", M, G, 4000, 0.020, False),
            case("break_even_bandwidth", M, G, 4000, 0.020, True),
            case("break_even_bandwidth", M, G, 4000, 0.0005, True),   # shorter than a layer: the last layer sets it
            case("break_even_bandwidth", M, G, 8000, 0.015, True), case("break_even_bandwidth", M, G, 1, 0.001, True),
            case("break_even_bandwidth", LLAMA2_7B, H200, 2000, 0.005, True),
            case("break_even_bandwidth", LLAMA2_7B, G, 4000, 0.3, False),
            # small answers with a fractional part, for each branch and each term of the max
            case("break_even_bandwidth", M, G, 1, 0.3, False), case("break_even_bandwidth", M, G, 1, 0.00007, True),
            case("break_even_bandwidth", M, G, 4000, 0.0007, True)]


def _break_even_random(rng: random.Random):
    out = []
    for _ in range(100):
        model = rng.choice(MODELS)
        budget = round(rng.choice([0.0002, 0.001, 0.005, 0.02, 0.05, rng.uniform(0.0001, 0.1)]), 6)
        out.append(case("break_even_bandwidth", model, rng.choice(GPUS), rng.randint(1, 8000), budget,
                         rng.random() < 0.6))
    return out


# ------------------------------------------------------------------------------------------------
# pd_pools


def _pools_fixed():
    return [case("pd_pools", M, G, 100.0, 4000, 256, 0.2, 0.012, 50e9),
            case("pd_pools", M, G, 60.0, 8000, 256, 0.5, 0.030, 50e9),      # utilization below 1 still queues
            case("pd_pools", M, G, 40.0, 8000, 1024, 1.0, 0.050, 50e9),     # the KV cache binds
            case("pd_pools", M, G, 1.0, 500, 64, 1.0, 0.020, 50e9),         # one of each
            case("pd_pools", LLAMA2_7B, H200, 20.0, 2000, 512, 0.5, 0.040, 5e9),
            case("pd_pools", M, G, 100.0, 1000, 256, 0.2, 0.012, 450e9),
            case("pd_pools", M, G, 10000.0, 8000, 256, 0.5, 0.030, 50e9),   # a fleet of thousands: search on
            # each target met exactly ("at most"): the TTFT, the TPOT, the KV (a rate tuned to the last bit)
            case("pd_pools", M, G, 100.0, 4000, 256, dg.split_ttft(M, G, 100.0 / 8, 4000, 50e9), 0.012, 50e9),
            case("pd_pools", M, G, 100.0, 4000, 256, 0.2, dg.decode_tpot(M, G, 100.0 / 8, 4000, 256)[0], 50e9),
            case("pd_pools", M, G, 18.575473748998935, 4000, 256, 0.5, 0.030, 50e9)]


def _pools_random(rng: random.Random):
    out = []
    while len(out) < 25:
        model, gpu = rng.choice(MODELS), rng.choice(GPUS)
        prompt, output = rng.choice([500, 2000, 4000, rng.randint(100, 4000)]), rng.choice([64, 256, 1024])
        rate = round(rng.choice([1.0, 10.0, 40.0, rng.uniform(0.5, 60.0)]), 3)
        ttft = round(rng.uniform(1.5, 6.0) * dg.split_ttft(model, gpu, 0.0, prompt, RDMA), 4)
        tpot = round(rng.uniform(1.2, 5.0) * dg.decode_tpot(model, gpu, 0.0, prompt, output)[0], 5)
        if prompt + output > min(model.max_position_embeddings, dg.costmodel.kv_capacity_tokens(model, gpu) // 4):
            continue
        out.append(case("pd_pools", model, gpu, rate, prompt, output, ttft, tpot, RDMA))
    return out


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V1, V2, V3, V4 = ch14.DRILLS     # each drill's numbers, drawn per learner


def _stretch_as_two_steps(model, gpu: GPUSpec, chunk, decodes, ctx) -> float:
    c = dg.costmodel
    lens = [ctx] * decodes
    return (c.step_time(model, gpu, prefill_tokens=chunk) + c.step_time(model, gpu, decode_context_lens=lens)) \
        / c.step_time(model, gpu, decode_context_lens=lens)


def _d4(n) -> tuple:
    return (float(n.rate), n.prompt, n.output, 1.0, n.tpot_ms / 1e3, 50e9)


def _pools_without_kv(n) -> int:
    rate, prompt, output, _, tpot, _ = _d4(n)
    k = 1
    while dg.decode_tpot(M, G, rate / k, prompt, output)[0] > tpot:
        k += 1
    return k


def _decode_point(n) -> ServingPoint:
    """A decode GPU's step at its mean running batch (rounded up) and mean context, as the claims check it."""
    rate, prompt, output, *_ = _d4(n)
    running = dg.decode_tpot(M, G, rate / dg.pd_pools(M, G, *_d4(n))[1], prompt, output)[1]
    return ServingPoint.decode(M, G, math.ceil(running), prompt + (output - 2) // 2)


def _d1(n, link=RDMA) -> float:
    return dg.exposed_transfer_s(M, G, n.prompt, link, False) * 1e3


def _d3(n, layerwise=True) -> float:
    return dg.break_even_bandwidth(M, G, n.prompt, n.budget_ms / 1e3, layerwise) / 1e9


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V1, answer=_d1, rel_tol=0.002,
          points=lambda n: (ServingPoint(M, G, prefill_chunks=(n.prompt,)),),
          hints=lambda n: ((_d1(n, 400e9), _pitfall("drills_bits_for_bytes")),
                           (2 * _d1(n), _pitfall("transfer_round_trip")),
                           (_d1(n) / 1e3, "That is seconds: the drill asks for ms."))),
    Drill("drill_2", "", variant=V2, answer=lambda n: dg.tpot_stretch(M, G, n.chunk, n.decodes, n.context),
          rel_tol=0.002,
          points=lambda n: (ServingPoint(M, G, decode_contexts=(n.context,) * n.decodes, prefill_chunks=(n.chunk,)),),
          hints=lambda n: ((_stretch_as_two_steps(M, G, n.chunk, n.decodes, n.context),
                            _pitfall("stretch_sums_steps")),)),
    Drill("drill_3", "", variant=V3, answer=_d3, rel_tol=0.005,
          points=lambda n: (ServingPoint(M, G, prefill_chunks=(n.prompt,)),),
          hints=lambda n: ((_d3(n, False), _pitfall("breakeven_ignores_overlap")),
                           (2 * _d3(n), _pitfall("transfer_round_trip")))),
    Drill("drill_4", "", variant=V4, answer=lambda n: dg.pd_pools(M, G, *_d4(n))[1],
          points=lambda n: (_decode_point(n),),
          hints=lambda n: ((_pools_without_kv(n), _pitfall("pools_ignore_kv")),)),
), read=lambda value, name: ch14.common.as_float(value, name, ch14.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch14.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\nfrom servelab.analytic import costmodel, disaggregation\n"
            "from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA31_8B\n"
            "from servelab.analytic.disaggregation import LINKS, RDMA_400G\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.disaggregation:{n}" for n in (
        "tpot_stretch", "exposed_transfer_s", "break_even_bandwidth", "pd_pools", "goodput_per_gpu")),
    exercises=(
        Exercise(S["tpot_stretch"], "test_tpot_stretch", fixed=_stretch_fixed, random=_stretch_random),
        Exercise(S["exposed_transfer_s"], "test_exposed_transfer_s", fixed=_transfer_fixed, random=_transfer_random),
        Exercise(S["break_even_bandwidth"], "test_break_even_bandwidth", fixed=_break_even_fixed,
                 random=_break_even_random),
        Exercise(S["pd_pools"], "test_pd_pools", fixed=_pools_fixed, random=_pools_random),
    ),
    drills=DRILLS,
)
