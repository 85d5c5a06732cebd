"""Chapter 17's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.moe_mla`, how its result is
read (converted to a plain ``float``, never compared as the learner built it) and shown. A model crosses to the
learner's kernel as the dict of its fields (:func:`case`); a driver (``drive_model``) rebuilds the ``ModelSpec``
there and calls the function once; the reference goes through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch17``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import moe_mla
from servelab.analytic.costmodel import ModelSpec
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Spec

ASSIGNMENT = "ch17_quantization_moe_mla"
_short = common.short_repr(12, 120)


def drive_model(fn, model, *rest):
    return fn(ModelSpec(**model), *rest)


def _number(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _gb(x: float) -> str:
    return f"{x / 1e9:.9g} GB"


def _int4_note(args, got, want) -> str:
    model, group_size = args
    m = ModelSpec(**model)
    keep = moe_mla.sixteen_bit_params(m)
    return (f"\n  {m.param_count - keep:,} matmul weights at 4 bits plus their group scales; {keep:,} parameters "
            f"(embedding, LM head, norms, routers) stay 16-bit")


def _touched_note(args, got, want) -> str:
    e, k, n = args
    return f"\n  a token picks {k} of {e}; {n} tokens make {n * k:,} picks, and picks of one expert repeat"


def _bytes_note(args, got, want) -> str:
    model, n = args
    m = ModelSpec(**model)
    if not m.num_experts:
        return "\n  a dense model: every weight is read every step"
    return (f"\n  {m.num_layers - m.first_k_dense_layers} MoE layers of {m.num_experts} routed experts, "
            f"{3 * m.hidden_size * m.moe_intermediate_size * m.bytes_per_param / 1e6:.6g} MB each")


def _kv_note(args, got, want) -> str:
    model, tp = args
    m = ModelSpec(**model)
    if m.kv_lora_rank:
        return f"\n  MLA: a latent of {m.kv_lora_rank} and a rotary key of {m.qk_rope_head_dim} a layer"
    return f"\n  {m.num_kv_heads} KV heads of {m.head_dim} over {tp} GPU(s)"


_MODEL = {"model": _name}
SPECS = {s.name: s for s in [
    Spec("int4_weight_bytes", ("model", "group_size"), moe_mla.int4_weight_bytes, _number, _gb, _close,
         show_args=_MODEL, note=_int4_note, driver=f"{__name__}:drive_model"),
    Spec("experts_touched", ("num_experts", "experts_per_token", "num_tokens"), moe_mla.experts_touched, _number,
         lambda x: f"{x:.9g} experts", _close, note=_touched_note),
    Spec("step_weight_bytes", ("model", "num_tokens"), moe_mla.step_weight_bytes, _number, _gb, _close,
         show_args=_MODEL, note=_bytes_note, driver=f"{__name__}:drive_model"),
    Spec("kv_bytes_per_gpu", ("model", "tp"), moe_mla.kv_bytes_per_gpu, _number, lambda x: f"{x:,.9g} bytes",
         _close, show_args=_MODEL, note=_kv_note, driver=f"{__name__}:drive_model"),
]}

_PLAIN = spec.model_and_gpu()


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    a model as its fields."""
    return spec.plain_case(SPECS, name, args, kwargs, None, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, None, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants), in ranges where each point runs (serving.check:
# DeepSeek-V3 with fp8 weights on 8 or more H200s, Mixtral-8x7B on one) and each known wrong answer stays wrong
# (at least 4 sequences, so n x k and the expected count part; at least TP8, so a latent split by TP is visibly off)

DRILLS = (
    variants.Variant("drill_1", {"batch": 24}, lambda rng: {"batch": rng.randrange(4, 97, 4)},
                     "the experts of DeepSeek-V3's 256 (8 a token) that a decode step of {batch} sequences touches "
                     "in each MoE layer"),
    variants.Variant("drill_2", {"batch": 4}, lambda rng: {"batch": rng.randrange(2, 7)},
                     "the GB of weights one decode step of {batch} sequences of Mixtral-8x7B in bf16 reads"),
    variants.Variant("drill_3", {"kv_dtype": "fp8", "tp": 8},
                     lambda rng: {"kv_dtype": rng.choice(("fp8", "bf16")), "tp": rng.choice((8, 16, 32))},
                     "the KV of one token on each GPU of DeepSeek-V3 with a {kv_dtype} KV cache under TP{tp}, in KiB"),
    variants.Variant("drill_4", {"group": 128}, lambda rng: {"group": rng.choice((32, 64, 256))},
                     "the GB an int4 checkpoint of Mixtral-8x7B with groups of {group} weights (AWQ's layout) takes"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.batch`` and so on."""
    return variants.show(DRILLS, who)
