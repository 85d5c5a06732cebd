"""Machinery the chapters' hidden-test helpers share.

- :func:`short_repr`: the ``reprlib.Repr`` a chapter's messages show learner values with;
- :class:`Shape`, :func:`as_int`, :func:`as_float`: what the learner's code returned, converted to plain values
  (never compared as it is);
- :func:`not_filled`, :class:`LearnerError`, :func:`learner_error`, :func:`raised_in`: what the learner's code
  raised, in the learner's terms (a stub's ``NotImplementedError`` says to fill the function in);
- :func:`codes`, :func:`reject_reference`, :func:`profiling`, :class:`ReferenceWatch`, :func:`watched`: the
  learner's code must be the learner's, neither the reference's function object nor a call into it while the
  learner's code runs;
- :func:`time_limit`: an endless loop in the learner's code becomes a failure, not a hang;
- :func:`drill_answers`, :func:`check_whole_number_drills`: the drills of "Say it in the interview";
- :func:`diagnose`: a check's message without raising, for a visible assert.

Every message a learner sees is built here exactly as the chapters built it; each chapter module keeps its own
public names (``check_*``, ``diagnose``, ...) and its own exception classes, whose names a grader reports.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import reprlib
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence

# --------------------------------------------------------------------------------------------------------
# showing learner values


def short_repr(maxlist: int, maxother: int, maxlevel: int = 3) -> reprlib.Repr:
    """A ``reprlib.Repr`` for messages: lists and tuples cut after ``maxlist`` items, ``maxlevel`` levels deep,
    strings and other objects after ``maxother`` characters."""
    short = reprlib.Repr()
    short.maxlist = short.maxtuple = maxlist
    short.maxlevel = maxlevel
    short.maxother = maxother
    short.maxstring = maxother
    return short


# --------------------------------------------------------------------------------------------------------
# plain values out of what the learner returned


class Shape(Exception):
    """The learner's result does not have the promised shape (message in the learner's terms)."""


def as_int(x, what: str, unit: str, short: reprlib.Repr) -> int:
    """``x`` as an int, when it is a whole number (a whole float included) but not a bool; ``what`` names it,
    ``unit`` says what it counts."""
    if isinstance(x, bool):
        raise Shape(f"{what} is {x!r}, a bool; expected an integer")
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real) and math.isfinite(float(x)) and float(x).is_integer():
        return int(float(x))
    raise Shape(f"{what} is {short.repr(x)}; expected a whole number of {unit}")


def as_float(x, what: str, short: reprlib.Repr, finite: bool = False) -> float:
    """``x`` as a float, when it is a real number but not a bool (and, when ``finite``, neither inf nor nan)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise Shape(f"{what} is {short.repr(x)} ({type(x).__name__}); expected a number")
    x = float(x)
    if finite and not math.isfinite(x):
        raise Shape(f"{what} is {x}; expected a finite number")
    return x


# --------------------------------------------------------------------------------------------------------
# what the learner's code raised


def not_filled(what: str) -> str:
    """The message for a stub still raising NotImplementedError (``what``: the call, in the learner's terms)."""
    return f"{what} raised NotImplementedError: fill in the function first"


class LearnerError(Exception):
    """The learner's code raised or returned something malformed (message in their terms)."""


def raised_in(e: BaseException) -> str:
    """' (in BlockManager.allocate)': the function the exception came from, when it is not the caller's."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" (in {tb.tb_frame.f_code.co_qualname})" if tb is not None else ""


def learner_error(what: str, e: Exception) -> LearnerError:
    """The LearnerError to raise when ``what`` (the learner's call) raised ``e``."""
    if isinstance(e, NotImplementedError):
        return LearnerError(not_filled(what))
    return LearnerError(f"{what} raised {type(e).__name__}: {e}{raised_in(e)}")


# --------------------------------------------------------------------------------------------------------
# the learner's code must be the learner's: neither the reference's function objects nor calls into them


def codes(*fns, module: bool = False) -> dict[types.CodeType, str]:
    """{code object: qualified name} of reference functions (the module's name in front when ``module``)."""
    return {fn.__code__: f"{fn.__module__}.{fn.__qualname__}" if module else fn.__qualname__ for fn in fns}


def reject_reference(fn, key: str, forbidden: Mapping, short: reprlib.Repr, itself: str | None = None) -> None:
    """Refuse ``fn`` for exercise ``key`` when it is not a function, or when it is (behind ``functools.partial``
    too) one of the reference functions in ``forbidden`` ({code object: name}); the message names it as
    ``itself``, or else by its entry in ``forbidden``."""
    if not callable(fn):
        raise AssertionError(f"{key} is {short.repr(fn)}, not a function")
    if isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(fn, "__code__", None)
    if code in forbidden:
        raise AssertionError(f"{key} is {itself or forbidden[code]} itself; write your own version")


@contextlib.contextmanager
def profiling(profile: Callable):
    """Run the block with ``profile`` as the ``sys.setprofile`` hook, then restore the previous one."""
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)


