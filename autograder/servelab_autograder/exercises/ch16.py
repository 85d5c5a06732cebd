"""Chapter 16's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.parallelism`, how its result
is read (converted to plain ``int`` / ``float`` / ``None``, never compared as the learner built it) and shown. A model
or a GPU crosses to the learner's kernel as the dict of its fields (:func:`case`); a driver (``drive_model``,
``drive_model_gpu``) rebuilds the ``ModelSpec`` / ``GPUSpec`` there and calls the function once; the reference goes
through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch16``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import capacity, parallelism
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch16_parallelism_and_cuda_graphs"
_short = common.short_repr(12, 120)


def drive_model(fn, model, *rest):
    return fn(ModelSpec(**model), *rest)


def drive_model_gpu(fn, model, gpu, *rest):
    return fn(ModelSpec(**model), GPUSpec(**gpu), *rest)


def drive_sizes(fn, num_tokens, capture_sizes):
    return fn(num_tokens, list(capture_sizes))


def _float(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _tokens(raw, args) -> int:
    return common.as_int(raw, "the result", "tokens", _short, strict=True)


def _size(raw, args) -> int | None:
    if raw is None:
        return None
    return common.as_int(raw, "the result", "tokens (or None: eager)", _short, strict=True)


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _sizes(sizes) -> str:
    s = sorted(sizes)
    return f"[{', '.join(map(str, s))}]" if len(s) <= 8 else f"[{s[0]}, {s[1]}, ... {s[-1]}] ({len(s)} sizes)"


def _comm_note(args, got, want) -> str:
    model, tokens, tp, bw, latency = args
    m = ModelSpec(**model)
    nbytes = tokens * m.hidden_size * 2
    one = 2 * (tp - 1) / tp * nbytes / bw + 2 * (tp - 1) * latency
    return f"\n  one all-reduce of {nbytes:,} bytes: {one * 1e6:.4g} us; the model has {m.num_layers} layers"


def _kv_note(args, got, want) -> str:
    model, gpu, tp = args
    m = ModelSpec(**model)
    return (f"\n  {m.num_kv_heads} KV heads over {tp} GPUs: {max(1, m.num_kv_heads // tp)} on each; "
            f"{m.shard(tp).weight_bytes / 1e9:.4g} GB of weights on each")


_SPEC_ARGS = {"model": _name, "gpu": _name}
SPECS = {s.name: s for s in [
    Spec("tp_comm_s", ("model", "num_tokens", "tp", "link_bandwidth", "latency_s"), parallelism.tp_comm_s, _float,
         lambda x: f"{x * 1e6:.6g} us", _close, show_args=_SPEC_ARGS, note=_comm_note,
         driver=f"{__name__}:drive_model"),
    Spec("kv_tokens_per_degree", ("model", "gpu", "tp"), parallelism.kv_tokens_per_degree, _tokens,
         lambda x: f"{x:,} tokens", show_args=_SPEC_ARGS, note=_kv_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("pad_to_graph", ("num_tokens", "capture_sizes"), parallelism.pad_to_graph, _size,
         lambda x: "None (eager)" if x is None else f"{x}", show_args={"capture_sizes": _sizes},
         driver=f"{__name__}:drive_sizes"),
    Spec("all_to_all_bytes", ("num_tokens", "hidden_size", "experts_per_token", "ep", "bytes_per_element"),
         parallelism.all_to_all_bytes, _float, lambda x: f"{x:,.6g} bytes", _close),
]}

_PLAIN = spec.model_and_gpu()


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    a model or a GPU as its fields, capture sizes as a list."""
    return spec.plain_case(SPECS, name, args, kwargs, None, {**_PLAIN, "capture_sizes": list})


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, None, {**_PLAIN, "capture_sizes": list})


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants), in ranges where each point runs (serving.check) and the
# question keeps its sense; a batch that is itself a captured size is not drawn (it pads nothing)

_SIZES = tuple(capacity.cudagraph_capture_sizes(1024, 8192))     # vLLM 0.33.0's default sizes on an H100 or H200


DRILLS = (
    variants.Variant("drill_1", {"tokens": 256, "tp": 4},
                     lambda rng: {"tokens": rng.randrange(64, 4097, 64), "tp": rng.choice((2, 4, 8))},
                     "the all-reduces of a {tokens:,}-token step of Llama-3.1-8B at TP{tp}, in ms"),
    variants.Variant("drill_2", {"tp": 4}, lambda rng: {"tp": rng.choice((2, 4, 8, 16))},
                     "the tokens of KV Llama-3.1-70B holds at TP{tp} on H200s"),
    variants.Variant("drill_3", {"stages": 8, "microbatches": 16},
                     lambda rng: {"stages": rng.choice((2, 4, 8)), "microbatches": rng.choice((4, 8, 16, 32))},
                     "the idle share (a fraction) of a pipeline of {stages} stages that runs {microbatches} "
                     "micro-batches and drains"),
    variants.Variant("drill_4", {"batch": 261},
                     lambda rng: {"batch": rng.choice([b for b in range(9, 512) if b not in _SIZES])},
                     "the padding rows of a decode batch of {batch} sequences on vLLM's default capture sizes "
                     "(capacity.cudagraph_capture_sizes(1024, 8192))"),
    variants.Variant("drill_5", {"dtype": "fp8", "gpu": "H200"},
                     lambda rng: {"dtype": rng.choice(("bf16", "fp8")), "gpu": rng.choice(("H100", "H200"))},
                     "the tokens a decode step of DeepSeek-V3 with {dtype} weights on {gpu}s must hold for its "
                     "experts to be compute-bound (serving.priced gives the model and GPU at that dtype)"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_2.tp`` and so on."""
    return variants.show(DRILLS, who)


__all__ = ["ASSIGNMENT", "DRILLS", "SPECS", "Shape", "case", "diagnose", "drill_numbers"]
