"""End to end: real, sandboxed grader runs (`python -m servelab_autograder.runner.grade`), each result held to what the
submission deserves.

The batch (one grader run, two submissions at a time):
- every chapter's solution (full marks); the stubs (0) and the first known-wrong submission (below full, the
  pitfall's message) of chapter 01 and of the newest chapter. Every chapter's stubs and every known-wrong
  submission are proved in-process by tests/test_chNN_grading.py, through the same trusted engine; what only a
  sandboxed run shows (a kernel-side driver's answer crossing, its size, its time) the solutions show;
- chapter 01's tampered submissions (servelab_autograder.testing.submissions.tamper) and hostile ones
  (servelab_autograder.testing.hostile: the gradebook, the classmates' copies, the grader's source, a
  SIGKILL to everything, a daemon, 6 GiB, 100 MB of output, a fork bomb, the network, the disk, exit(),
  sys.exit(), a lone surrogate), graded beside an honest and a wrong classmate who keep their scores;
- afterwards nothing outside the sandboxes changed (canary files, the repository, the grader's code and
  nbgrader's), no process of theirs is left, and the flood's notebook and feedback stayed small.

A grader killed mid-batch, and `--resume`, are tests/test_autograde_resume.py's (a module of its own, so that
pytest-xdist runs it beside this batch instead of after it).

Slow (a kernel per submission): `pytest -m autograde`. The grader's wall time is printed (`-s`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
from autograde_run import cell_scores as _cell_scores
from autograde_run import read_grades, run_grader

from servelab_autograder import paths
from servelab_autograder.runner import kernel_guard, procs, results
from servelab_autograder.testing import hostile, notebooks, submissions

pytestmark = pytest.mark.autograde

ROOT = paths.repo_root()
CHAPTERS = paths.chapters(ROOT)
FIRST = "ch01_continuous_batching" if "ch01_continuous_batching" in CHAPTERS else CHAPTERS[0]
WHOLE = sorted({FIRST, CHAPTERS[-1]})   # the chapters whose stubs and first known-wrong are graded here too
CELL_CPU = 10  # CPU seconds a cell; the slowest legitimate cell uses ~2, the endless-loop case costs this much
JOBS = 2


def _fingerprints() -> dict[str, str]:
    """sha256 of every file the grader runs or reads that a hostile kernel would like to change."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    paths = [ROOT / f.decode() for f in files if f]
    import nbgrader

    site = Path(nbgrader.__file__).parents[1]
    paths += [*Path(nbgrader.__file__).parent.rglob("*.py"), *site.glob("*.pth"), *site.glob("__editable__*")]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    missing = [a for a in CHAPTERS if not paths.release_notebook(ROOT, a).is_file()]
    if missing:
        pytest.fail(f"no release for {missing}: run `make release`")
    base = tmp_path_factory.mktemp("autograde")
    subs, out = base / "submitted", base / "out"
    out.mkdir()
    canaries = {p: f"canary {p.name}\n" for p in (out / "canary.txt", subs / "canary.txt", base / "canary.txt")}
    expected = submissions.write_submissions(subs, CHAPTERS, ROOT)
    for a in CHAPTERS:
        wrong = sorted(s for s in expected[a] if s.startswith("wrong-"))
        copied = [s for s in expected[a] if s == "copied-drills"]
        dropped = wrong[1:] if a in WHOLE else ["stubs", *wrong, *copied]   # copied drills: the WHOLE chapters
        for student in [s for s in expected[a] if s.startswith("tamper-") and a != FIRST] + dropped:
            (subs / student / a / f"{a}.ipynb").unlink()
            (subs / student / a).rmdir()
            del expected[a][student]
    for kind, (nb, exp) in hostile.hostile(FIRST, ROOT, [str(subs), str(out), str(base)]).items():
        submissions.write_one(subs, f"hostile-{kind}", FIRST, nb)
        expected[FIRST][f"hostile-{kind}"] = exp
    for path, text in canaries.items():
        path.write_text(text, encoding="utf-8")
    (subs / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    before = _fingerprints()
    start = time.monotonic()
    proc = run_grader(subs, out, "--cell-cpu", str(CELL_CPU), "--jobs", str(JOBS))
    wall = time.monotonic() - start
    count = sum(len(v) for v in expected.values())
    print(f"\ngrader: {count} submissions in {wall:.1f} s ({wall / max(count, 1):.2f} s each, {JOBS} at a time)")
    assert proc.returncode == 0, \
        f"the grader broke (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return {"expected": expected, "rows": read_grades(out), "out": out, "subs": subs, "log": proc.stdout,
            "cells": _cell_scores(out), "before": before, "after": _fingerprints(), "canaries": canaries}


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
    assert row["status"] == "graded", row


