"""Chapter 14's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.disaggregation`, how its
result is read (converted to plain ``int`` / ``float``, never compared as the learner built it) and shown. A model or
a GPU crosses to the learner's kernel as the dict of its fields (:func:`case`); a driver (``drive_model_gpu``)
rebuilds the ``ModelSpec`` / ``GPUSpec`` there and calls the function once; the reference goes through the same
driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch14``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import costmodel, disaggregation
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch14_disaggregated_serving"
_short = common.short_repr(12, 120)


def drive_model_gpu(fn, model, gpu, *rest):
    return fn(ModelSpec(**model), GPUSpec(**gpu), *rest)


def _ratio(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _seconds(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _bandwidth(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _pools(raw, args) -> tuple[int, int]:
    if not isinstance(raw, tuple | list) or len(raw) != 2:
        raise Shape(f"expected a tuple (prefill GPUs, decode GPUs), not {_short.repr(raw)}")
    return (common.as_int(raw[0], "prefill GPUs", "GPUs", _short, strict=True),
            common.as_int(raw[1], "decode GPUs", "GPUs", _short, strict=True))


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _stretch_note(args, got, want) -> str:
    model, gpu, chunk, decodes, ctx = args
    m, g = ModelSpec(**model), GPUSpec(**gpu)
    alone = costmodel.step_time(m, g, decode_context_lens=[ctx] * decodes)
    return f"\n  the decodes alone: {alone * 1e3:.4g} ms a step"


def _transfer_note(args, got, want) -> str:
    model, gpu, prompt_len, bandwidth, layerwise = args
    nbytes = disaggregation.kv_transfer_bytes(ModelSpec(**model), prompt_len)
    return f"\n  {nbytes / 1e6:.6g} MB of KV; the whole of it at {bandwidth / 1e9:.4g} GB/s takes " \
           f"{nbytes / bandwidth * 1e3:.4g} ms"


def _pools_note(args, got, want) -> str:
    model, gpu, rate, prompt_len, output_len, ttft, tpot, bandwidth = args
    m, g = ModelSpec(**model), GPUSpec(**gpu)
    n_p, n_d = want
    t = disaggregation.split_ttft(m, g, rate / n_p, prompt_len, bandwidth)
    d, running = disaggregation.decode_tpot(m, g, rate / n_d, prompt_len, output_len)
    return (f"\n  at the reference's pools: mean TTFT {t * 1e3:.4g} ms, mean TPOT {d * 1e3:.4g} ms, "
            f"{running:.4g} sequences running on each decode GPU")


_SPEC_ARGS = {"model": _name, "gpu": _name}
SPECS = {s.name: s for s in [
    Spec("tpot_stretch", ("model", "gpu", "prefill_tokens", "num_decodes", "context_len"),
         disaggregation.tpot_stretch, _ratio, lambda x: f"{x:.6g}x", _close, show_args=_SPEC_ARGS,
         note=_stretch_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("exposed_transfer_s", ("model", "gpu", "prompt_len", "link_bandwidth", "layerwise"),
         disaggregation.exposed_transfer_s, _seconds, lambda x: f"{x * 1e3:.6g} ms", _close, show_args=_SPEC_ARGS,
         note=_transfer_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("break_even_bandwidth", ("model", "gpu", "prompt_len", "budget_s", "layerwise"),
         disaggregation.break_even_bandwidth, _bandwidth, lambda x: f"{x / 1e9:.6g} GB/s", _close,
         show_args=_SPEC_ARGS, driver=f"{__name__}:drive_model_gpu"),
    Spec("pd_pools", ("model", "gpu", "rate", "prompt_len", "output_len", "ttft_target_s", "tpot_target_s",
                      "link_bandwidth"), disaggregation.pd_pools, _pools, lambda r: f"({r[0]} prefill, {r[1]} decode)",
         show_args=_SPEC_ARGS, note=_pools_note, driver=f"{__name__}:drive_model_gpu"),
]}

_PLAIN = spec.model_and_gpu()


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    a model or a GPU as its fields."""
    return spec.plain_case(SPECS, name, args, kwargs, None, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, None, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): Llama-3.1-8B on H100s, in ranges where each
# point runs (serving.check: a prompt within the 8,192-token budget, decodes within the KV cache) and the question
# keeps its sense

def _draw_stretch(rng) -> dict:
    decodes = rng.randrange(16, 129, 8)
    return {"chunk": rng.randrange(500, 4001, 250), "decodes": decodes,
            "context": rng.randrange(1000, min(8000, 400_000 // decodes) + 1, 250)}


DRILLS = (
    variants.Variant("drill_1", {"prompt": 6000}, lambda rng: {"prompt": rng.randrange(2000, 8001, 250)},
                     "the whole (not layer-by-layer) transfer of the KV of a prompt of {prompt:,} tokens over one "
                     "400 Gb/s NIC, in ms"),
    variants.Variant("drill_2", {"chunk": 2000, "decodes": 64, "context": 3000}, _draw_stretch,
                     "the stretch of a step of {decodes} decodes at {context:,} tokens that also prefills {chunk:,} "
                     "prompt tokens"),
    variants.Variant("drill_3", {"prompt": 8000, "budget_ms": 15},
                     lambda rng: {"prompt": rng.randrange(2000, 8001, 500), "budget_ms": rng.choice((5, 10, 15, 20))},
                     "the break-even link bandwidth in GB/s that keeps the layer-by-layer exposed transfer of a "
                     "prompt of {prompt:,} tokens within {budget_ms} ms"),
    variants.Variant("drill_4", {"rate": 40, "prompt": 8000, "output": 1024, "tpot_ms": 50},
                     # outputs of 2,048 tokens and more: the KV cache, not only the TPOT, sizes the pool
                     lambda rng: {"rate": rng.randrange(10, 61, 5), "prompt": rng.randrange(2000, 8001, 1000),
                                  "output": rng.choice((2048, 3072, 4096)), "tpot_ms": rng.choice((40, 50, 60))},
                     "decode GPUs for {rate} requests/s of {prompt:,}-token prompts and {output:,} output tokens, "
                     "mean TPOT <= {tpot_ms} ms (TTFT <= 1 s, 50 GB/s links)"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.prompt`` and so on."""
    return variants.show(DRILLS, who)
