"""Chapter 03's exercise on the half of a request's work nobody knows on arrival: ``mlfq_level``, the level of a
skip-join multi-level feedback queue (FastServe's) a request is at, compared with :func:`servelab.analytic.ordering.
mlfq_level`. Its :data:`SPECS` join chapter 03's (``ch03.SPECS``), so ``_grade.diagnose`` and the grading table find it.
"""

from __future__ import annotations

from servelab.analytic import ordering
from servelab_autograder.exercises import common
from servelab_autograder.exercises.spec import Spec

_short = common.short_repr(12, 120)


def _level(raw, args) -> int:
    return common.as_int(raw, "the result", "levels", _short, strict=True)


def _level_note(args, got, want) -> str:
    first, attained, q, levels = args
    entry = ordering.mlfq_entry_level(first, q, levels)
    quanta = ", ".join(str(q << k) for k in range(min(levels, 8))) + (", ..." if levels > 8 else "")
    return (f"\n  quanta {quanta} over {levels} levels: a first iteration of {first} joins level {entry}, and "
            f"{attained} of service in all leaves it at level {want}")


SPECS = {"mlfq_level": Spec("mlfq_level", ("first_iteration", "attained", "first_quantum", "levels"),
                            ordering.mlfq_level, _level, lambda v: f"level {v}", note=_level_note)}
