"""Mutation testing of the hidden tests: small wrong programs made from each solution cell, graded by the tables.

A chapter's hidden cases are proved against its known-wrong patches, the mistakes the author thought of. This
module makes the others systematically: for each solution cell of a chapter (the code between BEGIN/END
SOLUTION in ``solutions/<a>/<a>.ipynb``) it changes one thing at a time, with the operators of :data:`OPERATORS`
(a comparison or an arithmetic operator swapped, a constant moved by one, ``int`` / ``round`` / ``math.ceil`` /
``math.floor`` swapped, a copy or a conversion removed, an int result returned as a float or the reverse, a
return or a branch removed, a loop or a search capped, a condition's operands or order swapped), and grades each
such *mutant* through the trusted engine in this process (:func:`servelab_autograder.judge.verdicts.grade_namespace`,
stopping at the first failing case), on the test cells whose functions it changed only.

A mutant is *killed* when a graded cell fails (a time-out or a crash counts too), *equivalent* when the chapter's
committed list (``autograder/mutants/<assignment>.toml``) says why no input the contract allows tells it from the
solution, and *survived* otherwise: a hidden case is missing. Each mutant has a stable id, a short hash of the
exercise, the operator and the mutated source (``ast.unparse``), so the lists stay valid across runs; a mutant
that does not compile or unparses to the solution's own source is not a mutant.

Mutants run in forked children, two at a time by default, each under a CPU-time limit (``RLIMIT_CPU``: a
mutated bound can loop for ever) and a wall-clock backstop. Trusted side only: the sandbox never shows this
module (``sandbox.KERNEL_SIDE``).

    python -m servelab_autograder.judge.mutants [chNN ...] [--jobs 2]
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import json
import os
import resource
import select
import signal
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from servelab_autograder import paths
from servelab_autograder.judge.mutate import Mutant, Seen, instrument, mutate

MUTANTS_DIR = "autograder/mutants"
SEED = 0                      # one fixed seed: a run's verdicts, and so its report, are reproducible
MIN_CPU_S = 10.0              # a mutant's CPU limit: at least this, or a multiple of the solution's own time
CPU_FACTOR = 5.0
WALL_FACTOR = 4.0             # wall-clock backstop: this many times the CPU limit (a loaded machine)
# chapter -> test cells graded on their fixed cases only (the Triton interpreter runs a kernel slowly)
FIXED_ONLY = {"ch06": True}


# ------------------------------------------------------------------------------------------------
# the committed lists of equivalent programs


def list_path(root: Path, assignment: str) -> Path:
    return Path(root) / MUTANTS_DIR / f"{assignment}.toml"


def equivalents(root: Path, assignment: str) -> dict[str, dict]:
    """id -> {exercise, operator, line, reason} of the chapter's committed equivalent programs."""
    path = list_path(root, assignment)
    if not path.is_file():
        return {}
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {e["id"]: e for e in data.get("equivalent", [])}


def toml_entry(m: Mutant, reason: str) -> str:
    """A mutant as an entry of the committed list (the reason still to be written when empty)."""
    def q(s):
        return json.dumps(s, ensure_ascii=False)
    return (f"[[equivalent]]\nid = {q(m.id)}\nexercise = {q(m.exercise)}\noperator = {q(m.operator)}\n"
            f"line = {q(m.line)}\nreason = {q(reason)}\n")


# ------------------------------------------------------------------------------------------------
# grading


@dataclass
class Prepared:
    """One chapter ready to grade mutants: its table, pitfalls, the solution's namespace and its mutants."""

    chapter: object
    pitfalls: object
    base: dict
    mutants: list[Mutant]
    cpu_s: dict[str, float] = field(default_factory=dict)   # test cell -> the solution's CPU time on it


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _graded_cells(chapter, assignment: str) -> dict:
    """The chapter's graded cells as the mutants see them (chapter 06's on their fixed cases only)."""
    return chapter.cells


