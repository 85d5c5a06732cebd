"""The trusted grading engine: every chapter's test cells judged outside the learner's kernel, from a table.

A chapter declares one :class:`Chapter` (``servelab_autograder/judge/checks/chNN.py``): for each graded test cell,
the exercise it grades (a :class:`~servelab_autograder.exercises.spec.Spec`: parameters, reference, normaliser) and its
cases (fixed ones: the chapter's worked examples, one per pitfall, edge cases; then seeded random ones), or
the drills and their expected values. While grading, for each such cell the grader

1. draws the cases (the random ones from this run's seed, recorded with the result, so a table of
   precomputed answers cannot pass and a run can be reproduced);
2. asks the sandboxed kernel, through :mod:`servelab_autograder.exercises.probe`, to run the learner's code on them and
   hand back plain data (nothing that runs crosses; the test cell's own source never enters the kernel);
3. compares on this side with the reference, with the same :class:`Spec` the learner's visible tests use,
   and on a failing case names the pitfall by running each known-wrong patch of the solution
   (:mod:`servelab_autograder.judge.known_wrong`) on it: where the learner's result equals one, that is the pitfall;
4. writes the cell's output itself (a pass line, or the failure as an error), which nbgrader then scores.

:func:`grade_namespace` does steps 1-3 on a namespace in this process (the tests' proof of every known-wrong
patch, and a learner's own check on a machine without a sandbox); :func:`build_atlas` makes the learner-facing
table of what each pitfall returns on the fixed cases, so visible asserts name pitfalls too.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib
import io
import json
import linecache
import math
import numbers
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab_autograder import paths
from servelab_autograder.exercises import plain
from servelab_autograder.exercises.probe import answer
from servelab_autograder.exercises.spec import SHORT, Shape, Spec, atlas_path, atlas_value, case_key, request_call
from servelab_autograder.exercises.variants import SELF, Variant, as_learner
from servelab_autograder.judge import known_wrong


@dataclass(frozen=True)
class Relation:
    """What the cell's visible asserts demand of the learner's function ``other`` on the same cases:
    ``holds(args, mine, theirs)`` returns a message (None when it holds), both results normalised."""

    other: Spec
    holds: Callable


@dataclass(frozen=True)
class Exercise:
    """Test cell ``cell`` grades ``spec`` on ``fixed()`` cases, then ``random(rng)`` ones."""

    spec: Spec
    cell: str
    fixed: Callable[[], list]
    random: Callable[[random.Random], list] = lambda rng: []
    relations: tuple[Relation, ...] = ()


@dataclass(frozen=True)
class Drill:
    """A drill of "Say it in the interview". A fixed drill has one `expected()` answer. A drill drawn per learner has
    a `variant` (its numbers for each learner, :mod:`servelab_autograder.exercises.variants`) and `answer(numbers)`,
    the reference's answer on those numbers; its `question` and `expected()` are the workbook's own numbers' (what
    the solution prints), `hints` may be a function of the numbers too, and `points(numbers)` are the steps the
    drill describes, which every draw must let run. `who` below is the learner judged ("" = the workbook's own
    numbers)."""

    name: str
    question: str
    expected: Callable[[], float] | None = None
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    hints: tuple[tuple[float, str], ...] | Callable = ()   # (a wrong answer, what it means), for one no patch gives
    variant: Variant | None = None
    answer: Callable[[dict], float] | None = None
    points: Callable[[dict], tuple] | None = None   # a drawn drill's serving points (servelab.analytic.serving)

    def __post_init__(self):
        if self.variant is None:
            if self.expected is None or self.answer is not None:
                raise ValueError(f"{self.name}: a fixed drill gives expected(), a drawn one a variant and answer()")
            return
        if self.answer is None or self.variant.name != self.name:
            raise ValueError(f"{self.name}: a drawn drill needs answer(numbers) and a variant of the same name")
        object.__setattr__(self, "expected", lambda: self.answer(self.variant.numbers("")))
        if not self.question:
            object.__setattr__(self, "question", self.variant.question(self.variant.default))

    def numbers(self, who: str = "") -> dict | None:
        return None if self.variant is None else self.variant.numbers(who)

    def want(self, who: str = ""):
        return self.expected() if self.variant is None or who in SELF else self.answer(self.numbers(who))

    def ask(self, who: str = "") -> str:
        return self.question if self.variant is None or who in SELF else self.variant.question(self.numbers(who))

    def hint_pairs(self, who: str = "") -> tuple[tuple[float, str], ...]:
        return tuple(self.hints(self.numbers(who))) if callable(self.hints) else self.hints

    def whole(self, who: str = "") -> bool:
        """Whether the answer is a count (an int): graded exactly, whatever tolerance the drill names, since a
        tolerance of 1% would take 1,200 where 1,199 is right."""
        return _is_count(self.want(who))

    def accepts(self, got: float, want=None, who: str = "") -> bool:
        want = self.want(who) if want is None else want
        if _is_count(want):
            return got == float(want)
        return math.isclose(got, float(want), rel_tol=self.rel_tol, abs_tol=self.abs_tol)

    def tolerance(self, who: str = "") -> str:
        if self.whole(who):
            return "exactly"
        return f"within {self.abs_tol}" if self.abs_tol else f"within {self.rel_tol:.0%}" if self.rel_tol \
            else "exactly"


def _is_count(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def no_point(numbers: dict) -> tuple:
    """A drawn drill's serving points when it describes no engine step (a schedule's or a cache's counts, a kernel's
    traffic, a queue): none to check."""
    return ()


def unless_right(answer, pairs) -> tuple:
    """The (value, hint) pairs that are wrong answers on these numbers: a drawn drill's common guess (not a pitfall
    the drill is there to catch) may be right for some draws, and is no hint then."""
    return tuple((v, h) for v, h in pairs if v != answer)


@dataclass(frozen=True)
class Drills:
    """Test cell ``cell`` checks the values the learner assigned to the drills' names."""

    cell: str
    drills: tuple[Drill, ...]
    read: Callable   # (value, name) -> float, raising Shape


