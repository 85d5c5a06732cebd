"""Chapter 09's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.capacity`, how its result is
read (converted to plain ``int`` / ``float``, never compared as the learner built it) and shown. A model or a GPU
crosses to the learner's kernel as the dict of its fields (:func:`case`); a driver (``drive_*``) rebuilds the
``ModelSpec`` / ``GPUSpec`` there and calls the function once; the reference goes through the same driver on the
grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch09``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import capacity
from servelab.analytic.costmodel import DEFAULT_STEP_OVERHEAD_S, GPUSpec, ModelSpec
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch09_capacity_and_concurrency"
_short = common.short_repr(12, 120)


# ------------------------------------------------------------------------------------------------
# the drivers (kernel side): each builds its own objects from plain data, so no call changes the grader's data


def drive_kv_ceiling(fn, model, gpu, context_len, memory_fraction):
    return fn(ModelSpec(**model), GPUSpec(**gpu), context_len, memory_fraction)


def drive_model_gpu(fn, model, gpu, *rest):
    return fn(ModelSpec(**model), GPUSpec(**gpu), *rest)


def drive_fleet_size(fn, model, gpu, input_tokens, output_tokens, prompt_len, batch, budget):
    return fn(ModelSpec(**model), GPUSpec(**gpu), input_tokens, output_tokens, prompt_len, batch,
              **spec.passed(budget=budget))


# the references, called as the exercises are
def _fleet_reference(model, gpu, input_tokens, output_tokens, prompt_len, batch, **budget):
    plan = capacity.fleet_size(model, gpu, input_tokens, output_tokens, prompt_len, batch, **budget)
    return plan.gpus, plan.prefill_gpu_hours, plan.decode_gpu_hours


# ------------------------------------------------------------------------------------------------
# reading what came back


def _sequences(raw, args) -> int:
    return common.as_int(raw, "the result", "sequences", _short, strict=True)


def _tokens(raw, args) -> int:
    return common.as_int(raw, "the result", "tokens", _short, strict=True)


def _batch_or_inf(raw, args) -> int | float:
    if isinstance(raw, int | float) and not isinstance(raw, bool) and raw == math.inf:
        return math.inf
    return common.as_int(raw, "the result", "sequences (or math.inf when no batch is compute-bound)", _short,
                         strict=True)


def _float(raw, args) -> float:
    x = common.as_float(raw, "the result", _short)
    if math.isnan(x):
        raise Shape("the result is nan; expected a number of sequences (math.inf past the divergence)")
    return x


def _fleet(raw, args) -> tuple[int, float, float]:
    if not isinstance(raw, tuple | list) or len(raw) != 3:
        raise Shape(f"expected a tuple (gpus, prefill_gpu_hours, decode_gpu_hours), not {_short.repr(raw)}")
    return (common.as_int(raw[0], "gpus", "GPUs", _short, strict=True),
            common.as_float(raw[1], "prefill_gpu_hours", _short, finite=True),
            common.as_float(raw[2], "decode_gpu_hours", _short, finite=True))


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)   # inf == inf; sums in another order


def _fleet_close(got, want) -> bool:
    return got[0] == want[0] and _close(got[1], want[1]) and _close(got[2], want[2])


# ------------------------------------------------------------------------------------------------
# showing it


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _show_batch(b) -> str:
    return "math.inf (no batch is compute-bound)" if b == math.inf else f"{b} sequences"


def _show_fleet(r) -> str:
    return f"({r[0]} GPUs, {r[1]:.6g} GPU-hours of prefill, {r[2]:.6g} of decode)"


def _ridge_note(args, got, want) -> str:
    model, gpu, context_len = args
    m, g = ModelSpec(**model), GPUSpec(**gpu)
    one, two = capacity._decode_cost(m, g, 1, context_len), capacity._decode_cost(m, g, 2, context_len)
    per_seq_memory = two.memory_s - one.memory_s
    return (f"\n  per sequence: {one.compute_s * 1e6:.4g} us of compute, {per_seq_memory * 1e6:.4g} us of KV reading "
            f"and writing; the weights: {(one.memory_s - per_seq_memory) * 1e3:.4g} ms a step")


def _resident_note(args, got, want) -> str:
    rate, output_len, a, b = args
    return f"\n  rate x L x b = {rate * output_len * b:.6g}" + (" (>= 1: no fixed point)" if want == math.inf else "")


def _knee_note(args, got, want) -> str:
    model, gpu, d, ctx = args
    m, g = ModelSpec(**model), GPUSpec(**gpu)

    def bound(budget):
        from servelab.analytic import costmodel
        return costmodel.step_cost(m, g, prefill_tokens=budget - d, decode_context_lens=[ctx] * d).bound

    note = f"\n  the reference's step: {d} decodes + a chunk of {want - d} tokens"
    if want - 1 - d > 0:
        note += f" is {bound(want)}-bound, with one token less {bound(want - 1)}-bound"
    return note


_SPEC_ARGS = {"model": _name, "gpu": _name}
SPECS = {s.name: s for s in [
    Spec("kv_ceiling", ("model", "gpu", "context_len", "memory_fraction"), capacity.kv_ceiling, _sequences,
         lambda n: f"{n} sequences", show_args=_SPEC_ARGS, driver=f"{__name__}:drive_kv_ceiling"),
    Spec("compute_ridge_batch", ("model", "gpu", "context_len"), capacity.compute_ridge_batch, _batch_or_inf,
         _show_batch, show_args=_SPEC_ARGS, note=_ridge_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("resident_sequences", ("rate", "output_len", "a", "b"), capacity.resident_sequences, _float,
         lambda x: f"{x:.10g}", _close, note=_resident_note),
    Spec("fleet_size", ("model", "gpu", "input_tokens_per_day", "output_tokens_per_day", "prompt_len", "batch",
                        "budget"), _fleet_reference, _fleet, _show_fleet, _fleet_close, show_args=_SPEC_ARGS,
         driver=f"{__name__}:drive_fleet_size"),
    Spec("budget_knee", ("model", "gpu", "num_decodes", "context_len"), capacity.budget_knee, _tokens,
         lambda n: f"{n} tokens", show_args=_SPEC_ARGS, note=_knee_note, driver=f"{__name__}:drive_model_gpu"),
]}

_DEFAULTS = {"kv_ceiling": {"memory_fraction": 0.92}, "fleet_size": {"budget": 8192}}
_PLAIN = spec.model_and_gpu()
OVERHEAD_S = DEFAULT_STEP_OVERHEAD_S


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    defaults filled in, a model or GPU as its fields."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, _DEFAULTS, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): contexts within Llama-3-8B's 8,192-token window, a
# decode batch that fits the KV cache at its context, a time-between-tokens target the decodes alone meet

def _fleet(rng) -> dict:
    prompt = rng.choice((2000, 3000, 4000))
    return {"input_billions": rng.choice((50, 100, 200)), "output_billions": rng.choice((1, 2, 4)),
            "prompt": prompt, "batch": rng.choice((48, 64, 96))}


DRILLS = (
    variants.Variant("drill_1", {"context": 3000}, lambda rng: {"context": rng.randrange(1000, 8001, 250)},
                     "how many sequences of {context:,} tokens each fit in an H200's KV cache next to Llama-3-8B "
                     "(92% of its 143,771 MiB)?"),
    variants.Variant("drill_2", {"context": 128}, lambda rng: {"context": rng.choice((32, 64, 96, 160, 192))},
                     "the smallest decode batch of Llama-3-8B on an H200, {context} tokens of context each, whose "
                     "step is compute-bound?"),
    variants.Variant("drill_3", {"rate": 60, "prompt": 64, "output": 512},
                     # rates the GPU keeps up with, the running sequences within its KV cache
                     lambda rng: {"rate": rng.randrange(20, 61, 10), "prompt": rng.choice((64, 128, 256)),
                                  "output": rng.choice((256, 512))},
                     "running sequences at {rate} requests/s, {prompt}-token prompts, {output} output tokens, "
                     "Llama-3-8B on an H100?"),
    variants.Variant("drill_4", {"input_billions": 100, "output_billions": 2, "prompt": 4000, "batch": 96}, _fleet,
                     "H100s for {input_billions} billion input and {output_billions} billion output tokens a day, "
                     "{prompt:,}-token prompts, decode batch {batch}, 8192-token prefill steps?"),
    variants.Variant("drill_5", {"prompt": 4000, "batch": 96, "context": 4096},
                     lambda rng: {"prompt": rng.choice((1000, 2000, 4000, 8000)), "batch": rng.choice((32, 64, 96)),
                                  "context": rng.choice((1024, 2048, 4096))},
                     "the input:output ratio at which prefill is three quarters of the GPU time: {prompt:,}-token "
                     "prompts in 8192-token steps, decode batch {batch} at {context:,} tokens of context (H100)"),
    variants.Variant("drill_6", {"decodes": 96, "context": 4096},
                     lambda rng: {"decodes": rng.choice((32, 48, 64, 96)), "context": rng.randrange(1024, 4097, 512)},
                     "the token budget at which {decodes} decodes at {context:,} tokens plus one chunk turn a step "
                     "compute-bound (H100)?"),
    variants.Variant("drill_7", {"tbt_ms": 50, "decodes": 64, "context": 4096},
                     lambda rng: {"tbt_ms": rng.choice((40, 60, 80, 100)), "decodes": rng.choice((32, 48, 64)),
                                  "context": rng.choice((1024, 2048, 4096))},
                     "the largest token budget a {tbt_ms} ms time-between-tokens target allows for a step of "
                     "{decodes} decodes at {context:,} tokens plus one chunk of a new prompt, Mistral-7B on one "
                     "A100 80GB PCIe at its datasheet peaks?"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.context`` and so on."""
    return variants.show(DRILLS, who)
