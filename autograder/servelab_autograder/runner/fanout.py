"""Grading fanned out on Dask: one task per submission, the gradebook written by the head alone.

    python -m servelab_autograder.runner.grade SUBMISSIONS --dask local --jobs 4       # a LocalCluster of 4 workers
    python -m servelab_autograder.runner.grade SUBMISSIONS --dask tcp://10.0.0.5:8786  # the scheduler of a cluster
    make autograde WORKERS=4                                                    # the first, through make

A task carries plain data out (the staged notebook and its timestamp, the run's plan, and the gradebook as it is
after registering the chapters, with no learner in it) and plain data back (exit status, log, progress events,
the autograded notebook). On the worker it runs the same sandboxed ``nbgrader autograde`` the local pool runs,
in a scratch folder of its own against a private copy of that gradebook, which it then throws away. The head
takes the returned notebook through nbgrader's own ``SaveAutoGrades``, so gradebook.db, one sqlite file, has
one writer, and a worker never sees another learner's grades. Every worker needs the course at the same path
as the head (one image for the head and the workers) and, to sandbox, the sandbox users of
``make sandbox-deps``; a worker that cannot sandbox returns an error and the submission is marked
grader-error.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import time
import warnings
from pathlib import Path

from servelab_autograder.runner import nbgrader_process

_libraries: dict[tuple[str, str], Path] = {}   # per worker process: the chapter's sandbox library, built once
_scratch: Path | None = None


def learnerless_gradebook(db_path: Path) -> bytes:
    """The bytes of a copy of the gradebook at `db_path` without any learner (students, submissions and
    everything under them): what a worker needs to grade, and nothing of anyone's results."""
    from nbgrader.api import Gradebook

    with tempfile.TemporaryDirectory(prefix="servelab-gradebook-") as tmp:
        copy = Path(tmp) / "gradebook.db"
        with sqlite3.connect(db_path) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)   # a consistent copy even while the head's connection is open
        with Gradebook(f"sqlite:///{copy}") as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore")   # SQLAlchemy's notes on nbgrader's cascade, not problems
            for student in list(gb.students):
                gb.remove_student(student.id)   # removes the student's submissions with them
        return copy.read_bytes()


def _worker_scratch() -> Path:
    """A staging folder for this worker process, swept like the head's when the process is gone."""
    global _scratch
    from servelab_autograder.runner.staging import STAGING_PREFIX

    if _scratch is None or not _scratch.is_dir():
        _scratch = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
        os.chmod(_scratch, 0o711)   # the sandbox users cross it to reach their own scratch folders
        (_scratch / "owner.pid").write_text(str(os.getpid()), encoding="utf-8")
    return _scratch


def cleanup() -> None:
    """Remove this worker's staging folder (the head runs it on every worker before letting go of them)."""
    global _scratch
    from servelab_autograder.runner import sandbox

    if _scratch is not None:
        for box in _scratch.glob("t*/s"):
            sandbox.sweep(box)
        shutil.rmtree(_scratch, ignore_errors=True)
    _scratch = None
    _libraries.clear()


def _library(root: Path, assignment: str, references: list[str]) -> Path:
    from servelab_autograder.runner import sandbox

    key = (str(root), assignment)
    if key not in _libraries or not _libraries[key].is_dir():
        _libraries[key] = sandbox.build_library(root, _worker_scratch() / f"lib-{assignment}", references)
    return _libraries[key]


