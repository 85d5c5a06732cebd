"""End to end: a grader killed mid-batch loses no finished result and `--resume` grades only the rest, under load
limits that prove the CPU/wall split without timing anything: a cell that spins is stopped by its CPU limit, a cell
that only sleeps passes the wall-clock backstop, is graded again with twice the time, and only then costs its
points; memory and the notebook's CPU limit too. A module of its own: pytest-xdist runs it beside
tests/test_autograde.py's batch.

Slow (a kernel per submission): `pytest -m autograde`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from autograde_run import cell_scores as _cell_scores
from autograde_run import read_grades, run_grader

from servelab_autograder import paths
from servelab_autograder.runner import nbgrader_process, results, staging
from servelab_autograder.testing import hostile, notebooks, submissions

pytestmark = pytest.mark.autograde

ROOT = paths.repo_root()
CHAPTERS = paths.chapters(ROOT)
FIRST = "ch01_continuous_batching" if "ch01_continuous_batching" in CHAPTERS else CHAPTERS[0]


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
