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
from servelab_autograder.exercises import common, spec
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