def grade_attempt(task: dict, gradebook: bytes) -> dict:
    """Run one attempt at grading one submission; what runs on a Dask worker. Plain data in, plain data out.

    `task` holds root, assignment, student, notebook (the staged notebook's text), timestamp (text or None),
    plan (kernel_guard's plan; its paths are replaced by this worker's, but the head's sandbox library and font
    cache are used where this machine has them), references (the chapter's references for the sandbox's
    library, or none) and wall_s (the notebook's wall-clock backstop); `gradebook` is the bytes of
    `learnerless_gradebook` (sent to each worker once). The result holds
    returncode, timed_out, output, seconds, log, progress (the progress file's text) and autograded (the
    autograded notebook's text, or None).
    """
    from servelab_autograder.runner import sandbox
    from servelab_autograder.runner.kernel_guard import ENV_PLAN, learner_env

    root, a, s = Path(task["root"]), task["assignment"], task["student"]
    started = time.monotonic()
    try:
        if task["plan"].get("sandbox"):
            sandbox.check()
        work = Path(tempfile.mkdtemp(prefix="t", dir=_worker_scratch()))
    except Exception as err:  # noqa: BLE001 - the head reports it as this submission's grader error
        return {"returncode": 1, "timed_out": False, "output": f"the worker cannot grade: {err}",
                "seconds": time.monotonic() - started, "log": "", "progress": "", "autograded": None}
    os.chmod(work, 0o711)
    try:
        db = work / "gradebook.db"
        db.write_bytes(gradebook)
        staged = work / "submitted" / s / a / f"{a}.ipynb"
        staged.parent.mkdir(parents=True)
        staged.write_text(task["notebook"], encoding="utf-8")
        if task.get("timestamp") is not None:
            (staged.parent / "timestamp.txt").write_text(task["timestamp"], encoding="utf-8")
        plan = dict(task["plan"], progress=str(work / "progress.jsonl"), box_dir=str(work / "s"))
        font = plan.get("font_cache")
        if font and not Path(font).is_file():
            plan["font_cache"] = None   # the head's cache is not on this machine: the sandbox builds its own
        library = plan.get("library")
        if task.get("references") and plan.get("sandbox") and not (library and Path(library).is_dir()):
            # the head's build is not on this machine (a worker elsewhere): build the chapter's own here
            plan["library"] = str(_library(root, a, task["references"]))
        (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
        env = dict(nbgrader_process.venv_path_env(), **learner_env(plan), **{ENV_PLAN: str(work / "plan.json")})
        argv = ["autograde", a, "--student", s, "--force", f"--CourseDirectory.db_url=sqlite:///{db}",
                f"--CourseDirectory.submitted_directory={work / 'submitted'}",
                f"--CourseDirectory.autograded_directory={work / 'autograded'}",
                f"--CourseDirectory.feedback_directory={work / 'feedback'}"]
        child = nbgrader_process.start_nbgrader(argv, cwd=root, log_path=work / "log", env=env)
        deadline = time.monotonic() + float(task["wall_s"])
        while (run := child.poll(deadline=deadline)) is None:
            time.sleep(0.05)
        sandbox.sweep(work / "s")
        graded = work / "autograded" / s / a / f"{a}.ipynb"
        progress = work / "progress.jsonl"
        return {"returncode": run.returncode, "timed_out": run.timed_out, "output": run.output,
                "seconds": run.seconds, "log": _read(work / "log"), "progress": _read(progress),
                "autograded": graded.read_text(encoding="utf-8") if graded.is_file() else None}
    finally:
        sandbox.sweep(work / "s")
        shutil.rmtree(work, ignore_errors=True)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def save_autogrades(db_url: str, assignment: str, student: str, graded_nb, timestamp: str | None) -> None:
    """Write one autograded notebook's scores into the head's gradebook, as ``nbgrader autograde`` does: the
    submission row (with its timestamp), then nbgrader's SaveAutoGrades over the notebook's cells."""
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import SaveAutoGrades
    from nbgrader.utils import parse_utc

    with Gradebook(db_url) as gb:
        if timestamp:
            gb.update_or_create_submission(assignment, student, timestamp=parse_utc(timestamp.strip()))
        else:
            gb.update_or_create_submission(assignment, student)
    resources = {"nbgrader": {"notebook": assignment, "assignment": assignment, "student": student,
                              "db_url": db_url}}
    SaveAutoGrades().preprocess(graded_nb, resources)


def client(address: str, workers: int):
    """A Dask client: on a LocalCluster of `workers` one-thread worker processes for "local", else on the
    scheduler at `address`. Returns (client, cluster or None); close both when done."""
    import logging

    from distributed import Client, LocalCluster

    if address == "local":
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
        return Client(cluster), cluster
    return Client(address, timeout=30), None
