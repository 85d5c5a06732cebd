"""The argument checks the analytic modules share: a whole count at least some floor, a finite positive number.

>>> count("batch", 4), positive("rate", 2)
(4, 2.0)
"""

from __future__ import annotations

import math
import numbers

__all__ = ["count", "positive"]


def count(name: str, value, least: int = 1) -> int:
    """`value` as an int, or ValueError naming `name` when it is not a whole number >= `least` (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def positive(name: str, value, allow_zero: bool = False) -> float:
    """`value` as a float, or ValueError naming `name` when it is not a finite number > 0 (>= 0 with `allow_zero`)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not (value >= 0 if allow_zero else value > 0):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {value!r}")
    return float(value)
