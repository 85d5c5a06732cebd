"""Chapter 16's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch16.case`` (a model or a GPU as its fields, capture sizes as a list).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- the four functions of ``servelab.analytic.parallelism`` the exercises are (``tp_comm_s``, ``kv_tokens_per_degree``,
  ``pad_to_graph``, ``all_to_all_bytes``).
- ``serving`` stays whole (its ``all_reduce_s`` and ``check`` price the walkthrough's steps; an exercise written with
  ``serving.all_reduce_s`` is still right), and so do ``costmodel``, ``ModelSpec.shard``,
  ``capacity.cudagraph_capture_sizes`` and the rest of ``parallelism`` (``tp_decode``, ``graph_step``,
  ``launch_overhead_s``, ``bubble_fraction``, ``expert_ridge_tokens``, ``mla_group_kv_tokens``, which the demos use).

The walkthrough's cells that run the library or the simulator are demos: not run while grading. setup_1 (imports)
runs as it is. The drills are drawn per learner (``exercises.variants``): ``setup_drills`` prints the learner's
numbers, and each drill is judged on the numbers of the student id being graded.
"""

from __future__ import annotations

import random

from servelab.analytic import capacity, serving
from servelab.analytic import parallelism as par
from servelab.analytic.costmodel import DEEPSEEK_V3, H100_SXM, H200, LLAMA2_7B, LLAMA31_8B, MIXTRAL_8X7B
from servelab_autograder import paths
from servelab_autograder.exercises import ch16
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise, no_point

S = ch16.SPECS
case = ch16.case
M70, M8, G = par.LLAMA31_70B, LLAMA31_8B, H100_SXM
NV, RDMA = par.NVLINK_H100.bandwidth, par.RDMA_400G.bandwidth
LAT = par.DEFAULT_LINK_LATENCY_S
SIZES = capacity.cudagraph_capture_sizes(1024, 8192)     # vLLM 0.33.0's defaults on an H100


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch16.ASSIGNMENT) / f"{name}.diff").message


def _degrees(model) -> list[int]:
    """The TP degrees `model` splits into (`ModelSpec.shard` raises on the others)."""
    out = []
    for tp in (1, 2, 4, 8, 16, 32):
        try:
            model.shard(tp)
        except ValueError:
            continue
        out.append(tp)
    return out


# ------------------------------------------------------------------------------------------------
# tp_comm_s


def _comm_fixed():
    return [case("tp_comm_s", M70, 64, 8, NV, LAT), case("tp_comm_s", M8, 256, 4, NV, LAT),
            case("tp_comm_s", M8, 64, 1, NV, LAT),                  # one GPU: nothing to reduce
            case("tp_comm_s", M8, 1, 2, NV, LAT), case("tp_comm_s", M70, 8192, 8, NV, 0.0),   # bandwidth alone
            case("tp_comm_s", M70, 0, 8, NV, LAT),                  # latency alone
            case("tp_comm_s", M70, 64, 16, RDMA, LAT), case("tp_comm_s", LLAMA2_7B, 512, 2, RDMA, 5e-6),
            case("tp_comm_s", M8, 4096, 8, NV, 1e-5)]


def _comm_random(rng: random.Random):
    out = []
    for _ in range(100):
        model = rng.choice((M8, M70, LLAMA2_7B, MIXTRAL_8X7B))
        out.append(case("tp_comm_s", model, rng.choice([0, 1, 64, 256, rng.randint(1, 8192)]),
                        rng.choice([1, 2, 4, 8, 16, rng.randint(1, 64)]),
                        rng.choice([NV, RDMA, rng.uniform(10e9, 900e9)]),
                        rng.choice([0.0, LAT, rng.uniform(0, 2e-5)])))
    return out


# ------------------------------------------------------------------------------------------------
# kv_tokens_per_degree


def _kv_fixed():
    return [case("kv_tokens_per_degree", M70, G, 4), case("kv_tokens_per_degree", M70, G, 8),
            case("kv_tokens_per_degree", M70, G, 16),             # 8 KV heads on 16 GPUs: each copied twice
            case("kv_tokens_per_degree", M70, G, 2), case("kv_tokens_per_degree", M8, G, 1),
            case("kv_tokens_per_degree", M8, G, 16), case("kv_tokens_per_degree", M8, G, 32),
            case("kv_tokens_per_degree", M70, H200, 4), case("kv_tokens_per_degree", LLAMA2_7B, G, 8),
            case("kv_tokens_per_degree", MIXTRAL_8X7B, G, 8)]


def _kv_random(rng: random.Random):
    out = []
    while len(out) < 60:
        model, gpu = rng.choice((M8, M70, LLAMA2_7B, MIXTRAL_8X7B)), rng.choice((G, H200))
        tp = rng.choice(_degrees(model))
        try:
            par.kv_tokens_per_degree(model, gpu, tp)
        except ValueError:
            continue                 # nothing fits: no case
        out.append(case("kv_tokens_per_degree", model, gpu, tp))
    return out


# ------------------------------------------------------------------------------------------------
# pad_to_graph


def _pad_fixed():
    return [case("pad_to_graph", 257, SIZES), case("pad_to_graph", 513, SIZES), case("pad_to_graph", 512, SIZES),
            case("pad_to_graph", 1, SIZES), case("pad_to_graph", 3, SIZES), case("pad_to_graph", 100, SIZES),
            case("pad_to_graph", 261, SIZES), case("pad_to_graph", 9, [16, 8, 4, 32]),     # any order
            case("pad_to_graph", 33, [16, 8, 4, 32]), case("pad_to_graph", 5, [5]), case("pad_to_graph", 6, [5])]


