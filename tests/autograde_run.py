"""Running the real grader from the end-to-end tests (tests/test_autograde.py, tests/test_autograde_resume.py) and
reading what it wrote."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from servelab_autograder import paths
from servelab_autograder.runner import nbgrader_process

ROOT = paths.repo_root()


def run_grader(subs: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab_autograder.runner.grade", str(subs), "--out", str(out),
                           *args],
                          cwd=ROOT, env=nbgrader_process.venv_path_env(), capture_output=True, text=True, timeout=1800)


def read_grades(out: Path) -> dict:
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        return {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}


def cell_scores(out: Path) -> dict:
    """(assignment, student) -> {grade cell: (score, max_score)} from the run's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                scores[(assignment.name, sub.student.id)] = {
                    g.name: (float(g.score or 0.0), float(g.max_score)) for nb in sub.notebooks for g in nb.grades}
    return scores
