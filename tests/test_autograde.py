"""End to end: build every kind of submission for every chapter, grade them all in ONE grader run
(`python -m servelab_autograder.grade`), and hold each result to what it deserves.

- the complete solution scores full marks, the untouched stubs score 0;
- each known-wrong submission (autograder/known_wrong/<a>/<pitfall>.py) scores below full marks, loses
  the points of every cell in its FAILS, and its message contains its MESSAGE;
- each tampered submission gets its expected status, score and message (see
  servelab_autograder.submissions.tamper), and the cells the tampering breaks lose their points while
  the others are still graded;
- grades.csv and a feedback page per submission exist.

Slow (a kernel per submission): `pytest -m autograde`. The grader's wall time is printed (`-s`).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelab_autograder import release, submissions

pytestmark = pytest.mark.autograde

ROOT = release.repo_root()
CHAPTERS = release.chapters(ROOT)
PER_CELL = 10  # seconds; the slowest legitimate cell measured ~1 s, the endless-loop case costs this much
JOBS = 2
# The tampered submissions exercise the grader, which is the same for every chapter: grade them for the
# simplest chapter and for the one with the heaviest kernel (Triton's interpreter). Every chapter still
# gets its solution, its stubs and all of its known-wrong submissions.
TAMPER_CHAPTERS = [a for a in CHAPTERS if a.startswith(("ch01_", "ch06_"))] or CHAPTERS[:1]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    missing = [a for a in CHAPTERS if not release.release_notebook(ROOT, a).is_file()]
    if missing:
        pytest.fail(f"no release for {missing}: run `make release`")
    base = tmp_path_factory.mktemp("autograde")
    subs, out = base / "submitted", base / "out"
    expected = submissions.write_submissions(subs, CHAPTERS, ROOT)
    for a in CHAPTERS:
        if a not in TAMPER_CHAPTERS:
            for student in [s for s in expected[a] if s.startswith("tamper-")]:
                shutil.rmtree(subs / student / a)
                del expected[a][student]
    (subs / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "servelab_autograder.grade", str(subs), "--out", str(out),
         "--per-cell-timeout", str(PER_CELL), "--jobs", str(JOBS)],
        cwd=ROOT, env=release.venv_path_env(), capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - start
    count = sum(len(v) for v in expected.values())
    print(f"\ngrader: {count} submissions in {wall:.1f} s ({wall / max(count, 1):.2f} s each, {JOBS} at a time)")
    assert proc.returncode == 0, \
        f"the grader broke (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}
    return {"expected": expected, "rows": rows, "out": out, "subs": subs, "log": proc.stdout,
            "cells": _cell_scores(out)}


def _cell_scores(out: Path) -> dict:
    """(assignment, student) -> {grade cell: (score, max_score)} from the run's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                cells = {}
                for nb in sub.notebooks:
                    for g in nb.grades:
                        cells[g.name] = (float(g.score or 0.0), float(g.max_score))
                scores[(assignment.name, sub.student.id)] = cells
    return scores


def _row(graded, a, student):
    row = graded["rows"].get((a, student))
    assert row is not None, f"{a}/{student} missing from grades.csv:\n{graded['log'][-3000:]}"
    return row, float(row["score"]), float(row["max_score"])


def _kept(graded, a, student, cells):
    """The cells among ``cells`` that kept all their points."""
    scores = graded["cells"].get((a, student), {})
    return [c for c in cells if c not in scores or scores[c][0] >= scores[c][1]]


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_complete_solution_scores_full_marks(graded, assignment):
    row, score, top = _row(graded, assignment, "solution")
    assert top > 0 and score == top, f"{assignment}: solution scored {score}/{top}: {row['message']}"
    assert row["status"] == "ok", row


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_stubs_score_zero(graded, assignment):
    row, score, top = _row(graded, assignment, "stubs")
    assert score == 0 and row["status"] == "ok", row
    assert "NotImplementedError" in row["message"], row


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_known_wrong_submissions_lose_their_points(graded, assignment):
    expected = graded["expected"][assignment]
    wrong = {s: e for s, e in expected.items() if s.startswith("wrong-")}
    problems = []
    for student, exp in sorted(wrong.items()):
        row, score, top = _row(graded, assignment, student)
        if not score < top:
            problems.append(f"{student}: full marks ({score}/{top})")
        kept = _kept(graded, assignment, student, exp["fails"])
        if kept:
            problems.append(f"{student}: kept the points of {kept} (FAILS)")
        if exp["message"] not in row["message"]:
            problems.append(f"{student}: message lacks {exp['message']!r}: {row['message']}")
    assert not problems, f"{assignment} ({len(wrong)} known-wrong):\n" + "\n".join(problems)


@pytest.mark.parametrize("assignment", TAMPER_CHAPTERS)
def test_tampered_submissions_get_what_they_deserve(graded, assignment):
    expected = graded["expected"][assignment]
    release_nb = submissions.load_release(assignment, ROOT)
    tests = [submissions.grade_id(c) for c in release_nb.cells if submissions.is_test(c)]
    problems = []
    for student, exp in sorted((s, e) for s, e in expected.items() if s.startswith("tamper-")):
        row, score, top = _row(graded, assignment, student)
        where = f"{student} ({exp['description']})"
        if row["status"] != exp["status"]:
            problems.append(f"{where}: status {row['status']!r}, expected {exp['status']!r}: {row['message']}")
        if exp["score"] is not None and score != exp["score"]:
            problems.append(f"{where}: scored {score}/{top}, expected {exp['score']}")
        if exp["below_full"] and not score < top:
            problems.append(f"{where}: full marks")
        if exp["message"] not in row["message"]:
            problems.append(f"{where}: message lacks {exp['message']!r}: {row['message']}")
        kept = _kept(graded, assignment, student, exp["fails"])
        if kept:
            problems.append(f"{where}: kept the points of {kept}")
        others = [t for t in tests if t not in exp["fails"]]
        if exp["fails"] and others:  # the rest of the notebook was still graded
            still = _kept(graded, assignment, student, others)
            if not still:
                problems.append(f"{where}: every other test cell lost its points too ({others})")
    assert not problems, f"{assignment}:\n" + "\n".join(problems)


def test_every_submission_is_in_grades_csv_with_feedback(graded):
    out = graded["out"]
    header = (out / "grades.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "student,assignment,score,max_score,status,message"
    missing_rows, missing_feedback = [], []
    for a, subs in graded["expected"].items():
        for student in subs:
            if (a, student) not in graded["rows"]:
                missing_rows.append(f"{a}/{student}")
            page = out / "feedback" / student / a / f"{a}.html"
            if not page.is_file() or page.stat().st_size == 0:
                missing_feedback.append(str(page))
    assert not missing_rows, missing_rows
    assert not missing_feedback, missing_feedback
    from servelab_autograder import grade

    statuses = {r["status"] for r in graded["rows"].values()}
    assert statuses <= set(grade.STATUSES), statuses
    on_disk = json.loads((graded["subs"] / "expected.json").read_text(encoding="utf-8"))
    assert on_disk == graded["expected"]
