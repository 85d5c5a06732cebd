"""Hidden-test helpers for ``ch01_continuous_batching``.

Each ``check_<exercise>(fn)`` compares a learner's function with the reference in
:mod:`servelab.batching` on the lesson's cases, on a case for every named pitfall, on edge cases and on many
seeded random cases. Results are converted to plain ``int`` / ``float`` / ``list`` before any comparison;
nothing the learner built is compared with ``==``. A failure raises ``AssertionError`` (explicitly, so the
checks also work under ``python -O``) whose message shows the input, what the learner returned, what was
expected and, when the wrong answer is what a known pitfall produces, the pitfall's name (on the first
line, since graders often report only an error's first line).

:func:`diagnose` builds the same message for one input without raising; the visible asserts use it as
their message, so a learner sees the pitfall's name as soon as a visible test fails.
"""

from __future__ import annotations

import copy
import math
import random
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

from servelab import batching as ref
from servelab_autograder import common

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_drills",
    "check_expected_max",
    "check_lower_bound",
    "check_simulate_continuous",
    "check_simulate_continuous_arrivals",
    "check_simulate_static",
    "check_utilization",
    "diagnose",
]

# Every pitfall the chapter names, in the words of its "Common pitfalls" list. The known-wrong submissions
# in autograder/known_wrong/ch01_continuous_batching/ each produce one of these messages.
PITFALLS = {
    "static_no_wait": "Pitfall: static batch does not wait for its longest request: the next batch starts "
    "only when the longest request of the current one finishes.",
    "static_sum": "Pitfall: a batch's requests run side by side, so a batch costs the max of its lengths, "
    "not their sum.",
    "static_max_all": "Pitfall: only B requests run at once; the total is the sum over batches of each "
    "batch's longest request, not one max over all requests.",
    "static_finish_batch_end": "Pitfall: a request finishes when its own tokens are done (batch start + its "
    "length); only its slot idles until the batch ends.",
    "continuous_round_robin": "Pitfall: the next request takes the earliest-free slot (heappop), not the "
    "next slot round-robin.",
    "continuous_last_finish": "Pitfall: the total is the latest finish, max(finish), not the last request's "
    "finish.",
    "continuous_is_static": "Pitfall: that is static batching: under continuous batching a finished request "
    "hands its slot to the next one at once.",
    "utilization_per_request": "Pitfall: utilization divides by the B * total_steps slot-steps on offer, not "
    "B * len(out_lens).",
    "utilization_no_B": "Pitfall: there are B slots per step: divide by B * total_steps, not total_steps.",
    "utilization_int_div": "Pitfall: integer division (//) truncates the fraction to 0; use /.",
    "utilization_inverted": "Pitfall: utilization is useful tokens over slot-steps on offer, not the "
    "other way round.",
    "lower_bound_floor": "Pitfall: round sum(out_lens) / B up (ceil), not down: a partial step is still a "
    "step.",
    "lower_bound_no_longest": "Pitfall: the longest request alone needs max(out_lens) steps, however many "
    "slots are free.",
    "lower_bound_no_tokens": "Pitfall: B slots make at most B tokens a step, so at least ceil(sum(out_lens) "
    "/ B) steps are needed too.",
    "arrivals_early_start": "Pitfall: a request cannot start before it arrives: start = max(arrival, "
    "earliest free slot).",
    "arrivals_list_order": "Pitfall: serve requests first come first served by arrival step, not in list "
    "order.",
    "arrivals_delay_latency": "Pitfall: queueing delay is start - arrival (steps waiting for a slot), not "
    "finish - arrival.",
    "expected_max_population": "Pitfall: E[max of B draws] is not the longest possible length; it only "
    "approaches it as B grows.",
    "expected_max_cdf_at_k": "Pitfall: P(max >= k) = 1 - F(k - 1)^B uses the CDF just below k, not F(k).",
    "expected_max_mean": "Pitfall: that is E[L] of one draw; the max of B draws is larger.",
    "expected_max_min": "Pitfall: that is E[min of B draws]: the max is below k only if all B draws are, so "
    "P(max >= k) = 1 - F(k - 1)^B.",
    "expected_max_times_B": "Pitfall: the max of B draws is not their sum B * E[L].",
    "gain_inverted": "Pitfall: the gain is E[max of B lengths] / E[L] (static steps over continuous steps), "
    "not its inverse.",
}

