"""The grader's tables, one per chapter (``chNN.py``, holding ``CHAPTER``): what each test cell grades, on which
cases. Trusted side only: the grading sandbox never shows these modules."""

from __future__ import annotations

import importlib
import pkgutil


def tables() -> list:
    """Every chapter table, in chapter order."""
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        chapter = getattr(importlib.import_module(f"{__name__}.{info.name}"), "CHAPTER", None)
        if chapter is not None:
            out.append(chapter)
    return out