@dataclass(frozen=True)
class Chapter:
    """A chapter as the grader knows it: its name (``assignment``, the folder under solutions/ and course/), its
    short id, where its notebooks are, and its grading table (the exercises and drills of its test cells)."""

    assignment: str
    exercises: tuple[Exercise, ...]
    drills: Drills | None = None
    prelude: str = ""                    # what the solution cells need to run on the trusted side (imports)
    demos: tuple[str, ...] = ()          # cells that only show the reference: not run while grading
    references: tuple[str, ...] = ()     # "module:name": unavailable in the sandbox while this chapter grades
    setup: tuple[str, ...] = ()          # other cells the graded names need (a class built from the answers)

    @property
    def short(self) -> str:
        """``chNN``: the name of its exercise module, grading table and mutant list."""
        return self.assignment[:4]

    def source(self, root: Path | None = None) -> Path:
        """The solutions notebook (the instructor's, with the answers)."""
        return paths.source_notebook(root or paths.repo_root(), self.assignment)

    def released(self, root: Path | None = None) -> Path:
        """The notebook learners receive, in course/."""
        return paths.release_notebook(root or paths.repo_root(), self.assignment)

    @property
    def cells(self) -> dict:
        """test cell -> the Exercise or Drills grading it."""
        out = {ex.cell: ex for ex in self.exercises}
        if self.drills is not None:
            out[self.drills.cell] = self.drills
        return out


@dataclass
class Verdict:
    passed: bool
    message: str
    ename: str = "AssertionError"


def table(assignment: str) -> Chapter | None:
    """The chapter's table (``servelab_autograder.judge.checks.<chNN>``), or None for a chapter without one."""
    try:
        module = importlib.import_module(f"servelab_autograder.judge.checks.{assignment[:4]}")
    except ModuleNotFoundError:
        return None
    chapter = getattr(module, "CHAPTER", None)
    return chapter if chapter is not None and chapter.assignment == assignment else None


_CASES: dict = {}


def cases(ex: Exercise, seed: int) -> tuple[tuple, ...]:
    """The exercise's fixed cases, then its random ones from ``seed`` (made once per run: a stateful
    chapter's come from reference runs)."""
    key = (id(ex), seed)
    if key not in _CASES or _CASES[key][0] is not ex:
        rng = random.Random(f"{seed}:{ex.spec.name}")
        _CASES[key] = (ex, tuple(tuple(c) for c in [*ex.fixed(), *ex.random(rng)]))
    return _CASES[key][1]


def request(chapter: Chapter, cell: str, seed: int) -> dict:
    """What the kernel is asked for ``cell``: calls of the learner's functions on plain-data cases, or names."""
    graded = chapter.cells[cell]
    if isinstance(graded, Drills):
        return {"names": [d.name for d in graded.drills]}
    args = [plain.encode(list(c)) for c in cases(graded, seed)]
    return {"calls": [request_call(s, args) for s in _specs(graded)]}


def _specs(ex: Exercise) -> list[Spec]:
    """The exercise's spec, then those of the functions its relations compare it with."""
    return list({s.name: s for s in [ex.spec, *(r.other for r in ex.relations)]}.values())


