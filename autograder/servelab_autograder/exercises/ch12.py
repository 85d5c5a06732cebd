"""Chapter 12's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.queueing`, how its result is
read (converted to a plain ``float``, ``int`` or ``bool``, never compared as the learner built it) and shown.
``retry_delay`` and ``retry_after`` take a ``random.Random``: a case carries its seed (or None for no jitter) and the
drivers :func:`drive_retry` and :func:`drive_retry_after` build the generator in the learner's kernel; the reference
goes through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch12``), outside the learner's kernel.
"""

from __future__ import annotations

import math
import random

from servelab.analytic import queueing
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import DEFAULT, Shape, Spec

ASSIGNMENT = "ch12_queueing_and_overload"
_short = common.short_repr(12, 120)


def drive_limit(fn, target_s, service_s, cv2, q):
    """utilization_limit(target_s, service_s, cv2, q), leaving out cv2 and q where the case says DEFAULT."""
    return fn(target_s, service_s, **spec.passed(cv2=cv2, q=q))


def _limit_call(a) -> str:
    kwargs = "".join(f", {k}={v!r}" for k, v in spec.passed(cv2=a[2], q=a[3]).items())
    return f"utilization_limit({a[0]!r}, {a[1]!r}{kwargs})"


def drive_retry(fn, attempt, base_s, cap_s, seed):
    """retry_delay(attempt, base_s, cap_s, rng) with rng = random.Random(seed), or None when seed is None."""
    return fn(attempt, base_s, cap_s, None if seed is None else random.Random(seed))


def drive_retry_after(fn, backlog_tokens, admit_line_tokens, prefill_tokens_per_s, jitter_s, seed):
    """retry_after(backlog, line, rate, jitter_s, rng) with rng = random.Random(seed), or None when seed is None;
    jitter_s and rng left out where the case says DEFAULT."""
    rng = {} if seed == DEFAULT else {"rng": None if seed is None else random.Random(seed)}
    return fn(backlog_tokens, admit_line_tokens, prefill_tokens_per_s, **spec.passed(jitter_s=jitter_s), **rng)


def _retry_after_call(a) -> str:
    rng = "" if a[4] == DEFAULT else ", rng=" + ("None" if a[4] is None else f"random.Random({a[4]!r})")
    jitter = "" if a[3] == DEFAULT else f", jitter_s={a[3]!r}"
    return f"retry_after({a[0]!r}, {a[1]!r}, {a[2]!r}{jitter}{rng})"


# ------------------------------------------------------------------------------------------------
# reading what came back


def _float(raw, args) -> float:
    x = common.as_float(raw, "the result", _short)
    if math.isnan(x):
        raise Shape("the result is nan; expected a number")
    return x


def _utilization(raw, args) -> float:
    x = _float(raw, args)
    if not 0 <= x <= 1:
        raise Shape(f"a utilization is between 0 and 1, not {x!r}")
    return x


def _bool(raw, args) -> bool:
    if not isinstance(raw, bool):
        raise Shape(f"expected True or False, not {_short.repr(raw)}")
    return raw


def _whole_seconds(raw, args) -> int:
    x = common.as_int(raw, "the Retry-After", "seconds", _short, strict=True)
    if x < 0:
        raise Shape(f"a Retry-After is a number of seconds >= 0, not {x}")
    return x


def _retry_after_note(args, got, want) -> str:
    backlog, line, rate = args[:3]
    drain = max(0, backlog - line) / rate
    return f"\n  the backlog drains to the line in {drain:.6g} s" + ("" if args[4] in (None, DEFAULT) else
                                                                   ", before the server's jitter")


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)     # inf == inf; sums in another order


