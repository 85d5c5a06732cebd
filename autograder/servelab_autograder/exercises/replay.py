"""Record and replay: how a stateful exercise is run without the references of the exercises it calls.

A stateful exercise (nano-vllm's ``schedule``, the radix tree's ``insert``, the scheduler hook
``cache_finished_req``) calls other exercises whose references the grading sandbox does not have. A run of the
reference is **recorded** (:class:`Recording`, on the trusted side or in the learner's lab): each call of an
exercise with the state it was made in, and, in a frame open while that call runs, every call it made of the
others, keyed (:func:`key`, :func:`digest`) by what that call depends on, with its result and the state it left.

The driver in the learner's kernel **replays** that table (:class:`Replay`): a call the reference made in the same
state gets the reference's answer; any other raises :class:`Diverged`, the one exception every chapter uses. A
correct method makes the same calls in the same states; a wrong one reaches a state the reference never did, and
the first such call is kept even when the code under test catches the exception. Nothing here can answer a call
on an input of its own, so nothing here is a reference to copy.

Each chapter says what its calls are keyed by and what its state is (ch02: the scheduler; ch04 and ch05: the tree,
``radix_record``). :func:`once_per_workload` makes each reference run once (ch10's runs too).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from servelab_autograder.exercises import plain


class Diverged(Exception):
    """The code under test made a call of another exercise in a state in which the reference never made it."""

    def __init__(self, call: str, state=None):
        super().__init__(call)
        self.call, self.state = call, state


def key(data) -> str:
    """What a recorded call is found by: a short hash of JSON data."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def digest(*parts) -> str:
    """:func:`key` of any plain data (tuples and dicts whose keys are not strings included)."""
    return key(plain.encode(list(parts)))


class Replay:
    """The kernel side: the reference's answers (``tables``: call name -> key -> entry), and the first call that
    found none."""

    def __init__(self, tables: dict):
        self.tables = tables
        self.diverged: Diverged | None = None

    def get(self, name: str, at: str):
        """The reference's entry for the call ``name`` keyed ``at``, or None."""
        return self.tables[name].get(at)

    def diverge(self, call: str, state: Callable[[], object] = lambda: None):
        """Raise Diverged for ``call``; the first one is kept, with ``state()``: the state it was made in."""
        d = Diverged(call, state() if self.diverged is None else None)
        self.diverged = self.diverged or d
        raise d

    def run(self, call: Callable[[], object]) -> tuple[str, object]:
        """``call()`` under the replay: ("ok", its result), ("diverged", the first Diverged, which counts even when
        the code under test caught it) or ("raised", the exception: the reference raises on bad input too). A
        stub's NotImplementedError goes on up."""
        try:
            got = call()
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - part of the result
            if self.diverged is None:
                return "raised", e
            return "diverged", self.diverged
        return ("diverged", self.diverged) if self.diverged is not None else ("ok", got)


@dataclass
class Frame:
    """One call being recorded: its text, and the tables of the calls made inside it."""
    call: str
    tables: dict = field(default_factory=dict)


class Recording:
    """The recording side: ``cases`` (exercise -> the calls of it, each with the state it was made in), and a stack
    of frames, one per call whose inner calls are being recorded."""

    def __init__(self, exercises):
        self.cases: dict = {name: [] for name in exercises}
        self.frames: list[Frame] = []

    @contextlib.contextmanager
    def frame(self, call: str, names) -> Iterator[Frame]:
        """A frame for ``call``, collecting the calls of ``names`` made until it closes (even by an exception)."""
        frame = Frame(call, {name: {} for name in names})
        self.frames.append(frame)
        try:
            yield frame
        finally:
            self.frames.pop()

    def note(self, name: str, at: str, entry) -> None:
        """The answer to a call of ``name`` keyed ``at``, for the innermost open frame (none open: not needed)."""
        if self.frames:
            self.frames[-1].tables[name][at] = entry


def once_per_workload(record: Callable[[dict], object]) -> Callable[[dict], object]:
    """``record(work)``, made once per workload (the same JSON) and kept: the visible checks and the grader ask for
    the same runs again and again."""
    made: dict = {}

    @functools.wraps(record)
    def once(work: dict):
        at = json.dumps(work, sort_keys=True)
        if at not in made:
            made[at] = record(work)
        return made[at]

    return once


__all__ = ["Diverged", "Frame", "Recording", "Replay", "digest", "key", "once_per_workload"]