_short = common.short_repr(24, 120)


# --------------------------------------------------------------------------------------------------------
# converting what the learner returned into plain values


_Shape = common.Shape      # the learner's result does not have the promised shape


def _as_int(x, what: str) -> int:
    return common.as_int(x, what, "steps", _short)


def _as_float(x, what: str) -> float:
    return common.as_float(x, what, _short)


def _as_int_list(x, n: int, what: str) -> list[int]:
    if not isinstance(x, list):
        raise _Shape(f"{what} is a {type(x).__name__}; return it as a list")
    if len(x) != n:
        raise _Shape(f"{what} has {len(x)} entries; expected one per request ({n})")
    return [_as_int(v, f"{what}[{i}]") for i, v in enumerate(x)]


def _norm_total_finish(raw, args) -> tuple[int, list[int]]:
    if not isinstance(raw, tuple) or len(raw) != 2:
        raise _Shape("expected a tuple (total_steps, finish)")
    return _as_int(raw[0], "total_steps"), _as_int_list(raw[1], len(args[0]), "finish")


def _norm_schedule(raw, args) -> tuple[list[int], list[int], list[int]]:
    if not isinstance(raw, tuple) or len(raw) != 3:
        raise _Shape("expected a tuple (start, finish, delay) of three lists")
    n = len(args[1])
    return tuple(_as_int_list(v, n, name) for v, name in zip(raw, ("start", "finish", "delay")))


def _fmt_float(x: float) -> str:
    return f"{x:.6g}"


# --------------------------------------------------------------------------------------------------------
# pitfall models: what a known mistake returns, used to name the mistake


def _batches(lens, B):
    return [list(range(s, min(s + B, len(lens)))) for s in range(0, len(lens), B)]


def _round_robin(lens, B):
    free, finish = [0] * B, []
    for i, L in enumerate(lens):
        free[i % B] += L
        finish.append(free[i % B])
    return max(finish, default=0), finish


def _arrivals_list_order(arrivals, lens, B):
    n = len(lens)
    start, finish, slots = [0] * n, [0] * n, [0] * min(B, n)
    for i in range(n):
        free = slots.pop(slots.index(min(slots)))
        start[i] = max(arrivals[i], free)
        finish[i] = start[i] + lens[i]
        slots.append(finish[i])
    return start, finish, [s - a for s, a in zip(start, arrivals)]


def _cdf_sum(pmf, B, term, shift):
    total, cdf = 0.0, 0.0
    for p in pmf:
        if shift:
            cdf += p
        total += term(min(cdf, 1.0), B)
        if not shift:
            cdf += p
    return total


def _close(a: float, b: float, rel: float = 1e-7) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


# how a batch that "does not wait for its longest request" advances the clock: by its last, first or
# shortest request
_NO_WAIT_PICKS = (
    lambda lens, b: lens[b[-1]],
    lambda lens, b: lens[b[0]],
    lambda lens, b: min(lens[i] for i in b),
)


def _static_pitfall(args, got, want):
    lens, B = args
    total, finish = got
    batches = _batches(lens, B)
    if total != want[0]:
        if total == sum(lens):
            return "static_sum"
        if total == max(lens, default=0):
            return "static_max_all"
        if any(total == sum(pick(lens, b) for b in batches) for pick in _NO_WAIT_PICKS):
            return "static_no_wait"
        return None
    batch_end, t = [0] * len(lens), 0
    for b in batches:
        t += max(lens[i] for i in b)
        for i in b:
            batch_end[i] = t
    return "static_finish_batch_end" if finish == batch_end else None