def prepare(root: Path, chapter) -> Prepared:
    """Everything a forked child needs, made once in the parent: the pitfalls, the solution's namespace, the
    cases of the run's seed (cached by the engine), and the solution graded once (it must pass)."""
    from servelab_autograder.judge import verdicts

    if FIXED_ONLY.get(chapter.short):
        chapter = _fixed_only(chapter)
    pitfalls = verdicts.Pitfalls(chapter, root)
    base = pitfalls.namespace(None)
    cpu_s = {}
    for cell in chapter.cells:
        t0 = _cpu()
        v = verdicts.grade_namespace(chapter, dict(base), SEED, pitfalls=pitfalls, cells=[cell], stop_early=True)
        cpu_s[cell] = _cpu() - t0
        if not v[cell].passed:
            raise RuntimeError(f"{chapter.assignment}: the solution fails {cell} on seed {SEED}: {v[cell].message}")
    seen = observe(chapter, pitfalls)
    mutants = [m for cell, src in pitfalls.solution.items() for m in mutate(cell, src, seen)]
    return Prepared(chapter, pitfalls, base, mutants, cpu_s)


def observe(chapter, pitfalls) -> Seen:
    """The kinds of number each return of the solution hands back while every cell of the chapter is graded."""
    from servelab_autograder.judge import verdicts

    seen = Seen()
    cells = {gid: instrument(gid, src) for gid, src in pitfalls.solution.items()}
    builtins.__mutant_seen__ = seen
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            verdicts.grade_namespace(chapter, pitfalls.run(cells), SEED, pitfalls=pitfalls, stop_early=True)
    finally:
        del builtins.__mutant_seen__
    return seen


def _fixed_only(chapter):
    import dataclasses

    return dataclasses.replace(chapter, exercises=tuple(dataclasses.replace(ex, random=lambda rng: [])
                                                        for ex in chapter.exercises))


def grade_mutant(prep: Prepared, m: Mutant) -> tuple[str, str]:
    """(outcome, detail) for one mutant, in this process: "killed" (the failing cell and its message's first
    line), "equivalent-value" (a drills mutant whose every value is the solution's, or within the tolerance each
    drill's question states: counts are exact) or "survived"."""
    from servelab_autograder.judge import verdicts

    cells = {**prep.pitfalls.solution, m.exercise: m.source}
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ns = prep.pitfalls.run(cells)
    except Exception as e:  # noqa: BLE001 - a mutant whose cell raises when run: killed
        return "killed", f"the cell raised {type(e).__name__}: {e}"[:300]
    changed = verdicts.changed_cells(prep.chapter, ns, prep.base)
    if not changed:
        return "equivalent-value", "every graded name is the solution's own value"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        got = verdicts.grade_namespace(prep.chapter, ns, SEED, pitfalls=prep.pitfalls, cells=changed,
                                       stop_early=True)
    for cell, v in got.items():
        if not v.passed:
            return "killed", f"{cell}: {v.message.splitlines()[0] if v.message else ''}"[:300]
    drills = prep.chapter.drills
    if drills is not None and changed == [drills.cell]:
        # a drill's question states its tolerance (a count is exact): an answer inside it is a right answer
        return "equivalent-value", "every drill value is within the tolerance its question states"
    return "survived", ", ".join(changed)


def _limit(prep: Prepared, m: Mutant) -> float:
    return max(MIN_CPU_S, CPU_FACTOR * sum(prep.cpu_s.values()))


def run_chapter(prep: Prepared, jobs: int = 2, progress: Callable | None = None) -> dict[str, tuple[str, str]]:
    """id -> (outcome, detail) for every mutant of a prepared chapter, ``jobs`` forked children at a time."""
    results: dict[str, tuple[str, str]] = {}
    pending = list(prep.mutants)
    running: dict[int, tuple[Mutant, int, float, float]] = {}   # pid -> (mutant, read fd, start, wall limit)
    while pending or running:
        while pending and len(running) < jobs:
            m = pending.pop(0)
            cpu = _limit(prep, m)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:   # the child: grade, write one JSON line, leave without cleanup
                os.close(r)
                code = 0
                try:
                    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu) + 1, int(cpu) + 3))
                    outcome = grade_mutant(prep, m)
                except BaseException as e:  # noqa: BLE001 - anything that escapes: killed
                    outcome, code = ("killed", f"the grading raised {type(e).__name__}"), 0
                os.write(w, json.dumps(outcome).encode())
                os.close(w)
                os._exit(code)
            os.close(w)
            running[pid] = (m, r, time.monotonic(), cpu * WALL_FACTOR)
        fds = {r: pid for pid, (_, r, _, _) in running.items()}
        select.select(list(fds), [], [], 0.5)
        for pid, (m, r, start, wall) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == 0 and time.monotonic() - start > wall:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                results[m.id] = ("killed", f"past the wall-clock backstop ({wall:.0f} s)")
            elif done == 0:
                continue
            else:
                data = _read_all(r)
                if data:
                    results[m.id] = tuple(json.loads(data))
                else:
                    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                    why = "past its CPU-time limit" if sig in (signal.SIGXCPU, signal.SIGKILL) else \
                        f"the grading process died ({signal.Signals(sig).name if sig else os.WEXITSTATUS(status)})"
                    results[m.id] = ("killed", why)
            os.close(r)
            del running[pid]
            if progress:
                progress(m, results[m.id])
    return results