def _pad_random(rng: random.Random):
    out = []
    for _ in range(100):
        if rng.random() < 0.5:
            sizes = capacity.cudagraph_capture_sizes(rng.choice([64, 128, 256, 1024]), rng.choice([2048, 8192]))
        else:
            sizes = rng.sample(range(1, 600), rng.randint(1, 12))
        n = rng.choice([1, max(sizes), max(sizes) + 1, rng.choice(sizes), rng.randint(1, 700)])
        out.append(case("pad_to_graph", n, sizes))
    return out


# ------------------------------------------------------------------------------------------------
# all_to_all_bytes


def _a2a_fixed():
    return [case("all_to_all_bytes", 128, 7168, 8, 8, 2), case("all_to_all_bytes", 1, 7168, 8, 8, 2),
            case("all_to_all_bytes", 64, 4096, 2, 8, 2), case("all_to_all_bytes", 64, 4096, 2, 1, 2),   # one GPU
            case("all_to_all_bytes", 0, 4096, 2, 8, 2), case("all_to_all_bytes", 256, 7168, 8, 32, 1),
            case("all_to_all_bytes", 3, 5, 1, 2, 2)]


def _a2a_random(rng: random.Random):
    return [case("all_to_all_bytes", rng.choice([0, 1, 64, rng.randint(1, 4096)]), rng.choice([4096, 7168, 8192]),
                 rng.choice([1, 2, 6, 8]), rng.choice([1, 2, 4, 8, 16, 32, 64, rng.randint(1, 256)]),
                 rng.choice([1, 2])) for _ in range(100)]


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V1, V2, V3, V4, V5 = ch16.DRILLS     # each drill's numbers, drawn per learner
GPUS = {"H100": H100_SXM, "H200": H200}


def _kv_point(n) -> tuple:
    """The cache at TP n.tp on H200s, full: max_num_seqs sequences decoding, the rest of the KV held."""
    cap = par.kv_tokens_per_degree(M70, H200, n.tp)
    run, context = 1024, cap // 1024
    return (serving.ServingPoint.decode(M70, H200, run, context - 1, resident_tokens=cap - run * context, tp=n.tp,
                                        link=par.NVLINK_H100 if n.tp <= 8 else par.RDMA_400G),)


def _comm_ms(n, latency=LAT) -> float:
    return par.tp_comm_s(M8, n.tokens, n.tp, NV, latency) * 1e3


def _d5(n) -> tuple:
    return serving.priced(DEEPSEEK_V3, GPUS[n.gpu], n.dtype)


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V1, answer=_comm_ms, rel_tol=0.002,
          points=lambda n: (serving.ServingPoint(M8, G, prefill_chunks=(n.tokens,), tp=n.tp),),
          hints=lambda n: ((_comm_ms(n) / 2, _pitfall("comm_one_all_reduce_a_layer")),
                           (_comm_ms(n) / 1e3, "That is seconds: the drill asks for ms."))),
    Drill("drill_2", "", variant=V2, answer=lambda n: par.kv_tokens_per_degree(M70, H200, n.tp), points=_kv_point,
          hints=lambda n: ((par.kv_tokens_per_degree(M70, H200, n.tp) * n.tp, _pitfall("kv_tokens_times_gpus")),)),
    Drill("drill_3", "", variant=V3, answer=lambda n: par.bubble_fraction(n.stages, n.microbatches), rel_tol=0.002,
          points=no_point,
          hints=lambda n: (((n.stages - 1) / n.microbatches, "The pipeline fills and drains: p - 1 of the m + p - 1 "
                                                             "slots idle, not (p - 1) / m."),)),
    Drill("drill_4", "", variant=V4, answer=lambda n: par.pad_to_graph(n.batch, SIZES) - n.batch,
          points=lambda n: (serving.ServingPoint.decode(M8, G, n.batch, 512),),
          hints=lambda n: ((max(s for s in SIZES if s <= n.batch) - n.batch, _pitfall("pad_rounds_down")),)),
    Drill("drill_5", "", variant=V5, answer=lambda n: par.expert_ridge_tokens(*_d5(n)), points=no_point,
          hints=lambda n: ((_d5(n)[1].ridge_flops_per_byte * _d5(n)[0].bytes_per_param / 2,
                            _pitfall("drills_dense_ridge")),)),
), read=lambda value, name: ch16.common.as_float(value, name, ch16.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch16.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\nfrom servelab.analytic import capacity, costmodel, parallelism, "
            "serving\nfrom servelab.analytic.costmodel import DEEPSEEK_V3, H100_SXM, H200, LLAMA31_8B\n"
            "from servelab.analytic.parallelism import LLAMA31_70B, NVLINK_H100, RDMA_400G\n"
            "from servelab.analytic.specs import DEFAULT_LINK_LATENCY_S\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6", "setup_7", "setup_8"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.parallelism:{n}" for n in (
        "tp_comm_s", "kv_tokens_per_degree", "pad_to_graph", "all_to_all_bytes")),
    exercises=(
        Exercise(S["tp_comm_s"], "test_tp_comm_s", fixed=_comm_fixed, random=_comm_random),
        Exercise(S["kv_tokens_per_degree"], "test_kv_tokens_per_degree", fixed=_kv_fixed, random=_kv_random),
        Exercise(S["pad_to_graph"], "test_pad_to_graph", fixed=_pad_fixed, random=_pad_random),
        Exercise(S["all_to_all_bytes"], "test_all_to_all_bytes", fixed=_a2a_fixed, random=_a2a_random),
    ),
    drills=DRILLS,
)