@pytest.mark.parametrize("assignment", WHOLE)
def test_stubs_score_zero(graded, assignment):
    row, score, top = _row(graded, assignment, "stubs")
    assert score == 0 and row["status"] == "graded", row
    assert "NotImplementedError" in row["message"], row


@pytest.mark.parametrize("assignment", WHOLE)
def test_a_known_wrong_submission_loses_its_points(graded, assignment):
    wrong = {s: e for s, e in graded["expected"][assignment].items() if s.startswith("wrong-")}
    assert len(wrong) == 1, wrong
    (student, exp), = wrong.items()
    row, score, top = _row(graded, assignment, student)
    assert score < top, f"{student}: full marks"
    assert not _kept(graded, assignment, student, exp["fails"]), f"{student} kept points of its FAILS"
    assert exp["message"] in row["message"], row


def _check_expected(graded, assignment, prefix):
    expected = graded["expected"][assignment]
    release_nb = notebooks.load_release(assignment, ROOT)
    tests = [notebooks.grade_id(c) for c in release_nb.cells if notebooks.is_test(c)]
    problems = []
    for student, exp in sorted((s, e) for s, e in expected.items() if s.startswith(prefix)):
        row, score, top = _row(graded, assignment, student)
        where = f"{student} ({exp['description']})"
        if row["status"] != exp["status"]:
            problems.append(f"{where}: status {row['status']!r}, expected {exp['status']!r}: {row['message']}")
        if exp["score"] is not None and score != exp["score"]:
            problems.append(f"{where}: scored {score}/{top}, expected {exp['score']}: {row['message']}")
        if exp["below_full"] and not score < top:
            problems.append(f"{where}: full marks")
        if exp["message"] not in row["message"]:
            problems.append(f"{where}: message lacks {exp['message']!r}: {row['message']}")
        kept = _kept(graded, assignment, student, exp["fails"])
        if kept:
            problems.append(f"{where}: kept the points of {kept}")
        lost = [c for c in exp.get("keeps", []) if c not in _kept(graded, assignment, student, [c])]
        if lost:
            problems.append(f"{where}: lost the points of {lost}, which come before what it broke")
        others = [t for t in tests if t not in exp["fails"]]
        if exp["fails"] and others and not _kept(graded, assignment, student, others):
            problems.append(f"{where}: every other test cell lost its points too ({others})")
    return problems


def test_drills_copied_from_another_learners_numbers_score_nothing(graded):
    """A submission graded as learner "copied-drills", whose drills hold the workbook's own answers: its kernel
    printed (and the grader judged) the numbers drawn for "copied-drills", so the drills cell alone loses."""
    drawn = [a for a in CHAPTERS if "copied-drills" in graded["expected"][a]]
    assert drawn, "no chapter draws its drills per learner"
    problems = [p for a in drawn for p in _check_expected(graded, a, "copied-drills")]
    assert not problems, "\n".join(problems)


def test_tampered_submissions_get_what_they_deserve(graded):
    problems = _check_expected(graded, FIRST, "tamper-")
    assert not problems, "\n".join(problems)


def test_hostile_submissions_score_what_their_honest_part_deserves(graded):
    assert {s for s in graded["expected"][FIRST] if s.startswith("hostile-")} >= {
        f"hostile-{k}" for k in ("gradebook", "grader-source", "kill", "daemon", "memory", "flood", "processes",
                                 "network", "disk", "exit", "sys-exit", "surrogate",
                                 # routes around checks in the kernel: nothing against verdicts made outside it
                                 "transformer", "patched-helpers", "patched-checker", "poisoned-modules",
                                 "no-profile-reference", "importlib-reference", "source-reference", "read-solutions",
                                 "always-equal")}
    problems = _check_expected(graded, FIRST, "hostile-")
    assert not problems, "\n".join(problems)


