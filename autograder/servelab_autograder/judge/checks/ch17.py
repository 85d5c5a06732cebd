"""Chapter 17's grading table: each test cell, the exercise it grades and its cases; the drills' answers.

Fixed cases come first (the notebook's and the visible asserts', then one for each pitfall, then edge cases): the
pitfall atlas of the learner-facing module is made from them. The random ones are drawn from the run's seed.
Arguments are plain data made by ``ch17.case`` (a model as its fields).

What the sandbox's library lacks while this chapter grades (``references``), and what stays:

- the four functions of ``servelab.analytic.moe_mla`` the exercises are (``int4_weight_bytes``, ``experts_touched``,
  ``step_weight_bytes``, ``kv_bytes_per_gpu``).
- ``moe_mla.sixteen_bit_params`` stays (Exercise 1 is the bytes, given which parameters stay 16-bit), and so do the
  serving model and ``ModelSpec`` whole: the walkthrough prices every step with them.

The walkthrough's cells that run the library or the simulator (the weights-read picture, the dtype table, the MoE
steps, the sampled routing, the MLA table) are demos: not run while grading. setup_1 (imports) runs as it is; the
fp8 DeepSeek-V3 the visible asserts use (``DS_FP8``) comes from the prelude. The drills are drawn per learner
(``exercises.variants``): ``setup_drills`` prints the learner's numbers, and each drill is judged on the numbers of
the student id being graded.
"""

from __future__ import annotations

import dataclasses
import random

from servelab.analytic import moe_mla as mm
from servelab.analytic import serving
from servelab.analytic.serving import ServingPoint
from servelab.analytic.specs import DEEPSEEK_V3, H200, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B, MIXTRAL_8X7B
from servelab_autograder import paths
from servelab_autograder.exercises import ch17
from servelab_autograder.judge import known_wrong
from servelab_autograder.judge.verdicts import Chapter, Drill, Drills, Exercise

S = ch17.SPECS
case = ch17.case
DS_FP8 = serving.priced(DEEPSEEK_V3, H200, weight_dtype="fp8")[0]
GQA8 = mm.attention_variant(DEEPSEEK_V3, 8)
MHA = mm.attention_variant(DEEPSEEK_V3, 128)
TIED = dataclasses.replace(LLAMA3_8B, name="Llama-3-8B, tied", tie_word_embeddings=True)
# a small MoE with dense first layers, MLA and odd sizes, so no case hides behind a preset's round numbers
SMALL_MLA_MOE = dataclasses.replace(DEEPSEEK_V3, name="a small MLA MoE", num_layers=7, hidden_size=1024, num_heads=16,
                                    num_kv_heads=16, intermediate_size=2816, vocab_size=32003, num_experts=24,
                                    experts_per_token=3, moe_intermediate_size=352, num_shared_experts=2,
                                    first_k_dense_layers=2, kv_lora_rank=160, q_lora_rank=0, qk_rope_head_dim=32,
                                    head_dim=96, v_head_dim=64)

# a toy model of a few hundred bytes, so a result's fractional byte is not lost in a float's last digits
TINY = dataclasses.replace(LLAMA3_8B, name="a toy model", num_layers=1, hidden_size=8, num_heads=2, num_kv_heads=1,
                           head_dim=4, intermediate_size=12, vocab_size=3)


def _dtype(model, w="bf16", kv="bf16"):
    return serving.priced(model, H200, weight_dtype=w, kv_dtype=kv)[0]


MODELS = (LLAMA3_8B, LLAMA2_7B, MIXTRAL_8X7B, DEEPSEEK_V3, DS_FP8, TIED, SMALL_MLA_MOE, GQA8,
          _dtype(MIXTRAL_8X7B, "fp8"), _dtype(DEEPSEEK_V3.shard(8), "fp8"), MIXTRAL_8X7B.shard(2))
KV_MODELS = (LLAMA3_8B, LLAMA2_7B, LLAMA31_8B, MIXTRAL_8X7B, DEEPSEEK_V3, GQA8, MHA, SMALL_MLA_MOE,
             _dtype(DEEPSEEK_V3, kv="fp8"), _dtype(LLAMA3_8B, kv="fp8"))


def _pitfall(name: str) -> str:
    """A pitfall's message as its patch writes it (a drill's wrong answer that the exercise's mistake makes)."""
    return known_wrong.load(known_wrong.folder(paths.repo_root(), ch17.ASSIGNMENT) / f"{name}.diff").message