def _continuous_pitfall(args, got, want):
    lens, B = args
    total, finish = got
    if lens and finish == want[1] and total == want[1][-1] != want[0]:
        return "continuous_last_finish"
    if got == _round_robin(lens, B):
        return "continuous_round_robin"
    if got == ref.simulate_static(lens, B):
        return "continuous_is_static"
    return None


def _utilization_pitfall(args, got, want):
    lens, B, total = args
    tokens = sum(lens)
    if lens and _close(got, tokens / (B * len(lens))):
        return "utilization_per_request"
    if total and _close(got, tokens / total):
        return "utilization_no_B"
    if got == 0.0 and want > 0:
        return "utilization_int_div"
    if tokens and _close(got, B * total / tokens):
        return "utilization_inverted"
    return None


def _lower_bound_pitfall(args, got, want):
    lens, B = args
    if not lens:
        return None
    if got == max(max(lens), sum(lens) // B):
        return "lower_bound_floor"
    if got == -(-sum(lens) // B):
        return "lower_bound_no_longest"
    if got == max(lens):
        return "lower_bound_no_tokens"
    return None


def _arrivals_pitfall(args, got, want):
    arrivals, lens, B = args
    start, finish, delay = got
    if any(s < a for s, a in zip(start, arrivals)):
        return "arrivals_early_start"
    if got == _arrivals_list_order(arrivals, lens, B):
        return "arrivals_list_order"
    if start == want[0] and delay == [f - a for f, a in zip(finish, arrivals)]:
        return "arrivals_delay_latency"
    return None


def _expected_max_pitfall(args, got, want):
    pmf, B = args
    top = max(k for k, p in enumerate(pmf, start=1) if p > 0)
    mean = ref.pmf_mean(pmf)
    if _close(got, top, 1e-6):
        return "expected_max_population"
    if _close(got, _cdf_sum(pmf, B, lambda F, b: 1.0 - F**b, shift=True), 1e-6):
        return "expected_max_cdf_at_k"
    if _close(got, mean, 1e-6):
        return "expected_max_mean"
    if _close(got, _cdf_sum(pmf, B, lambda F, b: (1.0 - F) ** b, shift=False), 1e-6):
        return "expected_max_min"
    if _close(got, B * mean, 1e-6):
        return "expected_max_times_B"
    return None


# --------------------------------------------------------------------------------------------------------
# cases


def _random_lens(rng: random.Random, max_n: int, max_len: int) -> list[int]:
    return [rng.randint(1, max_len) for _ in range(rng.randint(1, max_n))]


def _static_cases():
    yield [20, 200, 50, 30], 2  # the lesson
    yield [5, 1, 1, 1], 2  # the lesson
    yield [9, 1, 1, 8, 2, 2], 3  # the longest is neither first nor last in its batch
    yield [1, 2, 3, 4, 5, 6, 7], 3  # a partial last batch
    yield [5, 5, 5], 2
    yield [], 3
    yield [7], 1
    yield [3, 1, 2], 5  # B > number of requests
    rng = random.Random(1011)
    for k in range(300):
        yield _random_lens(rng, 3 + k // 20, 40), rng.randint(1, 8)


def _continuous_cases():
    yield [20, 200, 50, 30], 2
    yield [5, 1, 1, 1], 2
    yield [9, 1, 1, 8, 2, 2], 3
    yield [1, 2, 3, 4, 5, 6, 7], 3
    yield [], 3
    yield [7], 1
    yield [3, 1, 2], 5
    rng = random.Random(2022)
    for k in range(300):
        yield _random_lens(rng, 3 + k // 20, 40), rng.randint(1, 8)


def _utilization_cases():
    yield [20, 200, 50, 30], 2, 250
    yield [20, 200, 50, 30], 2, 200
    yield [5, 1, 1, 1], 2, 6
    yield [5, 1, 1, 1], 2, 5
    yield [], 4, 0
    rng = random.Random(3033)
    for _ in range(200):
        lens, B = _random_lens(rng, 15, 40), rng.randint(1, 8)
        steps = rng.choice([ref.simulate_static(lens, B)[0], ref.simulate_continuous(lens, B)[0],
                            ref.lower_bound(lens, B), ref.lower_bound(lens, B) + rng.randint(1, 50)])
        yield lens, B, steps


def _lower_bound_cases():
    yield [20, 200, 50, 30], 2
    yield [5, 1, 1, 1], 2
    yield [5, 5, 5], 2  # ceil(7.5) = 8
    yield [1, 1, 1, 1, 1], 2
    yield [9], 4
    yield [], 3
    rng = random.Random(4044)
    for _ in range(200):
        yield _random_lens(rng, 15, 40), rng.randint(1, 8)


def _arrivals_cases():
    yield [0, 0, 1, 6], [4, 2, 3, 1], 2  # the docstring example
    yield [0, 0, 0, 0], [20, 200, 50, 30], 2  # all at step 0: simulate_continuous
    yield [0, 10], [3, 3], 2  # a late request starts when it arrives
    yield [0, 100], [5, 5], 1  # the engine idles until the next arrival
    yield [5, 0, 0], [1, 1, 1], 1  # unsorted arrivals: first come first served
    yield [3, 3, 0, 3], [2, 9, 4, 1], 2  # ties keep list order
    yield [], [], 2
    rng = random.Random(5055)
    for k in range(300):
        lens = _random_lens(rng, 3 + k // 25, 20)
        arrivals = [rng.randint(0, 30) for _ in lens]
        if rng.random() < 0.5:
            arrivals.sort()
        yield arrivals, lens, rng.randint(1, 5)


def _random_pmf(rng: random.Random, n: int) -> list[float]:
    weights = [rng.choice([0, 0, 1, 2, 3, 5, 8]) for _ in range(n)]
    weights[rng.randrange(n)] += 1
    total = sum(weights)
    return [w / total for w in weights]


def _expected_max_cases():
    yield [0.5, 0.5], 2
    yield [1.0], 1
    yield [1.0], 4
    yield ref.constant_pmf(5), 4
    yield ref.uniform_pmf(1, 10), 3
    yield [0.25, 0.5, 0.25], 2
    yield ref.geometric_pmf(10, max_len=60), 8
    yield [0.9 if k == 50 else 0.1 if k == 1000 else 0.0 for k in range(1, 1001)], 32
    rng = random.Random(6066)
    for _ in range(200):
        yield _random_pmf(rng, rng.randint(1, 30)), rng.randint(1, 16)


# --------------------------------------------------------------------------------------------------------
# the exercises


@dataclass(frozen=True)
class _Exercise:
    name: str
    params: tuple[str, ...]
    norm: Callable
    pitfall: Callable
    cases: Callable
    show: Callable = repr
    close: Callable | None = None  # float comparison; None means exact


def _show_pmf(pmf) -> str:
    nz = [(k, p) for k, p in enumerate(pmf, start=1) if p > 0]
    if len(nz) <= 12:
        return "pmf with P(L=k) = {" + ", ".join(f"{k}: {p:.4g}" for k, p in nz) + "}"
    return f"pmf over lengths 1..{len(pmf)} (mean {ref.pmf_mean(pmf):.4g})"


_EXERCISES = {
    "simulate_static": _Exercise(
        "simulate_static", ("out_lens", "B"), _norm_total_finish, _static_pitfall, _static_cases),
    "simulate_continuous": _Exercise(
        "simulate_continuous", ("out_lens", "B"), _norm_total_finish, _continuous_pitfall, _continuous_cases),
    "utilization": _Exercise(
        "utilization", ("out_lens", "B", "total_steps"), lambda raw, args: _as_float(raw, "the result"),
        _utilization_pitfall, _utilization_cases, show=_fmt_float, close=lambda a, b: _close(a, b, 1e-9)),
    "lower_bound": _Exercise(
        "lower_bound", ("out_lens", "B"), lambda raw, args: _as_int(raw, "the result"), _lower_bound_pitfall,
        _lower_bound_cases),
    "simulate_continuous_arrivals": _Exercise(
        "simulate_continuous_arrivals", ("arrivals", "out_lens", "B"), _norm_schedule, _arrivals_pitfall,
        _arrivals_cases, show=lambda s: f"(start={s[0]}, finish={s[1]}, delay={s[2]})"),
    "expected_max": _Exercise(
        "expected_max", ("pmf", "B"), lambda raw, args: _as_float(raw, "the result"), _expected_max_pitfall,
        _expected_max_cases, show=_fmt_float, close=lambda a, b: _close(a, b, 1e-7)),
}


def _call_text(ex: _Exercise, args) -> str:
    parts = []
    for name, value in zip(ex.params, args):
        text = _show_pmf(value) if name == "pmf" else _short.repr(value)
        parts.append(f"{name}={text}")
    return f"{ex.name}({', '.join(parts)})"


def _reference(ex: _Exercise, args):
    return ex.norm(getattr(ref, ex.name)(*args), args)


def _check_case(ex: _Exercise, fn, args) -> None:
    """Raise AssertionError (learner's terms) unless ``fn(*args)`` matches the reference."""
    call = _call_text(ex, args)
    mine = copy.deepcopy(args)
    try:
        raw = fn(*mine)
    except NotImplementedError:
        raise AssertionError(common.not_filled(call)) from None
    except Exception as e:
        raise AssertionError(f"{call} raised {type(e).__name__}: {e}") from e
    if list(mine) != list(args):  # plain lists of numbers on both sides
        raise AssertionError(f"{call} changed its input lists; leave the caller's data alone")
    try:
        got = ex.norm(raw, args)
    except _Shape as e:
        raise AssertionError(f"{call} returned {_short.repr(raw)}: {e}") from None
    want = _reference(ex, args)
    same = ex.close(got, want) if ex.close else got == want
    if same:
        return
    msg = f"{call} returned {ex.show(got)}; expected {ex.show(want)}."
    if ex.name in ("simulate_static", "simulate_continuous") and got[0] != want[0] and got[1] == want[1]:
        msg += f" The finish list is right but total_steps is {got[0]}, not {want[0]}."
    key = ex.pitfall(args, got, want)
    if key:  # the pitfall's name goes first: graders often show only an error's first line
        msg = PITFALLS[key] + "\n" + msg
    raise AssertionError(msg)


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


# reference functions that compute an exercise's answer; small helpers (pmf_mean, harmonic, the *_pmf
# builders) stay allowed
_ANSWERING = frozenset({
    "simulate_static", "simulate_continuous", "naive_continuous", "utilization", "lower_bound",
    "slot_assignments", "simulate_continuous_arrivals", "simulate_static_arrivals", "expected_max",
    "predicted_gain",
})


def _is_answering(obj) -> bool:
    return callable(obj) and getattr(obj, "__module__", None) == ref.__name__ \
        and getattr(obj, "__name__", None) in _ANSWERING


def _reject_reference(fn, name: str) -> None:
    """The learner's function must be their own, not servelab.batching's (directly or by calling it)."""
    if not callable(fn):
        raise AssertionError(f"{name} is {_short.repr(fn)}, not a function")
    inner = getattr(fn, "func", fn)  # functools.partial
    if getattr(inner, "__module__", None) == ref.__name__ or getattr(inner, "__code__", None) is getattr(
            ref, name).__code__:
        raise AssertionError(f"{name} is servelab.batching.{name} itself; write your own version")
    code = getattr(inner, "__code__", None)
    if code is None:
        return
    scope = getattr(inner, "__globals__", {})
    cells = [c.cell_contents for c in (getattr(inner, "__closure__", None) or ()) if _cell_filled(c)]
    names = {nm for c in _code_objects(code) for nm in c.co_names}
    used = [scope.get(nm) for nm in names] + cells
    modules = (ref, sys.modules.get("servelab"))
    if any(_is_answering(obj) for obj in used) or (
            any(obj is m for obj in used for m in modules) and names & _ANSWERING):
        raise AssertionError(f"{name} calls the reference in servelab.batching; write it without it")


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _check_exercise(name: str, fn) -> None:
    ex = _EXERCISES[name]
    _reject_reference(fn, name)
    for args in ex.cases():
        _check_case(ex, fn, args)


def check_simulate_static(fn) -> None:
    """Hidden test of exercise 1."""
    _check_exercise("simulate_static", fn)


def check_simulate_continuous(fn) -> None:
    """Hidden test of exercise 2."""
    _check_exercise("simulate_continuous", fn)


def check_utilization(fn) -> None:
    """Hidden test of exercise 3."""
    _check_exercise("utilization", fn)


def check_lower_bound(fn) -> None:
    """Hidden test of exercise 4."""
    _check_exercise("lower_bound", fn)


def check_simulate_continuous_arrivals(fn) -> None:
    """Hidden test of exercise 5."""
    _check_exercise("simulate_continuous_arrivals", fn)


def check_expected_max(fn) -> None:
    """Hidden test of exercise 6."""
    _check_exercise("expected_max", fn)


def diagnose(fn, *args, name: str | None = None) -> str:
    """What is wrong with ``fn(*args)`` in the learner's terms (the message a failing check would raise),
    or a note that this input is handled correctly. Never raises; meant as a visible assert's message."""
    name = name or getattr(fn, "__name__", "")
    ex = _EXERCISES.get(name)
    if ex is None:
        return f"{name} gave an unexpected result for {_short.repr(args)}"
    try:
        _check_case(ex, fn, tuple(copy.deepcopy(a) for a in args))
    except AssertionError as e:
        return str(e)
    return f"{_call_text(ex, args)} is correct on this input"


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview"

_BIMODAL_PMF = [0.9 if k == 50 else 0.1 if k == 1000 else 0.0 for k in range(1, 1001)]
_DRILL_1_LENS = [300] + [20] * 30

# name -> (question, expected value computed by the reference, absolute tolerance, relative tolerance)
DRILLS = {
    "drill_1": ("steps of continuous batching for one 300-token request then thirty 20-token ones, B = 4",
                lambda: ref.simulate_continuous(_DRILL_1_LENS, 4)[0], 0.0, 0.0),
    "drill_2": ("predicted static/continuous gain for geometric lengths with mean 1000, B = 8",
                lambda: ref.predicted_gain(ref.geometric_pmf(1000), 8), 0.03, 0.0),
    "drill_3": ("predicted gain when 90% of requests generate 50 tokens and 10% generate 1000, B = 32",
                lambda: ref.predicted_gain(_BIMODAL_PMF, 32), 0.0, 0.01),
}


def _drill_pitfall(name: str, got: float, want: float) -> str | None:
    if name == "drill_1":
        if got == ref.simulate_static(_DRILL_1_LENS, 4)[0]:
            return PITFALLS["continuous_is_static"]
        if got == -(-sum(_DRILL_1_LENS) // 4):
            return PITFALLS["lower_bound_no_longest"]
        return None
    if math.isclose(got * want, 1.0, rel_tol=0.02):
        return PITFALLS["gain_inverted"]
    if name == "drill_3" and math.isclose(got, 1000 / ref.pmf_mean(_BIMODAL_PMF), rel_tol=0.01):
        return PITFALLS["expected_max_population"]
    return None


def check_drills(answers) -> None:
    """Hidden test of the drills. ``answers``: a mapping with ``drill_1``..``drill_3`` (e.g. ``globals()``)
    or a sequence of the three values in order."""
    for name, (question, expected, abs_tol, rel_tol), answer in common.drill_answers(answers, DRILLS):
        try:
            got = _as_float(answer, name)
        except _Shape as e:
            raise AssertionError(f"{e} ({question})") from None
        want = float(expected())
        if not math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol):
            tol = f"within {abs_tol}" if abs_tol else f"within {rel_tol:.0%}" if rel_tol else "exactly"
            msg = f"{name} = {got:.6g}, but the {question} is {want:.4g} ({tol})."
            hint = _drill_pitfall(name, got, want)
            if hint:
                msg = hint + "\n" + msg
            raise AssertionError(msg)