# ------------------------------------------------------------------------------------------------
# the known mistakes, run on this side


def _code(fn):
    """What a patch changes: a function's code object (a Triton kernel's is its Python function's, ``.fn``), or,
    for a class built from the answers, its methods', and those of a class built beside it that it names (a
    scheduler's ``cache_class``)."""
    if isinstance(fn, type):
        return tuple(sorted((k, _code(v) if isinstance(v, type) else v.__code__) for k, v in vars(fn).items()
                            if hasattr(v, "__code__") or (isinstance(v, type) and v is not fn
                                                          and v.__module__ == fn.__module__)))
    return getattr(getattr(fn, "fn", fn), "__code__", None)


class Pitfalls:
    """Each known-wrong patch of a chapter, applied to the solution and run here to name what a wrong result is."""

    def __init__(self, chapter: Chapter, root: Path):
        import nbformat

        root = Path(root)
        self.chapter = chapter
        nb = nbformat.read(chapter.source(root), as_version=4)
        self.solution = known_wrong.solution_cells(nb)
        ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells]
        self.setup = {gid: c.source for gid, c in zip(ids, nb.cells) if gid in chapter.setup}
        self.order = [gid for gid in ids if gid in self.solution or gid in self.setup]
        self.patches = known_wrong.pitfalls(root, chapter.assignment)

    def namespace(self, name: str | None) -> dict:
        """The solution cells (with pitfall ``name`` applied) and the chapter's setup cells, run in notebook
        order, as a learner's namespace, on the workbook's own drill numbers."""
        return self.learner_namespace(name, "")

    @functools.cache  # noqa: B019 - one Pitfalls per grading process
    def learner_namespace(self, name: str | None, who: str) -> dict:
        """`namespace(name)` with the drills' numbers of learner `who` (a drawn drill's patch gives a different wrong
        answer for each learner); whatever the process's environment says."""
        cells = self.solution if name is None else next(p for p in self.patches if p.name == name).apply(self.solution)
        with as_learner(who):
            return self.run(cells, f"__solution_{name or 'ok'}__")

    def run(self, solution: dict[str, str], module: str = "__solution_mutant__") -> dict:
        """``solution`` (grade id -> source of every solution cell) and the chapter's setup cells, run in notebook
        order after the prelude, as a learner's namespace."""
        cells = {**solution, **self.setup}
        ns: dict = {"__name__": module}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(self.chapter.prelude, "prelude", "exec"), ns)
            for gid in self.order:
                # a file name per namespace, its source in linecache: inspect.getsource works on these functions
                # as it does on a notebook's (Triton reads a kernel's source to compile it)
                name = f"<{module}>/{gid}"
                linecache.cache[name] = (len(cells[gid]), None, cells[gid].splitlines(True), name)
                exec(compile(cells[gid], name, "exec"), ns)
        return ns

    def wrong_results(self, spec: Spec, args):
        """(pitfall, what its ``spec.name`` returns on ``args``, normalised) for each known mistake that changes
        that function and does not also break on this input."""
        base = self.namespace(None).get(spec.name)
        for p in self.patches:
            fn = self.namespace(p.name).get(spec.name)
            if fn is None or _code(fn) == _code(base):
                continue
            try:
                yield p, spec.norm(spec.run(fn, args if spec.driver else copy.deepcopy(args)), args)
            except Exception:  # noqa: BLE001 - a mistake that also breaks on this input
                continue

    def name(self, spec: Spec, args, got) -> str | None:
        """The message of the known mistake whose ``spec.name`` returns ``got`` on ``args``, if one does."""
        return next((p.message for p, wrong in self.wrong_results(spec, args) if spec.explains(got, wrong)), None)

    def drill(self, drill: Drill, got: float, who: str = "") -> str | None:
        who = who if drill.variant is not None else ""
        whole = drill.whole(who)
        for p in self.patches:
            value = self.learner_namespace(p.name, who).get(drill.name)
            if isinstance(value, int | float) and value != self.learner_namespace(None, who).get(drill.name) and \
                    (got == float(value) if whole else
                     math.isclose(got, float(value), rel_tol=max(drill.rel_tol, 1e-9), abs_tol=drill.abs_tol)):
                return p.message
        return None


# ------------------------------------------------------------------------------------------------
# judging


