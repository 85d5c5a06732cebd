"""Chapter 13's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.fairness`, how its result is
read (converted to plain ``int`` / ``float`` / ``str``, never compared as the learner built it) and shown. A model, a
GPU or token weights cross to the learner's kernel as the dict of their fields, a set of tenants as a sorted list
(:func:`case`); a driver (``drive_*``) rebuilds the objects there and calls the function once; the reference goes
through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch13``), outside the learner's kernel.
"""

from __future__ import annotations

import copy
import math

from servelab.analytic import costmodel, fairness
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab.analytic.fairness import TokenWeights
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch13_fairness_and_priority"
_short = common.short_repr(12, 120)


# ------------------------------------------------------------------------------------------------
# the drivers (kernel side): each builds its own objects from plain data, so no call changes the grader's data


def drive_model_gpu(fn, model, gpu, *rest):
    return fn(ModelSpec(**model), GPUSpec(**gpu), *rest)


def drive_shares(fn, requests, weights):
    return fn({t: tuple(r) for t, r in requests.items()}, TokenWeights(**weights))


def drive_next_tenant(fn, counters, served, weights, backlogged, returning):
    """next_tenant on copies of the inputs, then a check that it left them as they were: the scheduler keeps the
    counters it passed (a function that charges them in place charges every step twice once it stores the
    result)."""
    given = {"counters": dict(counters), "served": {t: tuple(x) for t, x in served.items()},
             "backlogged": set(backlogged), "returning": set(returning)}
    passed = {name: copy.copy(value) for name, value in given.items()}
    out = fn(passed["counters"], passed["served"], TokenWeights(**weights), passed["backlogged"],
             passed["returning"])
    for name, was in given.items():
        now = passed[name]
        if now != was:
            raise ValueError(f"next_tenant changed its {name} argument (was {was!r}, now {now!r}): return new "
                             f"counters and leave the inputs as they were (new = dict(counters))")
    return out


# ------------------------------------------------------------------------------------------------
# reading what came back


def _seconds(raw, args) -> float:
    x = common.as_float(raw, "the result", _short, finite=True)
    return x


def _tokens(raw, args) -> int:
    return common.as_int(raw, "the result", "tokens of KV", _short, strict=True)


def _shares(raw, args) -> dict:
    want = set(args[0])
    if not isinstance(raw, dict) or set(raw) != want:
        raise Shape(f"expected a dict with one share per tenant {sorted(want)}, not {_short.repr(raw)}")
    return {t: common.as_float(raw[t], f"the share of {t!r}", _short, finite=True) for t in sorted(want)}


def _pick(raw, args) -> tuple:
    if not isinstance(raw, tuple | list) or len(raw) != 2:
        raise Shape(f"expected a tuple (tenant, counters), not {_short.repr(raw)}")
    tenant, counters = raw
    if not isinstance(tenant, str):
        raise Shape(f"the tenant picked is {_short.repr(tenant)}; expected a tenant's name (a str)")
    if not isinstance(counters, dict) or not all(isinstance(k, str) for k in counters):
        raise Shape(f"the counters are {_short.repr(counters)}; expected a dict tenant -> counter")
    return tenant, {t: common.as_float(counters[t], f"the counter of {t!r}", _short, finite=True)
                    for t in sorted(counters)}


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _shares_close(got, want) -> bool:
    return set(got) == set(want) and all(_close(got[t], want[t]) for t in want)


def _pick_close(got, want) -> bool:
    return got[0] == want[0] and _shares_close(got[1], want[1])


# ------------------------------------------------------------------------------------------------
# showing it


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _show_shares(d) -> str:
    return "{" + ", ".join(f"{t!r}: {s:.6g}" for t, s in d.items()) + "}"


def _show_pick(r) -> str:
    return f"({r[0]!r}, {_show_shares(r[1])})"


def _tpot_note(args, got, want) -> str:
    model, gpu, n_i, c_i, n_b, c_b = args
    alone = costmodel.step_time(ModelSpec(**model), GPUSpec(**gpu), decode_context_lens=[c_i] * n_i)
    return f"\n  the interactive decodes alone: {alone * 1e3:.4g} ms a step"


def _quota_note(args, got, want) -> str:
    return f"\n  that is {want // args[5] if args[5] else 0} whole batch sequences of {args[5]} tokens"


