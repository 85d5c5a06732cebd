"""Chapter 01's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.batching`, how its result is
read (converted to plain ``int`` / ``float`` / ``list``, never compared as the learner built it) and shown.
:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden
cases and the verdicts are the grader's (``servelab_autograder.judge.checks.ch01``), outside the learner's kernel.
"""

from __future__ import annotations

import math
import numbers

from servelab.analytic import batching as ref
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch01_continuous_batching"
_short = spec.SHORT


def as_int(x, what: str) -> int:
    """A count of steps: an int, not a float even when whole (8.0 is what a float division left behind)."""
    if isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral) and float(x).is_integer():
        raise Shape(f"{what} is {x!r}, a float; return it as an int, a whole number of steps")
    return common.as_int(x, what, "steps", _short)


def as_float(x, what: str) -> float:
    return common.as_float(x, what, _short)


def _as_int_list(x, n: int, what: str) -> list[int]:
    if not isinstance(x, list):
        raise Shape(f"{what} is a {type(x).__name__}; return it as a list")
    if len(x) != n:
        raise Shape(f"{what} has {len(x)} entries; expected one per request ({n})")
    return [as_int(v, f"{what}[{i}]") for i, v in enumerate(x)]


def _norm_total_finish(raw, args) -> tuple[int, list[int]]:
    if not isinstance(raw, tuple) or len(raw) != 2:
        raise Shape("expected a tuple (total_steps, finish)")
    return as_int(raw[0], "total_steps"), _as_int_list(raw[1], len(args[0]), "finish")


def _norm_schedule(raw, args) -> tuple[list[int], list[int], list[int]]:
    if not isinstance(raw, tuple) or len(raw) != 3:
        raise Shape("expected a tuple (start, finish, delay) of three lists")
    n = len(args[1])
    return tuple(_as_int_list(v, n, name) for v, name in zip(raw, ("start", "finish", "delay")))


def _total_only(args, got, want) -> str:
    if got[0] != want[0] and got[1] == want[1]:
        return f" The finish list is right but total_steps is {got[0]}, not {want[0]}."
    return ""


def _close(rel: float):
    return lambda a, b: math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def show_pmf(pmf) -> str:
    nz = [(k, p) for k, p in enumerate(pmf, start=1) if p > 0]
    if len(nz) <= 12:
        return "pmf with P(L=k) = {" + ", ".join(f"{k}: {p:.4g}" for k, p in nz) + "}"
    return f"pmf over lengths 1..{len(pmf)} (mean {ref.pmf_mean(pmf):.4g})"


def _float(raw, args) -> float:
    """A fraction or a mean: a float, 0.0 included. An int is kept as an int, so it never equals the reference's
    float (an int says a count, or a // that truncated, was meant)."""
    if isinstance(raw, numbers.Integral) and not isinstance(raw, bool):
        return int(raw)
    return as_float(raw, "the result")


def _typed_close(rel: float):
    """Floats within ``rel`` of each other; an int never equals a float (the contract returns a float)."""
    return lambda a, b: isinstance(a, int) == isinstance(b, int) and math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _not_an_int(args, got, want) -> str:
    return f" It is an int ({got!r}); return a float." if isinstance(got, int) else ""


def _fmt(x: float) -> str:
    return f"{x:.6g}"


SPECS = {s.name: s for s in [
    Spec("simulate_static", ("out_lens", "B"), ref.simulate_static, _norm_total_finish, note=_total_only),
    Spec("simulate_continuous", ("out_lens", "B"), ref.simulate_continuous, _norm_total_finish, note=_total_only),
    Spec("utilization", ("out_lens", "B", "total_steps"), ref.utilization, _float, _fmt, _typed_close(1e-9),
         note=_not_an_int, alike=_close(1e-9)),
    Spec("lower_bound", ("out_lens", "B"), ref.lower_bound, lambda raw, args: as_int(raw, "the result")),
    Spec("simulate_continuous_arrivals", ("arrivals", "out_lens", "B"), ref.simulate_continuous_arrivals,
         _norm_schedule, lambda s: f"(start={s[0]}, finish={s[1]}, delay={s[2]})"),
    Spec("expected_max", ("pmf", "B"), ref.expected_max, _float, _fmt, _typed_close(1e-7), {"pmf": show_pmf},
         note=_not_an_int, alike=_close(1e-7)),
]}


def diagnose(fn, *args, name: str | None = None) -> str:
    """What is wrong with ``fn(*args)`` in the learner's terms (a visible assert's message), or a note that this
    input is handled correctly. Never raises."""
    return spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, args, name)


def call(fn, *args):
    """``fn(*args)`` for a visible assert on an edge case: when it raises (``max([])`` on an empty list), the assert
    fails with the message ``diagnose`` gives, which names the case, as ``make check`` does, not a bare traceback."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - the learner's exception is what the message reports
        raise AssertionError(diagnose(fn, *args)) from None


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): a long request first, with the short ones beside
# it and enough short ones that they set the end, means long enough that H_B is the geometric gain within 0.03, a
# bimodal mix with a rare long mode, a workload whose size is no multiple of B (so the sort order counts)

def _one_long(rng) -> dict:
    batch, long, short = rng.randrange(3, 9), rng.randrange(60, 201, 10), rng.randrange(10, 41, 5)
    least = -(-2 * (batch - 1) * long // short)         # enough short ones that they, not the long one, set the end
    return {"long": long, "count": rng.randrange(least, least + 30), "short": short, "batch": batch}


def _uniform(rng) -> dict:
    batch = rng.choice((16, 32, 64))
    return {"n": batch * rng.randrange(30, 63) + rng.randrange(1, batch), "seed": rng.randrange(0, 100), "batch": batch}


DRILLS = (
    variants.Variant("drill_1", {"long": 120, "count": 40, "short": 30, "batch": 4}, _one_long,
                     "one {long}-token request then {count} {short}-token requests, `B = {batch}`, continuous "
                     "batching: how many steps?"),
    variants.Variant("drill_2", {"mean": 1000, "batch": 8},
                     lambda rng: {"mean": rng.choice((500, 1000, 2000)), "batch": rng.randrange(4, 17)},
                     "output lengths are geometric with mean {mean} tokens, `B = {batch}`, many requests: the "
                     "predicted static/continuous gain (within 0.03)?"),
    variants.Variant("drill_3", {"short_pct": 90, "short": 50, "long": 1000, "batch": 32},
                     lambda rng: {"short_pct": rng.choice((80, 90, 95)), "short": rng.randrange(20, 101, 10),
                                  "long": rng.randrange(500, 2001, 100), "batch": rng.choice((8, 16, 32, 64))},
                     "{short_pct}% of requests generate {short} tokens and the rest {long}, `B = {batch}`: the "
                     "predicted gain (within 1%)?"),
    variants.Variant("drill_4", {"mean": 100, "batch": 256},
                     lambda rng: {"mean": rng.choice((50, 100, 200)), "batch": rng.choice((64, 128, 256, 512))},
                     "output lengths are geometric with mean {mean}, `B = {batch}`, many requests: the predicted gain "
                     "(within 1%)?"),
    variants.Variant("drill_5", {"n": 2000, "seed": 3, "batch": 32}, _uniform,
                     "the {n} uniform lengths `workloads.output_lengths({n}, \"uniform\", seed={seed}, lo=1, hi=200)`, "
                     "sorted shortest first (`sorted(lens)`), static batching at `B = {batch}`: how many steps?"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.long`` and so on."""
    return variants.show(DRILLS, who)