def test_classmates_keep_their_scores_beside_hostile_submissions(graded):
    row, score, top = _row(graded, FIRST, "solution")
    assert score == top and row["status"] == "graded"
    wrong = next(s for s in graded["expected"][FIRST] if s.startswith("wrong-"))
    fails = graded["expected"][FIRST][wrong]["fails"]
    release_nb = notebooks.load_release(FIRST, ROOT)
    lost = sum(notebooks.points(c) for c in release_nb.cells if notebooks.grade_id(c) in fails)
    row, score, top = _row(graded, FIRST, wrong)
    assert score == top - lost, f"{wrong}: {score}/{top}, expected exactly {top - lost} (it loses {fails})"


def _hostile_report(graded, kind) -> dict:
    nb = nbformat.read(graded["out"] / "autograded" / f"hostile-{kind}" / FIRST / f"{FIRST}.ipynb", as_version=4)
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            for line in str(o.get("text", "")).splitlines():
                if line.startswith("HOSTILE "):
                    return json.loads(line[len("HOSTILE "):])
    pytest.fail(f"hostile-{kind} printed no report: did its cell run inside the sandbox?")


def test_from_inside_the_sandbox_the_hostile_code_reached_nothing(graded):
    reach = _hostile_report(graded, "gradebook")
    assert reach["written"] == [] and reach["deleted"] == [] and reach["read"] == [], reach
    assert reach["seen"] > 100  # it did look around
    assert _hostile_report(graded, "grader-source") == {"written": []}
    assert _hostile_report(graded, "network") == {"reached": []}
    procs = _hostile_report(graded, "processes")
    assert procs["error"] == "RuntimeError" and procs["started"] < 64, procs
    assert _hostile_report(graded, "disk") == {"wrote_mib": 256, "error": "File too large"}
    assert _hostile_report(graded, "read-solutions") == {"found": []}
    nb = nbformat.read(graded["out"] / "autograded" / "hostile-memory" / FIRST / f"{FIRST}.ipynb", as_version=4)
    assert any(o.get("ename") == "MemoryError" for c in nb.cells for o in c.get("outputs", []))


def test_nothing_outside_the_sandboxes_changed_and_nothing_of_them_is_left(graded):
    changed = sorted(p for p in graded["before"] if graded["after"].get(p) != graded["before"][p])
    assert not changed, f"files changed during grading: {changed[:10]}"
    for path, text in graded["canaries"].items():
        assert path.read_text(encoding="utf-8") == text, path
    assert procs.with_argument(hostile.DAEMON_MARKER) == [], "the hostile daemon outlived the batch"
    subs = graded["subs"]
    for a, students in graded["expected"].items():  # every classmate's submission is as written
        for student in students:
            assert (subs / student / a / f"{a}.ipynb").is_file(), f"{student}'s submission was deleted"


def test_a_flood_of_output_is_cut_to_size(graded):
    out = graded["out"]
    nb = out / "autograded" / "hostile-flood" / FIRST / f"{FIRST}.ipynb"
    page = out / "feedback" / "hostile-flood" / FIRST / f"{FIRST}.html"
    assert nb.stat().st_size < 3 * 2**20 and page.stat().st_size < 3 * 2**20, (nb.stat().st_size, page.stat().st_size)
    assert "[output truncated at 1048576 bytes" in nb.read_text(encoding="utf-8")


def test_every_submission_has_a_result_file_a_grades_row_and_feedback(graded):
    out = graded["out"]
    header = (out / "grades.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "student,assignment,score,max_score,status,message"
    saved = results.load_results(out)
    problems = []
    for a, subs in graded["expected"].items():
        for student in subs:
            if (a, student) not in graded["rows"]:
                problems.append(f"{a}/{student}: no grades.csv row")
            elif saved.get((a, student)) is None or saved[(a, student)].row() != graded["rows"][(a, student)]:
                problems.append(f"{a}/{student}: its result file does not match grades.csv")
            page = out / "feedback" / student / a / f"{a}.html"
            if not page.is_file() or page.stat().st_size == 0:
                problems.append(f"{a}/{student}: no feedback page")
    assert not problems, problems
    # a demo cell (it shows the reference, not run while grading) shows the figures the release keeps
    page = (out / "feedback" / "solution" / FIRST / f"{FIRST}.html").read_text(encoding="utf-8")
    assert kernel_guard.DEMO_SHOWN.strip() in page and "data:image/png;base64" in page
    assert kernel_guard.DEMO_NOTE.strip() not in page
    assert {r["status"] for r in graded["rows"].values()} <= set(results.STATUSES)
    assert json.loads((graded["subs"] / "expected.json").read_text(encoding="utf-8")) == graded["expected"]