_SPEC_ARGS = {"model": _name, "gpu": _name}
SPECS = {s.name: s for s in [
    Spec("interactive_tpot", ("model", "gpu", "interactive_decodes", "interactive_context", "batch_decodes",
                              "batch_context"), fairness.interactive_tpot, _seconds, lambda x: f"{x * 1e3:.6g} ms",
         _close, show_args=_SPEC_ARGS, note=_tpot_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("batch_kv_quota", ("model", "gpu", "tpot_target_s", "interactive_decodes", "interactive_context",
                            "batch_context"), fairness.batch_kv_quota, _tokens, lambda n: f"{n} tokens",
         show_args=_SPEC_ARGS, note=_quota_note, driver=f"{__name__}:drive_model_gpu"),
    Spec("request_fair_shares", ("requests", "weights"), fairness.request_fair_shares, _shares, _show_shares,
         _shares_close, driver=f"{__name__}:drive_shares"),
    Spec("next_tenant", ("counters", "served", "weights", "backlogged", "returning"), fairness.next_tenant, _pick,
         _show_pick, _pick_close, driver=f"{__name__}:drive_next_tenant"),
]}


def _weights(v) -> dict:
    return spec.as_fields(v, TokenWeights)


def _tenants(v) -> list:
    return sorted(v)


def _requests(v) -> dict:
    return {t: list(r) for t, r in v.items()}


_PLAIN = {**spec.model_and_gpu(), "weights": _weights, "backlogged": _tenants, "returning": _tenants,
          "requests": _requests, "served": _requests}


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    a model, GPU or weights as its fields, a set of tenants as a sorted list."""
    return spec.plain_case(SPECS, name, args, kwargs, None, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, None, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): Llama-3.1-8B on one H100, every step's KV within its
# cache (468,102 tokens), chats that leave the batch class room under the target, a document that pays more than
# its output

def _mixed(rng) -> dict:
    while True:
        d = {"chats": rng.randrange(32, 129, 16), "chat_ctx": rng.randrange(1000, 3001, 500),
             "batch": rng.randrange(4, 17, 2), "batch_ctx": rng.randrange(8000, 32_001, 4000)}
        if d["chats"] * d["chat_ctx"] + d["batch"] * d["batch_ctx"] <= 440_000:
            return d


def _quota(rng) -> dict:
    while True:
        # targets tight enough that the step's time, not the cache, sets the quota
        d = {"target_ms": rng.choice((15, 20)), "chats": rng.randrange(32, 97, 16),
             "chat_ctx": rng.randrange(1000, 2001, 500), "batch_ctx": rng.choice((16_000, 24_000, 32_000))}
        if d["chats"] * d["chat_ctx"] <= 150_000:
            return d


DRILLS = (
    variants.Variant("drill_1", {"chats": 96, "chat_ctx": 1500, "batch": 12, "batch_ctx": 24000}, _mixed,
                     "the interactive TPOT in ms with {chats} chats at {chat_ctx:,} tokens and {batch} batch sequences "
                     "at {batch_ctx:,} tokens in each decode step"),
    variants.Variant("drill_2", {"target_ms": 20, "chats": 96, "chat_ctx": 1500, "batch_ctx": 24000}, _quota,
                     "the batch class's KV quota in tokens for a {target_ms} ms TPOT target beside {chats} chats at "
                     "{chat_ctx:,} tokens, batch sequences of {batch_ctx:,} tokens"),
    variants.Variant("drill_3", {"share_pct": 90, "chat_prompt": 500, "chat_out": 300, "doc_out": 300},
                     lambda rng: {"share_pct": rng.choice((60, 75, 80, 90)),
                                  "chat_prompt": rng.randrange(200, 1001, 100),
                                  "chat_out": rng.randrange(200, 501, 100), "doc_out": rng.randrange(100, 201, 50)},
                     "the document prompt length (tokens, output {doc_out}) that gets {share_pct}% of the GPU under "
                     "request turns beside chat requests of {chat_prompt} prompt and {chat_out} output tokens, at the "
                     "prices of `token_weights(LLAMA31_8B, H100_SXM, 2000, 64, 2000)`"),
    variants.Variant("drill_4", {"prompt": 2000, "batch": 32, "context": 4000},
                     lambda rng: {"prompt": rng.randrange(1000, 4001, 500), "batch": rng.randrange(16, 65, 8),
                                  "context": rng.randrange(1000, 4001, 500)},
                     "how many prompt tokens one output token costs, for prompts of {prompt:,} tokens and decode steps "
                     "of {batch} sequences at {context:,} tokens (`token_weights`)"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.chats`` and so on."""
    return variants.show(DRILLS, who)