# ------------------------------------------------------------------------------------------------
# int4_weight_bytes


def _int4_fixed():
    return [case("int4_weight_bytes", LLAMA3_8B, 128), case("int4_weight_bytes", MIXTRAL_8X7B, 128),
            case("int4_weight_bytes", LLAMA3_8B, 32), case("int4_weight_bytes", DEEPSEEK_V3, 128),
            case("int4_weight_bytes", TIED, 128), case("int4_weight_bytes", SMALL_MLA_MOE, 64),
            case("int4_weight_bytes", LLAMA2_7B, 1), case("int4_weight_bytes", LLAMA3_8B, 7),
            case("int4_weight_bytes", TINY, 7), case("int4_weight_bytes", TINY, 3)]


def _int4_random(rng: random.Random):
    return [case("int4_weight_bytes", rng.choice(MODELS + (GQA8, MHA)),
                 rng.choice([32, 64, 128, 256, rng.randint(1, 4096)])) for _ in range(60)]


# ------------------------------------------------------------------------------------------------
# experts_touched


def _touched_fixed():
    return [case("experts_touched", *args) for args in (
        (256, 8, 64), (8, 2, 1), (8, 2, 8), (256, 8, 0), (256, 8, 16), (256, 8, 32), (8, 8, 3), (1, 1, 5), (160, 6, 1),
        (64, 4, 1000), (8, 2, 2))]


def _touched_random(rng: random.Random):
    out = []
    for _ in range(100):
        e = rng.choice([8, 16, 64, 128, 160, 256, rng.randint(1, 300)])
        out.append(case("experts_touched", e, rng.randint(1, min(e, 12)), rng.choice([0, 1, 2, rng.randint(1, 2048)])))
    return out


# ------------------------------------------------------------------------------------------------
# step_weight_bytes


def _step_fixed():
    return [case("step_weight_bytes", MIXTRAL_8X7B, 1), case("step_weight_bytes", MIXTRAL_8X7B, 8),
            case("step_weight_bytes", DS_FP8, 64), case("step_weight_bytes", LLAMA3_8B, 1),
            case("step_weight_bytes", MIXTRAL_8X7B, 4), case("step_weight_bytes", DEEPSEEK_V3, 1),
            case("step_weight_bytes", SMALL_MLA_MOE, 5), case("step_weight_bytes", DEEPSEEK_V3, 100_000),
            case("step_weight_bytes", LLAMA2_7B, 300)]


def _step_random(rng: random.Random):
    return [case("step_weight_bytes", rng.choice(MODELS), rng.choice([1, 2, 8, 64, rng.randint(1, 4096)]))
            for _ in range(80)]


# ------------------------------------------------------------------------------------------------
# kv_bytes_per_gpu


def _kv_fixed():
    return [case("kv_bytes_per_gpu", DEEPSEEK_V3, 1), case("kv_bytes_per_gpu", DEEPSEEK_V3, 8),
            case("kv_bytes_per_gpu", LLAMA3_8B, 1), case("kv_bytes_per_gpu", LLAMA3_8B, 16),
            case("kv_bytes_per_gpu", LLAMA2_7B, 4), case("kv_bytes_per_gpu", GQA8, 8), case("kv_bytes_per_gpu", MHA, 8),
            case("kv_bytes_per_gpu", SMALL_MLA_MOE, 4), case("kv_bytes_per_gpu", MIXTRAL_8X7B, 32),
            case("kv_bytes_per_gpu", _dtype(DEEPSEEK_V3, kv="fp8"), 2), case("kv_bytes_per_gpu", LLAMA3_8B, 3)]


def _kv_random(rng: random.Random):
    return [case("kv_bytes_per_gpu", rng.choice(KV_MODELS), rng.choice([1, 2, 4, 8, 16, 32, rng.randint(1, 64)]))
            for _ in range(80)]


# ------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the library

V1, V2, V3, V4 = ch17.DRILLS     # each drill's numbers, drawn per learner


def _ds_kv(n):
    return serving.priced(DEEPSEEK_V3, H200, kv_dtype=n.kv_dtype)[0]


def _d3(n, divide=1024) -> float:
    return mm.kv_bytes_per_gpu(_ds_kv(n), n.tp) / divide


