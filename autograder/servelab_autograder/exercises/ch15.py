"""Chapter 15's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.routing`, how its result is
read (a worker as a plain ``int``, a fraction as a ``float``) and shown. Every argument is plain data already: a ring
is a list of ``(point, worker)`` pairs, loads and match lengths are lists of ints, so the functions are called on
copies of the case as it is (:func:`case` fills the thresholds' defaults in).

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch15``), outside the learner's kernel.
"""

from __future__ import annotations

import math

from servelab.analytic import routing
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch15_routing_across_replicas"
_short = common.short_repr(12, 120)


def _worker(raw, args) -> int:
    n = _workers(args)
    w = common.as_int(raw, "the worker", "workers", _short, strict=True)
    if n is not None and not 0 <= w < n:
        raise Shape(f"the worker is {w}; workers are numbered 0..{n - 1}")
    return w


def _workers(args) -> int | None:
    first = args[0]
    if isinstance(first, list) and first and isinstance(first[0], tuple | list):   # a ring
        return max(int(p[1]) for p in first) + 1
    if isinstance(first, list):                                                       # loads
        return len(first)
    return None


def _fraction(raw, args) -> float:
    x = common.as_float(raw, "the fraction", _short, finite=True)
    if not 0 <= x <= 1:
        raise Shape(f"the fraction of keys kept is {x!r}; a fraction is between 0 and 1")
    return x


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _show_worker(w) -> str:
    return f"worker {w}"


def _ring(ring) -> str:
    return "[" + common.some(f"({p}, {w})" for p, w in ring) + "]"


def _ring_note(args, got, want) -> str:
    ring, h = args[0], args[1]
    after = [p for p, _ in ring if p >= h]
    first = f"the first point at or after {h} is {min(after)}" if after else f"no point is at or after {h}"
    return f"\n  {first}; the ring's points run from {ring[0][0]} to {ring[-1][0]}"


def _cap_note(args, got, want) -> str:
    loads, c = args[2], args[3]
    return f"\n  {sum(loads)} outstanding requests over {len(loads)} workers, load factor {c}"


def _pick_note(args, got, want) -> str:
    loads, matches, n = args[0], args[1], args[2]
    rate = max(matches) / n if n else 0.0
    return (f"\n  loads from {min(loads)} to {max(loads)} (thresholds {args[5]}, x{args[6]}); best match "
            f"{max(matches)} of {n} tokens ({rate:.3g}; cache threshold {args[4]})")


def drive_pick(fn, loads, match_lens, text_len, tree_sizes, cache_threshold, balance_abs_threshold,
               balance_rel_threshold):
    """cache_aware_pick on copies of the lists, each threshold passed only when the case gives one (a threshold
    left at ``spec.DEFAULT`` grades the function's own default, SGLang's launcher's)."""
    knobs = spec.passed(cache_threshold=cache_threshold, balance_abs_threshold=balance_abs_threshold,
                        balance_rel_threshold=balance_rel_threshold)
    return fn(list(loads), list(match_lens), text_len, list(tree_sizes), **knobs)


SPECS = {s.name: s for s in [
    Spec("ring_owner", ("ring", "key_hash"), routing.ring_owner, _worker, _show_worker, show_args={"ring": _ring},
         note=_ring_note),
    Spec("bounded_owner", ("ring", "key_hash", "loads", "load_factor"), routing.bounded_owner, _worker, _show_worker,
         show_args={"ring": _ring}, note=_cap_note),
    Spec("cache_aware_pick", ("loads", "match_lens", "text_len", "tree_sizes", "cache_threshold",
                              "balance_abs_threshold", "balance_rel_threshold"), routing.cache_aware_pick, _worker,
         _show_worker, note=_pick_note, driver=f"{__name__}:drive_pick"),
    Spec("keys_kept", ("n_before", "n_after", "scheme"), routing.keys_kept, _fraction, lambda x: f"{x:.6g}", _close),
]}

_DEFAULTS = {"cache_aware_pick": {"cache_threshold": routing.CACHE_THRESHOLD,
                                  "balance_abs_threshold": routing.BALANCE_ABS_THRESHOLD,
                                  "balance_rel_threshold": routing.BALANCE_REL_THRESHOLD}}


def _pairs(ring) -> list:
    return [(int(p), int(w)) for p, w in ring]


_PLAIN = {"ring": _pairs, "loads": list, "match_lens": list, "tree_sizes": list}


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    the thresholds' defaults filled in, a ring as a list of (point, worker) tuples."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS, _PLAIN)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, _DEFAULTS, _PLAIN)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): an outstanding count at which the load factor's cap
# is whole, so counting the request being placed moves it; a prompt within the 8,192-token budget; a round-robin
# fleet that has seen every prompt once on every replica

def _cap(rng) -> dict:
    factor, replicas, cap = rng.choice((1.25, 2.0)), rng.choice((10, 20, 40)), rng.randrange(2, 9)
    return {"factor": factor, "replicas": replicas, "outstanding": round(cap * replicas / factor)}


def _prefix(rng) -> dict:
    prompt = rng.randrange(3000, 8001, 500)
    return {"cached": prompt - rng.choice((250, 500, 1000, 2000)), "prompt": prompt}


def _round_robin(rng) -> dict:
    prompts, replicas = rng.randrange(4, 17, 2), rng.randrange(2, 9)
    return {"replicas": replicas, "requests": prompts * replicas * rng.randrange(4, 13), "prompts": prompts,
            "shared": rng.randrange(1000, 4001, 500), "own": rng.randrange(100, 1001, 100)}


DRILLS = (
    variants.Variant("drill_1", {"before": 8, "after": 9},
                     lambda rng: (lambda n: {"before": n, "after": n + rng.choice((1, 2))})(rng.randrange(4, 17)),
                     "the fraction of keys kept when {before} replicas become {after} under hash mod n"),
    variants.Variant("drill_2", {"factor": 1.25, "replicas": 16, "outstanding": 64}, _cap,
                     "the bounded-load cap (requests) with load factor {factor}, {replicas} replicas and "
                     "{outstanding} requests outstanding before the new one is placed"),
    variants.Variant("drill_3", {"cached": 7000, "prompt": 8000}, _prefix,
                     "the prefill time in ms a cached {cached:,}-token prefix saves on a prompt of {prompt:,} tokens "
                     "(one step of the whole prompt against one step of the rest over the cached prefix)"),
    variants.Variant("drill_4", {"replicas": 6, "requests": 600, "prompts": 12, "shared": 3000, "own": 500},
                     _round_robin,
                     "the hit rate round-robin gets over {replicas} replicas for {requests:,} requests spread over "
                     "{prompts} system prompts of {shared:,} tokens, each with {own} tokens of its own, when every "
                     "replica has seen every prompt once and nothing is evicted"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.before`` and so on."""
    return variants.show(DRILLS, who)