def _close_limit(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6                                           # a bisection's answer, to 1e-6


def _seconds(x: float) -> str:
    return "math.inf" if x == math.inf else f"{x:.10g} s"


def _p_ttft(q: float, rho: float, service_s: float, cv2: float) -> float:
    """The tail approximation's TTFT quantile, written out here (the library's is blocked while grading)."""
    if rho >= 1:
        return math.inf
    mean_wait = rho * service_s * (1 + cv2) / (2 * (1 - rho))
    wait = mean_wait / rho * math.log(rho / (1 - q)) if rho > 1 - q and mean_wait > 0 else 0.0
    return wait + service_s


def _limit_note(args, got, want) -> str:
    target_s, service_s, cv2, q = (_DEFAULTS["utilization_limit"][k] if v == DEFAULT else v
                                   for k, v in zip(("target_s", "service_s", "cv2", "q"), args))
    try:
        at = _p_ttft(q, got, service_s, cv2)
    except (ValueError, ZeroDivisionError, OverflowError):
        return ""
    return (f"\n  at utilization {got:.6g} the p{q * 100:g} TTFT (wait quantile + one prefill) is {at:.6g} s "
            f"against the {target_s:g} s target")


def _drain_note(args, got, want) -> str:
    spike_rate, base_rate, capacity, spike_s = args
    backlog = max(0.0, spike_rate - capacity) * spike_s
    return f"\n  the spike leaves a backlog of {backlog:.6g} requests" if want != math.inf else \
        "\n  the base load alone fills the server: the backlog never drains"


SPECS = {s.name: s for s in [
    Spec("utilization_limit", ("target_s", "service_s", "cv2", "q"), queueing.utilization_limit, _utilization,
         lambda x: f"{x:.9f}", _close_limit, note=_limit_note, driver=f"{__name__}:drive_limit", call=_limit_call),
    Spec("drain_time", ("spike_rate", "base_rate", "capacity", "spike_s"), queueing.drain_time, _float, _seconds,
         _close, note=_drain_note),
    Spec("dead_requests", ("spike_rate", "base_rate", "capacity", "spike_s", "timeout_s"), queueing.dead_requests,
         _float, lambda x: f"{x:.10g} requests", _close),
    Spec("admit_by_deadline", ("backlog_tokens", "prompt_tokens", "prefill_tokens_per_s", "deadline_s"),
         queueing.admit_by_deadline, _bool),
    Spec("retry_delay", ("attempt", "base_s", "cap_s", "seed"), queueing.retry_delay, _float, _seconds, _close,
         driver=f"{__name__}:drive_retry",
         call=lambda a: f"retry_delay(attempt={a[0]!r}, base_s={a[1]!r}, cap_s={a[2]!r}, rng="
                        + ("None)" if a[3] is None else f"random.Random({a[3]!r}))")),
    Spec("retry_after", ("backlog_tokens", "admit_line_tokens", "prefill_tokens_per_s", "jitter_s", "seed"),
         queueing.retry_after, _whole_seconds, lambda x: f"{x} s", note=_retry_after_note,
         driver=f"{__name__}:drive_retry_after", call=_retry_after_call),
]}

_DEFAULTS = {"utilization_limit": {"cv2": 0.0, "q": 0.99}, "retry_delay": {"seed": None},
             "retry_after": {"jitter_s": 0.0, "seed": None}}


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`):
    defaults filled in (``retry_delay``'s generator is its seed)."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS)


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. For ``retry_delay`` and ``retry_after`` pass the generator's seed (or
    None) in its place.
    Never raises."""
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, _DEFAULTS)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): a spike above the capacity over a base load below it
# (one that kills requests at the drawn timeout), a backlog rule that admits again below what is queued

def _spike(rng) -> dict:
    return {"spike": rng.randrange(70, 101, 10), "base": rng.randrange(15, 31, 5), "capacity": rng.randrange(35, 51, 5),
            "seconds": rng.choice((60, 90, 120))}


def _backoff(rng) -> dict:
    """Enough retries that the doubling reaches the cap, so the cap counts."""
    base, cap = rng.choice((0.1, 0.25, 0.5)), rng.choice((1.0, 1.5, 2.0, 4.0))
    reach = next(r for r in range(1, 64) if base * 2 ** (r - 1) > cap)
    return {"retries": reach + rng.randrange(0, 3), "base_s": base, "cap_s": cap}


def _refusal(rng) -> dict:
    """A backlog whose drain takes a fraction of a second more than whole seconds, so rounding up counts."""
    line, rate = rng.randrange(10_000, 40_001, 5000), rng.randrange(8000, 24_001, 2000)
    return {"queued": line + rate * rng.randrange(2, 10) + rng.randrange(1000, rate, 1000), "line": line, "rate": rate}


DRILLS = (
    variants.Variant("drill_1", {"ttft_s": 1.0, "prefill_ms": 150, "sigma": 0.8},
                     lambda rng: {"ttft_s": rng.choice((0.5, 1.0, 2.0)), "prefill_ms": rng.choice((100, 150, 200)),
                                  "sigma": rng.choice((0.5, 0.8, 1.0))},
                     "the highest utilization for a p99 TTFT of {ttft_s} s with {prefill_ms} ms mean prefills, prompts "
                     "log-normal with σ = {sigma}, and a prefill time proportional to the prompt's length (so the "
                     "prefill times' cv² is the lengths')?"),
    variants.Variant("drill_2", {"spike": 80, "base": 25, "capacity": 40, "seconds": 60}, _spike,
                     "seconds to drain after a {seconds} s spike at {spike} requests/s into a capacity of "
                     "{capacity}/s, base load {base}/s?"),
    variants.Variant("drill_3", {"spike": 80, "base": 25, "capacity": 40, "seconds": 60, "timeout": 20},
                     lambda rng: {**_spike(rng), "timeout": rng.choice((10, 20))},
                     "requests served dead in a {seconds} s spike at {spike}/s into {capacity}/s (base load "
                     "{base}/s) with a {timeout} s client timeout?"),
    variants.Variant("drill_4", {"prompt": 3000, "rate": 12_000, "deadline_s": 2},
                     lambda rng: {"prompt": rng.randrange(1000, 6001, 500), "rate": rng.randrange(8000, 20_001, 2000),
                                  "deadline_s": rng.choice((1, 2, 3))},
                     "the largest backlog (prompt tokens) at which a {prompt:,}-token prompt is still admitted, "
                     "{rate:,} tokens/s of prefill and a {deadline_s} s deadline?"),
    variants.Variant("drill_5", {"retries": 5, "base_s": 0.25, "cap_s": 1.5},
                     _backoff,
                     "the longest a client can spend backing off over {retries} retries with base {base_s} s and cap "
                     "{cap_s} s?"),
    variants.Variant("drill_6", {"queued": 90_000, "line": 30_000, "rate": 16_000},
                     _refusal,
                     "the Retry-After (seconds, before the server's jitter) of a refusal with {queued:,} prompt tokens "
                     "queued, a rule that admits again below {line:,} and {rate:,} tokens/s of prefill?"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.sigma`` and so on."""
    return variants.show(DRILLS, who)