def _sixteen(model) -> int:
    return mm.sixteen_bit_params(model)


DRILLS = Drills("test_drills", (
    Drill("drill_1", "", variant=V1, answer=lambda n: mm.experts_touched(256, 8, n.batch), rel_tol=0.002,
          points=lambda n: (ServingPoint.decode(DEEPSEEK_V3, H200, n.batch, 2048, weight_dtype="fp8", tp=8),),
          hints=lambda n: ((min(256, n.batch * 8), _pitfall("touched_ignores_collisions")),
                           (256 * (1 - (1 - 1 / 256) ** (n.batch * 8)), _pitfall("touched_picks_repeat")))),
    Drill("drill_2", "", variant=V2, answer=lambda n: mm.step_weight_bytes(MIXTRAL_8X7B, n.batch) / 1e9,
          rel_tol=0.002, points=lambda n: (ServingPoint.decode(MIXTRAL_8X7B, H200, n.batch, 2048),),
          hints=lambda n: ((MIXTRAL_8X7B.active_params * 2 / 1e9, _pitfall("step_reads_active_only")),
                           (MIXTRAL_8X7B.weight_bytes / 1e9,
                            "That is all the weights: so few tokens touch fewer than 8 experts."))),
    Drill("drill_3", "", variant=V3, answer=_d3, rel_tol=0.002,
          points=lambda n: (ServingPoint.decode(DEEPSEEK_V3, H200, 1, 2048, weight_dtype="fp8", kv_dtype=n.kv_dtype,
                                                tp=n.tp),),
          hints=lambda n: ((_d3(n) / n.tp, _pitfall("kv_latent_split_by_tp")),
                           (2 * _d3(n), _pitfall("kv_latent_as_k_and_v")),
                           (_d3(n, 1000), _pitfall("drills_kib_as_1000")))),
    Drill("drill_4", "", variant=V4, answer=lambda n: mm.int4_weight_bytes(MIXTRAL_8X7B, n.group) / 1e9,
          rel_tol=0.001, points=lambda n: (ServingPoint.decode(MIXTRAL_8X7B, H200, 1, 2048, weight_dtype="int4"),),
          hints=lambda n: ((MIXTRAL_8X7B.param_count * (0.5 + 2.5 / n.group) / 1e9, _pitfall("int4_quantizes_lm_head")),
                           ((MIXTRAL_8X7B.param_count - _sixteen(MIXTRAL_8X7B)) * 0.5 / 1e9
                            + 2 * _sixteen(MIXTRAL_8X7B) / 1e9, _pitfall("int4_no_group_scales")),
                           (MIXTRAL_8X7B.param_count * 0.5 / 1e9,
                            "Half a byte a parameter is the serving model's plain figure: add the group scales and the "
                            "16-bit rest."))),
), read=lambda value, name: ch17.common.as_float(value, name, ch17.common.short_repr(12, 120), finite=True))


CHAPTER = Chapter(
    assignment=ch17.ASSIGNMENT,
    prelude="import math\n\nimport numpy as np\n\n"
            "from servelab.analytic import capacity, costmodel, disaggregation, kv_tiers, moe_mla, serving\n"
            "from servelab.analytic.specs import DEEPSEEK_V3, H100_SXM, H200, LLAMA3_8B, MIXTRAL_8X7B\n"
            "DS_FP8 = serving.priced(DEEPSEEK_V3, H200, weight_dtype=\"fp8\")[0]\n",
    demos=("setup_2", "setup_3", "setup_4", "setup_5", "setup_6"),
    setup=("setup_drills",),
    references=tuple(f"servelab.analytic.moe_mla:{n}" for n in (
        "int4_weight_bytes", "experts_touched", "step_weight_bytes", "kv_bytes_per_gpu")),
    exercises=(
        Exercise(S["int4_weight_bytes"], "test_int4_weight_bytes", fixed=_int4_fixed, random=_int4_random),
        Exercise(S["experts_touched"], "test_experts_touched", fixed=_touched_fixed, random=_touched_random),
        Exercise(S["step_weight_bytes"], "test_step_weight_bytes", fixed=_step_fixed, random=_step_random),
        Exercise(S["kv_bytes_per_gpu"], "test_kv_bytes_per_gpu", fixed=_kv_fixed, random=_kv_random),
    ),
    drills=DRILLS,
)
