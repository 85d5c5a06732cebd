"""Chapter 08's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.kv_tiers`, how its result is
read (a finite number of seconds or bytes per second) and shown. A model or a GPU crosses to the learner's kernel as the
dict of its fields (:func:`case`); a driver (``drive_*``) rebuilds the ``ModelSpec`` / ``GPUSpec`` there and calls
the function once; the reference goes through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch08``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import kv_tiers
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Spec

ASSIGNMENT = "ch08_preemption_and_kv_tiers"
_short = common.short_repr(12, 120)


# ------------------------------------------------------------------------------------------------
# the drivers (kernel side): a model or GPU rebuilt from its fields, the function called once


def drive_recompute_time(fn, model, gpu, tokens, mfu):
    return fn(ModelSpec(**model), GPUSpec(**gpu), tokens, mfu=mfu)


def drive_break_even_bandwidth(fn, model, gpu, tokens, mfu):
    return fn(ModelSpec(**model), GPUSpec(**gpu), tokens, mfu=mfu)


def drive_swap_time(fn, model, tokens, block_size, link_bandwidth, copy_latency_s):
    return fn(ModelSpec(**model), tokens, block_size, link_bandwidth, copy_latency_s)


# ------------------------------------------------------------------------------------------------
# reading what came back, and showing it


def _number(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)   # the learner may add the terms in another order


def _ms(t: float) -> str:
    return f"{t * 1e3:.6g} ms"


def _gbs(b: float) -> str:
    return f"{b / 1e9:.6g} GB/s"


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _recompute_note(args, got, want) -> str:
    model, gpu, tokens, mfu = args
    m = ModelSpec(**model)
    return (f"\n  {tokens} tokens: 2 x {m.matmul_params:,} matmul parameters each, attention over the causal pairs, "
            f"the LM head once; at {mfu:g} x {gpu['peak_flops'] / 1e12:g} TFLOP/s")


def _break_even_note(args, got, want) -> str:
    model, gpu, tokens, mfu = args
    m = ModelSpec(**model)
    per_token = kv_tiers.recompute_time(m, GPUSpec(**gpu), tokens, mfu) / tokens
    return (f"\n  the reference: {m.kv_bytes_per_token:,.6g} bytes of KV per token / {per_token * 1e6:.6g} us of "
            "recompute per token")


def _copy_note(args, got, want) -> str:
    copy_bytes, link, latency = args
    return (f"\n  the copy's bytes take {copy_bytes / link * 1e6:.6g} us on the link, plus {latency * 1e6:.6g} us "
            "fixed cost")


def _swap_note(args, got, want) -> str:
    model, tokens, block_size, link, latency = args
    m = ModelSpec(**model)
    copies = kv_tiers.swap_copies(m, tokens, block_size)
    return (f"\n  the reference makes {copies:,} copies of {kv_tiers.swap_copy_bytes(m, block_size):,.6g} bytes "
            f"({-(-tokens // block_size)} blocks x {m.num_layers} layers x K and V)")


_ARGS = {"model": _name, "gpu": _name, "link_bandwidth": _gbs, "copy_latency_s": lambda s: f"{s * 1e6:g} us"}
SPECS = {s.name: s for s in [
    Spec("recompute_time", ("model", "gpu", "tokens", "mfu"), kv_tiers.recompute_time, _number, _ms, _close,
         _ARGS, note=_recompute_note, driver=f"{__name__}:drive_recompute_time"),
    Spec("break_even_bandwidth", ("model", "gpu", "tokens", "mfu"), kv_tiers.break_even_bandwidth, _number, _gbs,
         _close, _ARGS, note=_break_even_note, driver=f"{__name__}:drive_break_even_bandwidth"),
    Spec("effective_copy_bandwidth", ("copy_bytes", "link_bandwidth", "copy_latency_s"),
         kv_tiers.effective_copy_bandwidth, _number, _gbs, _close, _ARGS, note=_copy_note),
    Spec("swap_time", ("model", "tokens", "block_size", "link_bandwidth", "copy_latency_s"), kv_tiers.swap_time,
         _number, _ms, _close, _ARGS, note=_swap_note, driver=f"{__name__}:drive_swap_time"),
]}

_DEFAULTS = {"recompute_time": {"mfu": kv_tiers.DEFAULT_MFU},
             "break_even_bandwidth": {"tokens": 1024, "mfu": kv_tiers.DEFAULT_MFU},
             "effective_copy_bandwidth": {"copy_latency_s": kv_tiers.DEFAULT_COPY_LATENCY_S},
             "swap_time": {"copy_latency_s": kv_tiers.DEFAULT_COPY_LATENCY_S}}
_PLAIN = spec.model_and_gpu()


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    defaults filled in, a model or GPU as its fields."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, _DEFAULTS, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): prompts within LLaMA-2-7B's 4,096-token window, a
# fraction of peak other than the walkthrough's 50% where the drill asks for another, a sequence that ends inside
# a block (so rounding the blocks up counts)

def _swap(rng) -> dict:
    block = rng.choice((16, 32))
    return {"tokens": block * rng.randrange(30, 4096 // block) + rng.randrange(1, block), "block": block,
            "latency_us": rng.choice((5, 10, 20))}


DRILLS = (
    variants.Variant("drill_1", {"gpu": "H200", "tokens": 1024, "mfu_pct": 50},
                     lambda rng: {"gpu": rng.choice(("H100", "H200")),
                                  "tokens": rng.choice((512, 1024, 2048, 4096)),
                                  "mfu_pct": rng.choice((40, 50, 60))},
                     "the break-even bandwidth (GB/s) of Llama-3-8B with an fp8 KV cache (1 byte per element) on an "
                     "{gpu}, {tokens:,}-token sequences at {mfu_pct}% of peak"),
    variants.Variant("drill_2", {"tokens": 1024, "mfu_pct": 40},
                     lambda rng: {"tokens": rng.choice((512, 1024, 2048, 4096)),
                                  "mfu_pct": rng.choice((30, 40, 60, 70))},
                     "per token, how many times LLaMA-2-7B's break-even ({tokens:,} tokens, {mfu_pct}% of peak, "
                     "H100) PCIe Gen5's 53 GB/s (one direction, pinned copies) is"),
    variants.Variant("drill_3", {"block": 32, "latency_us": 10},
                     lambda rng: {"block": rng.choice((8, 16, 64, 128)), "latency_us": rng.choice((5, 10, 20))},
                     "the effective bandwidth (GB/s) of one copy of a {block}-token block of one layer's K for "
                     "Llama-3-8B, 53 GB/s, {latency_us} µs"),
    variants.Variant("drill_4", {"tokens": 3000, "block": 16, "latency_us": 10}, _swap,
                     "the time (ms) to swap out a {tokens:,}-token LLaMA-2-7B sequence, {block}-token blocks, "
                     "53 GB/s, {latency_us} µs a copy"),
    variants.Variant("drill_5", {"latency_us": 10}, lambda rng: {"latency_us": rng.choice((2, 5, 20, 40))},
                     "the smallest block size (tokens) whose one-layer K copy reaches LLaMA-2-7B's break-even (H100, "
                     "1024 tokens, 50% of peak) at 53 GB/s and {latency_us} µs a copy"),
    variants.Variant("drill_6", {"batch": 64, "context": 2048},
                     lambda rng: {"batch": rng.choice((32, 48, 64, 96)), "context": rng.randrange(1024, 4097, 256)},
                     "how many recomputed tokens can join a decode step of {batch} Llama-3-8B sequences at "
                     "{context:,} tokens of context on an H100 before the step turns compute-bound"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.tokens`` and so on."""
    return variants.show(DRILLS, who)
