"""Check your own work: grade your course/ notebooks as the instructor would (``make check``).

    python -m servelab_autograder.course.check [CHAPTER ...] [--seed N]  # make check / make check CH=ch03_token_budget

For each chapter (default: every chapter under course/) this grades a copy of
``course/<chapter>/<chapter>.ipynb`` with the hidden tests and the drill checks, through the same trusted
path as ``make autograde`` (``servelab_autograder.runner.grade``: your kernel runs in a sandbox, the verdicts are
made outside it, limits in CPU time). Your notebook is never changed. Unsaved edits are not seen: save in
JupyterLab first, or run ``%check`` in the notebook (``servelab_autograder.exercises.magic``), which saves it and
runs this. On a course hub it grades as the hub user (``--student``'s default); ``%check`` there also keeps the
progress in ``~/.servelab`` (``--state``).

It prints, per exercise, the points and what lost them (the pitfall your code matches, or the first
wrong case), a drill as right or "not yet" (never its answer), and one line per chapter. Your progress
(each chapter's latest and best score) is kept in ``.servelab/progress.json`` (git-ignored) and printed
at the end; the graded notebook and its feedback page are under ``.servelab/check/``.

Where this machine cannot make the sandbox (no bubblewrap, or no user namespaces), your notebook runs
without one, as you, and the report says so: it is your own code. Exit status 0 when grading ran
(whatever the scores), 1 when it broke, 2 for an unknown chapter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from servelab_autograder import paths
from servelab_autograder.runner import jobs, nbgrader_process, results, sandbox, submission

STUDENT = "me"               # the student id of a local check; on a hub, the hub user (--student)
STATE = ".servelab"          # under the repository root, git-ignored
PROGRESS = "progress.json"   # in the state folder


def where_to_grade() -> tuple[bool, str]:
    """(use the sandbox, the line that says how the notebook runs)."""
    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as err:
        return False, (f"no grading sandbox on this machine ({err}): your notebook runs without one, as you "
                       f"(it is your own code)")
    return True, ("your notebook runs in the grading sandbox (no network, no other files, limits on time and memory), "
                  "as it does when your instructor grades it")


def cell_report(out: Path, assignment: str, student: str = STUDENT) -> list[tuple[str, float, float, list[str]]]:
    """(exercise, score, max score, what lost points: the lines of its message) per graded cell, in order."""
    from nbgrader.api import Gradebook, MissingEntry

    path = out / "autograded" / student / assignment / f"{assignment}.ipynb"
    if not path.is_file():
        return []
    cells = {submission.grade_id(c): c for c in nbformat.read(path, as_version=4).cells if submission.grade_id(c)}
    rows = []
    with Gradebook("sqlite:///" + str(out / "gradebook.db")) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return []
        order = {g: i for i, g in enumerate(cells)}
        for g in sorted((g for nb in sub.notebooks for g in nb.grades), key=lambda g: order.get(g.name, 1e9)):
            score, top = float(g.score or 0.0), float(g.max_score or 0.0)
            lines = []
            if score < top and g.name in cells:
                lines = _message_lines(cells[g.name])
            rows.append((g.name.removeprefix("test_"), score, top, lines))
    return rows


def _message_lines(cell) -> list[str]:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            lines = [ln.rstrip() for ln in str(o.get("evalue", "")).strip().splitlines() if ln.strip()]
            if not lines:
                return [str(o.get("ename", "Error"))]
            if o.get("ename") not in ("AssertionError", None):
                lines[0] = f"{o.get('ename')}: {lines[0]}"
            return lines
    return [submission.first_error_line(cell)]


def load_progress(state: Path) -> dict:
    try:
        return json.loads((state / PROGRESS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def save_progress(state: Path, progress: dict) -> None:
    results.write_atomic(state / PROGRESS, json.dumps(progress, indent=1, sort_keys=True) + "\n")


def record(progress: dict, outcome: results.Outcome, rows: list, when: str) -> None:
    old = progress.get(outcome.assignment, {})
    best = max(outcome.score, float(old.get("best", 0.0)))
    progress[outcome.assignment] = {
        "score": outcome.score, "max_score": outcome.max_score, "best": best, "when": when,
        "status": outcome.status,
        "done": [name for name, score, top, _ in rows if top and score >= top],
        "todo": [name for name, score, top, _ in rows if top and score < top]}


def render_chapter(outcome: results.Outcome, rows: list, feedback: Path) -> str:
    width = max([len("exercise"), *(len(name) for name, *_ in rows)])
    score, top = results.score_text(outcome.score), results.score_text(outcome.max_score)
    lines = [f"{outcome.assignment}: {score} / {top} points ({outcome.status})"]
    if rows:
        lines.append(f"  {'exercise':<{width}}  points  ")
        for name, score, top, why in rows:
            pts = f"{results.score_text(score)}/{results.score_text(top)}"
            verdict = "right" if score >= top else (why[0] if why else "lost points")
            lines.append(f"  {name:<{width}}  {pts:>6}  {verdict}")
            for extra in why[1:]:
                lines.append(f"  {'':<{width}}          {extra}")
    elif outcome.message:
        lines.append(f"  {outcome.message}")
    if feedback.is_file():
        lines.append(f"  feedback page: {feedback}")
    return "\n".join(lines)


def render_progress(progress: dict, chapters: list[str], path: Path) -> str:
    width = max(len(a) for a in chapters)
    lines = [f"your progress ({path}):"]
    for a in chapters:
        p = progress.get(a)
        if not p:
            lines.append(f"  {a:<{width}}  not checked yet")
            continue
        todo = p.get("todo") or []
        lines.append(f"  {a:<{width}}  {results.score_text(p['score']):>3}/{results.score_text(p['max_score']):<3} "
                     f"best {results.score_text(p['best']):>3}  {p['when']}  "
                     + (f"to do: {', '.join(todo)}" if todo else "all done"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.course.check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="chapters to check, by name or short id (ch03); default: all")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed of the random cases (default: a fresh one each run, printed)")
    parser.add_argument("--course", type=Path, default=None, metavar="DIR",
                        help="folder of <chapter>/<chapter>.ipynb to check (default: course/)")
    parser.add_argument("--state", type=Path, default=None, metavar="DIR",
                        help=f"where the progress and the graded copies go (default: $SERVELAB_STATE, else {STATE}/)")
    parser.add_argument("--student", default=os.environ.get("JUPYTERHUB_USER") or STUDENT, metavar="ID",
                        help=f"grade as this student (default: the hub user on a course hub, else {STUDENT!r})")
    args = parser.parse_args(argv)

    root = paths.repo_root()
    course = (args.course or root / paths.RELEASE_DIR).resolve()
    state = (args.state or Path(os.environ.get("SERVELAB_STATE") or root / STATE)).resolve()
    student = args.student
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}", student):   # it names a folder: no "/" or ".."
        print(f"--student {student!r} is not a student id (letters, digits, '.', '_', '@', '-')", file=sys.stderr)
        return 2
    known = [a for a in paths.chapters(root) if (course / a / f"{a}.ipynb").is_file()]
    try:
        todo = paths.resolve(args.chapters, known) or known
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if not todo:
        print(f"no chapter notebooks under {course} (expected <chapter>/<chapter>.ipynb)", file=sys.stderr)
        return 2
    os.environ.update(nbgrader_process.venv_path_env())
    use_sandbox, how = where_to_grade()
    print(how, flush=True)
    out = state / "check"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="servelab-check-") as tmp:
        subs = Path(tmp) / "submitted"
        for a in todo:
            (subs / student / a).mkdir(parents=True)
            shutil.copyfile(course / a / f"{a}.ipynb", subs / student / a / f"{a}.ipynb")
        grader = jobs.Grader(root, out, quiet=True, use_sandbox=use_sandbox, seed=args.seed)
        print(f"grading {len(todo)} chapter(s) with random cases from seed {grader.seed} ...", flush=True)
        try:
            outcomes = grader.grade(subs)
        except Exception as err:  # noqa: BLE001 - say what broke, in one line
            print(f"checking failed: {type(err).__name__}: {err}", file=sys.stderr)
            return 1
        finally:
            grader.close()
    progress = load_progress(state)
    when = time.strftime("%Y-%m-%d %H:%M")
    print()
    for outcome in sorted(outcomes, key=lambda o: o.assignment):
        rows = cell_report(out, outcome.assignment, student)
        record(progress, outcome, rows, when)
        page = out / "feedback" / student / outcome.assignment / f"{outcome.assignment}.html"
        print(render_chapter(outcome, rows, page))
        print()
    save_progress(state, progress)
    print(render_progress(progress, known, state / PROGRESS))
    print(f"checked in {time.monotonic() - started:.0f} s; your notebooks were not changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
