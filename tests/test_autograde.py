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

Then a grader killed mid-batch loses no finished result and `--resume` grades only the rest, under load
limits that prove the CPU/wall split without timing anything: a cell that spins is stopped by its CPU
limit, a cell that only sleeps passes the wall-clock backstop, is graded again with twice the time, and
only then costs its points.

Slow (a kernel per submission): `pytest -m autograde`. The grader's wall time is printed (`-s`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from servelab_autograder import paths
from servelab_autograder.runner import kernel_guard, nbgrader_process, procs, results, staging
from servelab_autograder.testing import hostile, notebooks, submissions

pytestmark = pytest.mark.autograde

ROOT = paths.repo_root()
CHAPTERS = paths.chapters(ROOT)
FIRST = "ch01_continuous_batching" if "ch01_continuous_batching" in CHAPTERS else CHAPTERS[0]
WHOLE = sorted({FIRST, CHAPTERS[-1]})   # the chapters whose stubs and first known-wrong are graded here too
CELL_CPU = 10  # CPU seconds a cell; the slowest legitimate cell uses ~2, the endless-loop case costs this much
JOBS = 2


def run_grader(subs: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab_autograder.runner.grade", str(subs), "--out", str(out),
                           *args],
                          cwd=ROOT, env=nbgrader_process.venv_path_env(), capture_output=True, text=True, timeout=1800)


def read_grades(out: Path) -> dict:
    with open(out / "grades.csv", newline="", encoding="utf-8") as fh:
        return {(r["assignment"], r["student"]): r for r in csv.DictReader(fh)}


def _cell_scores(out: Path) -> dict:
    """(assignment, student) -> {grade cell: (score, max_score)} from the run's gradebook."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for sub in assignment.submissions:
                scores[(assignment.name, sub.student.id)] = {
                    g.name: (float(g.score or 0.0), float(g.max_score)) for nb in sub.notebooks for g in nb.grades}
    return scores


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


def test_a_killed_grader_loses_no_result_and_resume_grades_the_rest(tmp_path):
    """Also the limits, without timing anything: ``spinner`` computes forever, ``sleeper`` waits forever,
    ``hog`` holds more memory than the sandbox may, ``slow`` uses more CPU than the notebook may."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    a = FIRST
    submissions.write_one(subs, "a-solution", a, notebooks.complete_submission(a, ROOT))
    submissions.write_one(subs, "b-stubs", a, notebooks.fresh(notebooks.load_release(a, ROOT)))
    load = hostile.load_test(a, ROOT)
    for student, kind in (("c-sleeper", "sleep"), ("d-spinner", "spin"), ("e-hog", "hog"), ("f-slow", "slow")):
        submissions.write_one(subs, student, a, load[kind])
    argv = [sys.executable, "-m", "servelab_autograder.runner.grade", str(subs), "--out", str(out), "--jobs", "1",
            "--cell-cpu", "3", "--wall-factor", "20"]
    first = subprocess.Popen(argv, cwd=ROOT, env=nbgrader_process.venv_path_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    done = [out / "results" / a / f"{s}.json" for s in ("a-solution", "b-stubs")]
    deadline = time.monotonic() + 600
    while not all(p.is_file() for p in done) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(p.is_file() for p in done), "the first two results never appeared"
    staged = [p.parent for p in Path(tempfile.gettempdir()).glob(f"{staging.STAGING_PREFIX}*/owner.pid")
              if p.read_text() == str(first.pid)]
    assert len(staged) == 1, staged
    first.send_signal(signal.SIGKILL)  # mid-batch: the sleeper is being graded
    first.wait()
    assert not (out / "grades.csv").exists(), "a killed run must not leave a grades.csv that looks complete"
    kept = results.load_results(out)
    assert set(kept) == {(a, "a-solution"), (a, "b-stubs")}, kept
    assert kept[(a, "a-solution")].score == kept[(a, "a-solution")].max_score > 0

    # backstops of 20 s a cell: a legitimate cell (at most 2.5 CPU-seconds), and the spinner its 5, stay under
    # them even on a machine that gives them a quarter of a core
    resumed = run_grader(subs, out, "--resume", "--jobs", "2", "--cell-cpu", "5", "--wall-factor", "4",
                         "--notebook-cpu", "20", "--limit", "memory=1GiB")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "resuming: 2 result(s) kept, 4 to grade" in resumed.stdout
    rows = read_grades(out)
    assert set(rows) == {(a, s) for s in ("a-solution", "b-stubs", "c-sleeper", "d-spinner", "e-hog", "f-slow")}
    top = rows[(a, "a-solution")]["max_score"]
    assert rows[(a, "a-solution")]["score"] == top and rows[(a, "b-stubs")]["score"] == "0"
    spin, sleep = rows[(a, "d-spinner")], rows[(a, "c-sleeper")]
    # the spinner: stopped by its CPU limit on the first run
    assert spin["status"] == "cell-timeout" and spin["score"] == top, spin
    assert "cell #2 (a cell without a grade id): this cell used more than 5 s of CPU time" in spin["message"], spin
    assert "cell #2 (a cell without a grade id) passed" not in spin["message"], spin  # never re-graded for it
    # the sleeper: past the 20 s backstop with no CPU used, graded again with 40 s, stopped again
    assert sleep["status"] == "cell-timeout" and sleep["score"] == top, sleep
    assert "passed the 20 s wall-clock backstop using 0" in sleep["message"], sleep
    assert "graded again with twice the time" in sleep["message"], sleep
    assert "ran past the 40 s wall-clock backstop while using only 0" in sleep["message"], sleep
    # the hog: three processes holding 1.5 GiB, killed at the sandbox's 1 GiB, graded again without that cell
    hog = rows[(a, "e-hog")]
    assert hog["status"] == "kernel-died" and hog["score"] == top, hog
    assert "the sandbox used more than 1 GiB of memory, so the kernel was killed" in hog["message"], hog
    # ten cells of 2.5 CPU-seconds each: the notebook's 20 CPU-seconds run out
    slow = rows[(a, "f-slow")]
    assert slow["status"] == "notebook-timeout" and slow["score"] == "0", slow
    assert "grading used more than 20 s of CPU time, the notebook limit" in slow["message"], slow
    # the scores in grades.csv are the gradebook's, and each has its feedback page
    cells = _cell_scores(out)
    for (_, student), row in rows.items():
        # (a notebook stopped by its notebook limit has no gradebook record: 0)
        assert sum(s for s, _ in cells.get((a, student), {}).values()) == float(row["score"]), (student, row)
        assert (out / "feedback" / student / a / f"{a}.html").is_file(), student
    # nothing of the killed run is left: its staging folder (and sandbox mount) went with the next run
    assert not staged[0].exists(), staged
    assert str(staged[0]) not in Path("/proc/self/mountinfo").read_text()

    # a new run without --resume moves this run's grades.csv and results aside first
    for student in ("c-sleeper", "d-spinner", "e-hog", "f-slow"):
        (subs / student).rename(tmp_path / student)
    again = run_grader(subs, out, "--jobs", "2")
    assert again.returncode == 0, again.stdout[-3000:]
    previous = sorted((out / "runs" / "previous").iterdir())
    assert len(previous) == 1 and len(read_grades(previous[0])) == 6
    assert set(results.load_results(out)) == {(a, "a-solution"), (a, "b-stubs")}
    assert set(read_grades(out)) == {(a, "a-solution"), (a, "b-stubs")}
