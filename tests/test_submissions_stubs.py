"""The `stubs` submission (and every submission built on the release) comes from solutions/, not from course/, where
a learner or an instructor trying the course edits the notebooks: a filled-in course/ must not score the stubs."""

from __future__ import annotations

import json
import shutil

import nbformat

from servelab_autograder import paths
from servelab_autograder.course import release
from servelab_autograder.runner import results
from servelab_autograder.testing import notebooks

ROOT = paths.repo_root()
A = "ch01_continuous_batching"


def _solution_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if notebooks.is_solution(c)]


def test_stubs_ignore_a_course_notebook_a_learner_filled_in(tmp_path):
    # a repository copy whose course/ notebook holds the learner's answers
    for rel in ("nbgrader_config.py", "autograder/nbgrader_config.py", f"solutions/{A}"):
        src, dst = ROOT / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    course = paths.release_notebook(tmp_path, A)
    course.parent.mkdir(parents=True)
    filled = json.loads(paths.release_notebook(ROOT, A).read_text())
    answers = notebooks.solution_code(A, ROOT)
    for cell in filled["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    course.write_text(json.dumps(filled))

    stubs = notebooks.load_release(A, tmp_path)
    sources = _solution_sources(stubs)
    assert sources and all("raise NotImplementedError()" in s for s in sources), sources
    assert not any("raise NotImplementedError()" in s for s in _solution_sources(
        nbformat.reads(course.read_text(), as_version=4))), "the copy's course/ should hold answers"
    # and it is the release make release builds
    assert release.comparable(notebooks.fresh_release(A, tmp_path)) == \
        release.comparable(paths.release_notebook(ROOT, A))


def test_everything_the_grader_writes_is_git_ignored():
    """`make autograde` and `make check` write names, scores, solutions and hidden tests: a `git add -A` afterwards
    must not commit any of it."""
    import subprocess

    from servelab_autograder.course import check
    out = ROOT / "autograder"
    written = [out / results.RESULTS / A / "someone.json", out / results.PREVIOUS / "20260101" / "grades.csv",
               out / "grades.csv", out / "gradebook.db", out / "autograded" / "someone" / A / "x.ipynb",
               out / "feedback" / "someone" / A / "x.html", out / "runs" / "grade-logs" / "x.log",
               out / "submitted" / "someone" / A / "x.ipynb", ROOT / check.STATE / check.PROGRESS,
               out / "runs" / "release-backups" / A / "x.ipynb"]
    paths = [str(p.relative_to(ROOT)) for p in written]
    run = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    ignored = set(run.stdout.split())
    assert ignored == set(paths), f"not git-ignored: {sorted(set(paths) - ignored)}"
