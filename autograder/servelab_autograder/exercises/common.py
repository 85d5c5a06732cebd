"""What the chapters' learner-facing modules share: how a learner's values are shown and read.

- :func:`short_repr`: the ``reprlib.Repr`` a chapter's messages show learner values with;
- :class:`Shape`, :func:`as_int`, :func:`whole_number`, :func:`as_float`: what the learner's code returned,
  converted to plain values (never compared as it is);
- :func:`not_filled`: the message for a stub still raising NotImplementedError.

Verdicts are made outside the learner's kernel (``servelab_autograder.judge.verdicts``): nothing here needs to watch
the learner's code, and nothing here decides a score.
"""

from __future__ import annotations

import math
import numbers
import reprlib

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


def some(items, sep: str = ", ", k: int = 8) -> str:
    """The first k items joined, and how many more: a step of a thousand requests stays one readable line."""
    items = list(items)
    return sep.join(map(str, items[:k])) + (f"{sep}... ({len(items) - k} more)" if len(items) > k else "")


def as_int(x, what: str, unit: str, short: reprlib.Repr, strict: bool = False) -> int:
    """``x`` as an int, when it is a whole number (a whole float included, unless ``strict``: a contract that
    returns an int) but not a bool; ``what`` names it, ``unit`` says what it counts."""
    if isinstance(x, bool):
        raise Shape(f"{what} is {x!r}, a bool; expected an integer")
    if isinstance(x, numbers.Integral):
        return int(x)
    if strict and isinstance(x, numbers.Real) and math.isfinite(float(x)) and float(x).is_integer():
        raise Shape(f"{what} is {x!r}, a float; return it as an int, a whole number of {unit}")
    if isinstance(x, numbers.Real) and math.isfinite(float(x)) and float(x).is_integer():
        return int(float(x))
    raise Shape(f"{what} is {short.repr(x)}; expected a whole number of {unit}")


def whole_number(x, what: str, short: reprlib.Repr) -> int:
    """``x`` when it is an int (not a bool, not a float, even a whole one): a count a drill asks for."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise Shape(f"{what} is {short.repr(x)}; it must be a whole number (int)")
    return x


def as_float(x, what: str, short: reprlib.Repr, finite: bool = False, strict: bool = False) -> float:
    """``x`` as a float, when it is a real number but not a bool (and, when ``finite``, neither inf nor nan; when
    ``strict``, not an int either: a contract that returns a float)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise Shape(f"{what} is {short.repr(x)} ({type(x).__name__}); expected a number")
    if strict and isinstance(x, numbers.Integral):
        raise Shape(f"{what} is {x!r}, an int; return a float ({float(x)!r})")
    x = float(x)
    if finite and not math.isfinite(x):
        raise Shape(f"{what} is {x}; expected a finite number")
    return x


# --------------------------------------------------------------------------------------------------------
# what the learner's code raised


def not_filled(what: str) -> str:
    """The message for a stub still raising NotImplementedError (``what``: the call, in the learner's terms)."""
    return f"{what} raised NotImplementedError: fill in the function first"
