"""Drill numbers drawn for each learner: the same question, your own numbers, so an answer copied from a classmate
is right only for the classmate.

A chapter lists its drills' :class:`Variant`\\ s in its exercise module (``DRILLS``); a locked cell of the notebook
runs ``mine = _grade.drill_numbers()``, which prints the drills with this learner's numbers, and the drills cell
computes from ``mine.drill_1.prompt`` and the like. Who the learner is:

- while graded: the nbgrader student id (the grader sets ``SERVELAB_LEARNER`` in the sandboxed kernel and judges,
  outside it, with the same id: see :mod:`servelab_autograder.judge.verdicts`);
- on a course hub: the hub user (``JUPYTERHUB_USER``);
- alone (neither set, or the local check's student ``me``): nobody in particular, and the numbers are the workbook's
  own (:attr:`Variant.default`), so the notebook reads the same for every self-learner.

The numbers come from a hash of the course id (``SERVELAB_COURSE_ID``, else ``servelab``), the learner and the drill:
fixed for one learner in one course, different across learners and across courses. They are not secret (this file
is public); what makes them per learner is that the grader, not the kernel, decides whose they are.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_COURSE = "servelab"
SELF = ("", "me", "self")      # a learner with the workbook's own numbers (`make check` grades as "me")

_override: list[str] = []      # the trusted side judging as a given learner (`as_learner`)


def learner() -> str:
    """Whose numbers: the learner being graded, else the hub user, else "" (the workbook's own)."""
    if _override:
        return _override[-1]
    return os.environ.get("SERVELAB_LEARNER") or os.environ.get("JUPYTERHUB_USER") or ""


def course() -> str:
    return os.environ.get("SERVELAB_COURSE_ID") or DEFAULT_COURSE


@contextlib.contextmanager
def as_learner(who: str | None):
    """Run a block as learner `who` (None: as the environment says): the grader re-running the solution's drills
    cell for the learner it judges."""
    if who is None:
        yield
        return
    _override.append(who)
    try:
        yield
    finally:
        _override.pop()


class Numbers(dict):
    """One drill's numbers: a dict that also reads as attributes (``mine.drill_1.prompt``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"this drill has no number {name!r}; it has {', '.join(self)}") from None


@dataclass(frozen=True)
class Variant:
    """Drill `name`'s numbers: `default` for a self-learner, `draw(rng)` for anyone else (a dict of the same keys, in
    a range where the question still makes sense), and `text`, the question with the numbers as format fields.
    Drills that ask about one scenario share a `key` (and their default and draw): they get the same numbers."""

    name: str
    default: dict
    draw: Callable[[random.Random], dict]
    text: str
    key: str = ""

    def numbers(self, who: str | None = None, course_id: str | None = None) -> Numbers:
        who = learner() if who is None else who
        if who in SELF:
            return Numbers(self.default)
        key = "\0".join((course() if course_id is None else course_id, who, self.key or self.name)).encode()
        drawn = self.draw(random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big")))
        if set(drawn) != set(self.default):
            raise ValueError(f"{self.name}: draw gave {sorted(drawn)}, the default has {sorted(self.default)}")
        return Numbers(drawn)

    def question(self, numbers: dict) -> str:
        return self.text.format(**numbers)


class Mine(dict):
    """Every drill's numbers for one learner: ``mine.drill_1`` is drill 1's :class:`Numbers`."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no drill named {name!r}; the drills are {', '.join(self)}") from None


def numbers(variants, who: str | None = None, course_id: str | None = None) -> Mine:
    return Mine((v.name, v.numbers(who, course_id)) for v in variants)


def show(variants, who: str | None = None) -> Mine:
    """Print each drill's question with this learner's numbers and return them (the notebook's ``mine``)."""
    who = learner() if who is None else who
    mine = numbers(variants, who)
    print("Your drills (the workbook's own numbers)" if who in SELF else
          f"Your drills (numbers drawn for {who}; a classmate's differ)")
    for v in variants:
        print(f"{v.name}: {v.question(mine[v.name])}")
    return mine


__all__ = ["DEFAULT_COURSE", "Mine", "Numbers", "SELF", "Variant", "as_learner", "course", "learner", "numbers",
           "show"]