def judge(chapter: Chapter, cell: str, seed: int, reply: dict, pitfalls: Pitfalls | None, learner: str = "") -> Verdict:
    """The verdict on ``cell`` from the kernel's ``reply`` (a probe answer, already parsed JSON); drawn drills are
    judged on `learner`'s numbers (the student id the grader was given, never one the kernel reports)."""
    graded = chapter.cells[cell]
    try:
        if isinstance(graded, Drills):
            return _judge_drills(graded, reply.get("values") or {}, pitfalls, learner)
        return _judge_exercise(graded, cases(graded, seed), reply.get("calls") or [], pitfalls)
    except (plain.Malformed, KeyError, TypeError, IndexError) as e:
        return Verdict(False, f"the kernel's answer could not be read ({type(e).__name__}: {e}); the cell scores 0")


def _results(call, name: str, n: int) -> list | Verdict:
    if not isinstance(call, dict) or "missing" in call:
        return Verdict(False, f"name '{name}' is not defined", "NameError")
    results = call.get("results")
    if not isinstance(results, list) or len(results) != n:
        return Verdict(False, f"the kernel answered {len(results) if isinstance(results, list) else 0} of the {n} "
                              f"cases of {name}; the cell scores 0")
    return results


def changed_cells(chapter: Chapter, namespace: dict, base: dict) -> list[str]:
    """The graded cells whose functions differ between ``namespace`` and ``base`` (the others grade alike)."""
    out = []
    for cell, graded in chapter.cells.items():
        names = [d.name for d in graded.drills] if isinstance(graded, Drills) else [s.name for s in _specs(graded)]
        if any(_code(namespace.get(n)) != _code(base.get(n)) or (_code(base.get(n)) is None and
                                                                namespace.get(n) != base.get(n)) for n in names):
            out.append(cell)
    return out


def _judge_exercise(ex: Exercise, args_list: list[tuple], calls: list, pitfalls: Pitfalls | None) -> Verdict:
    specs = _specs(ex)
    if len(calls) != len(specs):
        return Verdict(False, f"the kernel answered {len(calls)} of the {len(specs)} requests; the cell scores 0")
    by_name = {}
    for spec, call in zip(specs, calls):
        results = _results(call, spec.name, len(args_list))
        if isinstance(results, Verdict):
            return results
        by_name[spec.name] = results

    def pitfall_of(s: Spec):
        return None if pitfalls is None else lambda args, got: pitfalls.name(s, args, got)

    spec = ex.spec
    for i, args in enumerate(args_list):
        msg = spec.judge(args, by_name[spec.name][i], pitfall_of(spec))
        if msg is not None:
            return Verdict(False, msg)
    for rel in ex.relations:
        for i, args in enumerate(args_list):
            _, mine = spec.read(args, by_name[spec.name][i])
            msg, theirs = rel.other.read(args, by_name[rel.other.name][i])
            if msg is None:
                msg = rel.holds(args, mine, theirs)
            if msg is not None:
                name = None
                if pitfalls is not None and theirs is not None and not rel.other.same(theirs, rel.other.expected(args)):
                    name = pitfalls.name(rel.other, args, theirs)
                return Verdict(False, f"{name}\n{msg}" if name else msg)
    return Verdict(True, f"{spec.name}: {len(args_list)} cases agree with the reference")


def _judge_drills(d: Drills, values: dict, pitfalls: Pitfalls | None, who: str = "") -> Verdict:
    """Each drill right or not yet, never with its answer: a learner checks their work with this verdict
    (``make check``) and tries again, so it may name the mistake (a hint) but not the number."""
    lines, hints, right, wrong, missing = [], [], 0, [], []
    for drill in d.drills:
        question = drill.ask(who)
        if drill.name not in values:
            missing.append(drill.name)
            lines.append(f"{drill.name} is not defined: assign your answer to {drill.name} ({question})")
            continue
        try:
            got = d.read(plain.decode(values[drill.name]), drill.name)
        except Shape as e:
            wrong.append(drill.name)
            lines.append(f"{e} ({question})")
            continue
        if drill.accepts(got, who=who):
            right += 1
            lines.append(f"{drill.name} = {got:.6g}: right")
            continue
        wrong.append(drill.name)
        hint = None
        if drill.variant is not None and who not in SELF and drill.accepts(got, who=""):
            hint = ("That is the answer on the workbook's own numbers: your drills are drawn for you (the cell above "
                    "the drills prints them); answer on those.")
        hint = hint or (pitfalls.drill(drill, got, who) if pitfalls is not None else None)
        hint = hint or next((h for value, h in drill.hint_pairs(who) if math.isclose(got, value, rel_tol=1e-9)), None)
        lines.append(f"{drill.name} = {got:.6g}: not yet right; {drill.name} is {question.rstrip('?')} (graded "
                     f"{drill.tolerance(who)})")
        if hint:
            hints.append(hint)
    if not wrong and not missing:
        return Verdict(True, f"drills: all {len(d.drills)} answers are right")
    head = f"drills: {right} of {len(d.drills)} right" + (f"; not yet: {', '.join(wrong)}" if wrong else "") \
        + (f"; not answered: {', '.join(missing)}" if missing else "")
    return Verdict(False, "\n".join([*dict.fromkeys(hints), head, *lines]))  # a named pitfall first, as elsewhere