def _one_thread() -> None:
    """torch on one thread in this process, before anything runs: a child forked after a parallel region waits
    for ever on the thread pool it did not inherit (and each mutant runs on one core anyway)."""
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


# ------------------------------------------------------------------------------------------------
# the report


@dataclass
class Report:
    assignment: str
    killed: int
    equivalent: int
    survived: list[Mutant]
    stale: list[str]               # listed ids that no longer survive or are no longer generated
    seconds: float

    def line(self) -> str:
        return f"{self.assignment[:4]}: {self.killed} killed, {self.equivalent} equivalent (explained), " \
               f"{len(self.survived)} survived"


def report(root: Path, prep: Prepared, results: dict, seconds: float) -> Report:
    listed = equivalents(root, prep.chapter.assignment)
    killed = equivalent = 0
    survived = []
    for m in prep.mutants:
        outcome = results[m.id][0]
        if outcome == "killed":
            killed += 1
        elif outcome == "equivalent-value" or (m.id in listed and listed[m.id].get("reason", "").strip()):
            equivalent += 1
        else:
            survived.append(m)
    generated = {m.id: results[m.id][0] for m in prep.mutants}
    stale = [i for i in listed if generated.get(i) in (None, "killed")]
    return Report(prep.chapter.assignment, killed, equivalent, survived, stale, seconds)


def main(argv: list[str] | None = None) -> int:
    from servelab_autograder.judge import checks

    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.judge.mutants",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter prefixes (ch01 ...); all when none")
    parser.add_argument("--jobs", type=int, default=2, help="mutants graded at the same time (default 2)")
    parser.add_argument("--list", action="store_true", help="print each chapter's mutants and exit")
    parser.add_argument("--survivors-toml", type=Path, help="write the survivors as list entries to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per mutant graded")
    args = parser.parse_args(argv)
    root = paths.repo_root()
    tables = [c for c in checks.tables() if not args.chapters or any(c.assignment.startswith(p)
                                                                      for p in args.chapters)]
    if not tables:
        print(f"no chapter matches {' '.join(args.chapters)}", file=sys.stderr)
        return 2
    _one_thread()
    start = time.monotonic()
    reports, toml = [], []
    for chapter in tables:
        t0 = time.monotonic()
        prep = prepare(root, chapter)
        if args.list:
            for m in prep.mutants:
                print(f"{m.id} {m.exercise} {m.operator}: {m.line}")
            continue

        def progress(m, outcome):
            if args.verbose:
                print(f"  {m.id} {m.exercise} {m.operator} {outcome[0]}: {outcome[1][:100]}", flush=True)

        results = run_chapter(prep, args.jobs, progress)
        rep = report(root, prep, results, time.monotonic() - t0)
        reports.append(rep)
        print(f"{rep.line()}  ({rep.seconds:.0f} s)", flush=True)
        for m in rep.survived:
            print(f"  survived {m.id} {m.exercise} [{m.operator}]: {m.line}", flush=True)
            toml.append(f"# {rep.assignment}\n" + toml_entry(m, ""))
        for i in rep.stale:
            print(f"  listed as equivalent but killed or no longer generated: {i}", flush=True)
    if args.list:
        return 0
    k, e, s = (sum(r.killed for r in reports), sum(r.equivalent for r in reports),
               sum(len(r.survived) for r in reports))
    print(f"total: {k} killed, {e} equivalent (explained), {s} survived  ({time.monotonic() - start:.0f} s)")
    if args.survivors_toml:
        args.survivors_toml.write_text("\n".join(toml), encoding="utf-8")
    return 1 if s or any(r.stale for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