def _wrap(fn, key: str, active: list[str]):
    # The wrapper's code is named "_wrap.<locals>.method", and messages can show it: raised_in names the frame a
    # learner's function was called from when the call itself fails (a wrong signature). Keep the names.
    def method(*args, **kwargs):
        active.append(key)
        try:
            return fn(*args, **kwargs)
        finally:
            active.pop()
    method.__name__ = method.__qualname__ = key
    return method


class ReferenceWatch:
    """Which reference functions each exercise's learner code must not call, and which learner functions are
    running now. ``forbidden``: exercise -> {code object: name} (the watch reads it live, so entries added later
    count); ``error``: the chapter's exception class for a refused call."""

    def __init__(self, forbidden: dict[str, dict], error: type[AssertionError]):
        self.forbidden = forbidden
        self.error = error
        self.active: list[str] = []     # learner functions currently running (innermost last)

    def wrap(self, fn, key: str):
        """The learner's function, marking the time it runs (reference calls made meanwhile are refused)."""
        return _wrap(fn, key, self.active)

    @contextlib.contextmanager
    def no_calls(self, package: str):
        """Raise the chapter's error if, while the block runs, a wrapped learner function calls a reference function
        its exercise must not call (through self, super(), an import or a copy of its code); ``package`` is the
        module the names in ``forbidden`` are relative to."""
        hits: list = []
        active, forbidden = self.active, self.forbidden

        def profile(frame, event, arg):
            if event == "call" and active:
                code = frame.f_code
                for key in active:
                    if code in forbidden[key]:
                        hits.append((key, forbidden[key][code]))

        try:
            with profiling(profile):
                yield
        finally:
            if hits:
                key, called = hits[0]
                raise self.error(
                    f"your {key} calls {package}.{called} (through self, super(), an import or a copy): "
                    f"the checks compare your code with that reference, so write {key} yourself")


def watched(i: int, first: int = 2) -> bool:
    """Whether the i-th case of a check runs under the reference-call watch (which slows it down): the first
    ``first`` cases and every tenth."""
    return i < first or i % 10 == 0


# --------------------------------------------------------------------------------------------------------
# endless loops


class _Timeout(BaseException):  # not an Exception: code under test that catches those does not swallow it
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raise AssertionError if the block runs longer than `seconds` (an endless loop). Only in the main thread,
    where the kernel and pytest run code; elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout()

    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]   # an enclosing limit: restored afterwards
    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left else seconds)
    try:
        yield
    except _Timeout:
        if outer_left and outer_left <= seconds:
            raise _Timeout() from None    # the enclosing limit ran out: let it report
        raise AssertionError(f"{what} did not finish within {seconds:g} s: an endless loop?") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 1e-3))


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview"


def drill_answers(answers, drills: Mapping[str, tuple]) -> Iterator[tuple[str, tuple, object]]:
    """(name, the drill's entry in ``drills``, the learner's answer) for each drill in order. ``answers``: a
    mapping with the drills' names (e.g. ``globals()``) or a sequence of the answers in order. An entry starts
    with the question; a drill without an answer raises."""
    if not isinstance(answers, Mapping):
        if not isinstance(answers, Sequence) or len(answers) != len(drills):
            raise AssertionError(f"pass the {len(drills)} drill answers as a mapping or a sequence")
        answers = dict(zip(drills, answers))
    for name, entry in drills.items():
        if name not in answers:
            raise AssertionError(f"{name} is not defined: assign your answer to {name} ({entry[0]})")
        yield name, entry, answers[name]


def check_whole_number_drills(answers, drills: Mapping[str, tuple], short: reprlib.Repr) -> None:
    """Drills whose answers are whole numbers: ``drills`` maps a name to (question, a function computing the
    expected value with the reference, {known wrong answer: hint})."""
    for name, (question, compute, hints), got in drill_answers(answers, drills):
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(float(got)) \
                or not float(got).is_integer():
            raise AssertionError(f"{name} is {short.repr(got)}; the {question} is a whole number")
        got, want = int(got), int(compute())
        if got != want:
            msg = f"{name} = {got}, but that is not the {question}."
            if got in hints:
                msg += "\n" + hints[got]
            raise AssertionError(msg)


# --------------------------------------------------------------------------------------------------------
# messages for visible asserts


def diagnose(checks: Mapping[str, Callable], exercise: str, obj, agrees: str) -> str:
    """What the check of ``exercise`` says about ``obj``, without raising; ``agrees`` completes "<exercise> agrees
    with ..." for an ``obj`` that passes the check (so the assert's own case is the one it gets wrong)."""
    check = checks.get(exercise)
    if check is None:
        return f"no check named {exercise!r}"
    try:
        check(obj)
    except Exception as e:  # noqa: BLE001 - the message is the point
        return str(e)
    return (f"{exercise} agrees with {agrees}, but not on this assert's case: compare your code with the rule the "
            "assert states")