def grade_namespace(chapter: Chapter, namespace: dict, seed: int, root: Path | None = None,
                    pitfalls: Pitfalls | None = None, cells=None, stop_early: bool = False,
                    learner: str = "") -> dict[str, Verdict]:
    """test cell -> Verdict for a learner's ``namespace`` graded in this process (no kernel, no sandbox): the
    same requests, answers as plain data and judgement as a sandboxed grading (``cells``: only these; drawn
    drills on ``learner``'s numbers).

    ``stop_early``: the verdict alone, as fast as it can be had (mutation testing grades thousands of wrong
    programs): an exercise's cases are asked for and judged one at a time, up to the first that fails, and no
    pitfall is named."""
    if stop_early:
        return {cell: _first_failure(chapter, cell, seed, namespace, learner) for cell in cells or chapter.cells}
    pitfalls = pitfalls or Pitfalls(chapter, root or paths.repo_root())
    out = {}
    for cell in cells or chapter.cells:
        reply = json.loads(json.dumps(answer(request(chapter, cell, seed), namespace)))
        out[cell] = judge(chapter, cell, seed, reply, pitfalls, learner)
    return out


def _first_failure(chapter: Chapter, cell: str, seed: int, namespace: dict, learner: str = "") -> Verdict:
    """``cell``'s verdict without a pitfall's name, judging one case at a time up to the first failing one."""
    graded = chapter.cells[cell]
    if isinstance(graded, Drills):
        reply = json.loads(json.dumps(answer(request(chapter, cell, seed), namespace)))
        return judge(chapter, cell, seed, reply, None, learner)
    all_cases = cases(graded, seed)
    for args in all_cases:
        req = {"calls": [request_call(s, [plain.encode(list(args))]) for s in _specs(graded)]}
        try:
            verdict = _judge_exercise(graded, [args], json.loads(json.dumps(answer(req, namespace)))["calls"], None)
        except (plain.Malformed, KeyError, TypeError, IndexError) as e:
            verdict = Verdict(False, f"the kernel's answer could not be read ({type(e).__name__}: {e})")
        if not verdict.passed:
            return verdict
    return Verdict(True, f"{graded.spec.name}: {len(all_cases)} cases agree with the reference")


# ------------------------------------------------------------------------------------------------
# the learner-facing atlas: what each pitfall returns on the fixed cases


def build_atlas(chapter: Chapter, pitfalls: Pitfalls) -> dict:
    """exercise -> {case key: [[pitfall, normalised wrong result (or its digest)], ...]} over the fixed cases,
    for each pitfall whose result differs from the reference's there; ``"$pitfalls"``: pitfall -> message."""
    atlas: dict = {"$pitfalls": {}}
    for ex in chapter.exercises:
        spec = ex.spec
        entries: dict = {}
        for args in map(tuple, ex.fixed()):
            want = spec.expected(args)
            for p, wrong in pitfalls.wrong_results(spec, args):
                if not spec.same(wrong, want):
                    entries.setdefault(case_key(args), []).append([p.name, atlas_value(spec, wrong)])
                    atlas["$pitfalls"][p.name] = p.message
        atlas[spec.name] = entries
    return atlas


def atlas_text(chapter: Chapter, root: Path) -> str:
    return json.dumps(build_atlas(chapter, Pitfalls(chapter, root)), indent=0, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    from servelab_autograder.judge import checks

    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.judge.verdicts",
                                     description="Write the pitfall atlas of every chapter that has a table.")
    parser.add_argument("--check", action="store_true", help="exit 1 if an atlas differs from a fresh build")
    args = parser.parse_args(argv)
    root = paths.repo_root()
    stale = []
    for chapter in checks.tables():
        text = atlas_text(chapter, root)
        path = atlas_path(chapter.assignment)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(chapter.assignment)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(root)} ({len(text)} bytes)")
    if stale:
        print(f"stale pitfall atlas: {', '.join(stale)} (run python -m servelab_autograder.judge.verdicts)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["SHORT", "Chapter", "Drill", "Drills", "Exercise", "Pitfalls", "Relation", "Verdict", "grade_namespace",
           "judge", "no_point", "request", "table", "unless_right"]
