"""Autograde a folder of submissions (``make autograde SUBMISSIONS=dir``).

    python -m servelab_autograder.grade SUBMISSIONS_DIR [--per-cell-timeout S] [--notebook-timeout S]
                                        [--out DIR] [--jobs N]

SUBMISSIONS_DIR holds nbgrader's submitted layout, ``<student>/<assignment>/<assignment>.ipynb``.
For each submission the grader

1. pre-checks a copy: valid JSON / nbformat, a known assignment, and by its grade ids the right
   notebook; repairs what a learner can break by accident (a duplicated, deleted or metadata-stripped
   graded cell) and notes what nbgrader will undo (an edited test cell, restored by checksum);
2. runs ``nbgrader autograde <a> --student <s> --force`` in its own process group with an outer
   wall-clock limit (``--notebook-timeout``) that kills the process tree, kernel included. When a cell
   hangs the kernel for good (a loop that swallows KeyboardInterrupt) the grader re-grades with that
   cell replaced by a timeout error, so the other cells are still graded; a dead kernel scores 0;
3. reads the scores from the gradebook and, per test cell that lost points, the first line of its
   error from the autograded notebook; then ``nbgrader generate_feedback`` writes the HTML feedback.

A broken submission never stops the batch. Output (``--out``, default autograder/): grades.csv
(student, assignment, score, max_score, status, message), gradebook.db, autograded/, feedback/ and
per-submission nbgrader logs in runs/grade-logs/. Status is one of: ok, repaired, cell-timeout,
kernel-died, notebook-timeout, malformed, wrong-assignment, unknown-assignment, grader-error.
Exit status 0 when grading completed (whatever the scores), non-zero when the grader itself broke.
"""

from __future__ import annotations

import argparse
import copy
import csv
import html
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.preprocessors import Execute

ENV_PROGRESS = "SERVELAB_GRADE_PROGRESS"
ENV_SKIP = "SERVELAB_GRADE_SKIP"
TIMEOUT_ENAME = "CellTimeoutError"
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_ATTEMPTS = 4  # one run plus up to three re-grades past cells that hung the kernel
STATUSES = ("ok", "repaired", "cell-timeout", "kernel-died", "notebook-timeout", "malformed",
            "wrong-assignment", "unknown-assignment", "grader-error")


# ------------------------------------------------------------------------------------------------
# the executor nbgrader runs (wired in by autograder/nbgrader_config.py)


def _record(event: dict) -> None:
    path = os.environ.get(ENV_PROGRESS)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")
    except OSError:
        pass


def _skips() -> dict[str, str]:
    try:
        value = json.loads(os.environ.get(ENV_SKIP) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` that also (a) appends ``{"index", "grade_id", "event"}`` lines to the file
    named by $SERVELAB_GRADE_PROGRESS, so the grader knows which cell a hung or dead kernel was running,
    and (b) does not run the cells listed in $SERVELAB_GRADE_SKIP (``{"<index>": "<message>"}``) but
    gives them a ``CellTimeoutError`` output, which scores a graded cell 0 like a timeout does.
    Without those variables it is nbgrader's ``Execute``."""

    def preprocess_cell(self, cell, resources, index):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        skipped = _skips().get(str(index))
        if skipped is not None and cell.cell_type == "code":
            self._check_assign_resources(resources)
            cell.outputs = [nbformat.v4.new_output("error", ename=TIMEOUT_ENAME, evalue=skipped,
                                                   traceback=[f"{TIMEOUT_ENAME}: {skipped}"])]
            cell.execution_count = None
            _record({"index": index, "grade_id": gid, "event": "skipped"})
            return cell, self.resources
        if cell.cell_type == "code":
            _record({"index": index, "grade_id": gid, "event": "start"})
        try:
            return super().preprocess_cell(cell, resources, index)
        except BaseException as err:
            _record({"index": index, "grade_id": gid, "event": "error", "error": type(err).__name__,
                     "detail": str(err)[:500]})
            raise


# ------------------------------------------------------------------------------------------------
# results


@dataclass
class Outcome:
    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "ok"
    message: str = ""
    seconds: float = 0.0

    def row(self) -> dict:
        return {"student": self.student, "assignment": self.assignment, "score": _num(self.score),
                "max_score": _num(self.max_score), "status": self.status, "message": self.message}


def _num(x: float) -> str:
    return f"{x:g}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ------------------------------------------------------------------------------------------------
# chapters as the gradebook knows them


def _meta(cell) -> dict:
    meta = cell.get("metadata", {})
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _gid(cell) -> str | None:
    return _meta(cell).get("grade_id")


@dataclass
class Chapter:
    name: str
    release: nbformat.NotebookNode
    order: list[str] = field(default_factory=list)  # grade ids in notebook order
    cells: dict = field(default_factory=dict)  # grade id -> released cell
    max_score: float = 0.0

    @classmethod
    def from_release(cls, name: str, path: Path) -> Chapter:
        nb = nbformat.read(path, as_version=4)
        ch = cls(name, nb)
        for cell in nb.cells:
            gid = _gid(cell)
            if gid:
                ch.order.append(gid)
                ch.cells[gid] = cell
                if _meta(cell).get("grade"):
                    ch.max_score += float(_meta(cell).get("points", 0) or 0)
        return ch

    def is_test(self, gid: str) -> bool:
        meta = _meta(self.cells[gid])
        return bool(meta.get("grade")) and not meta.get("solution")

    def is_locked(self, gid: str) -> bool:
        return bool(_meta(self.cells[gid]).get("locked")) and not _meta(self.cells[gid]).get("solution")

    def kind(self, gid: str) -> str:
        return "test cell" if self.is_test(gid) else "read-only cell" if self.is_locked(gid) else "cell"


# ------------------------------------------------------------------------------------------------
# pre-check and repair


class Rejected(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _fix_cell_ids(data: dict) -> None:
    """Give duplicated or missing nbformat cell ids fresh values (copy/paste can duplicate them)."""
    if (data.get("nbformat"), data.get("nbformat_minor", 0)) < (4, 5):
        return
    seen = set()
    for i, cell in enumerate(data.get("cells", [])):
        if not isinstance(cell, dict):
            continue
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen:
            base = f"cell-{i}"
            cid = base
            while cid in seen:
                cid += "x"
            cell["id"] = cid
        seen.add(cid)


def load_submission(path: Path) -> nbformat.NotebookNode:
    """Parse and validate a submitted notebook, or raise Rejected("malformed", ...)."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise Rejected("malformed", f"not a notebook: cannot read it ({err.strerror})") from None
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise Rejected("malformed", f"not a notebook: {len(raw) / 2**20:.0f} MiB is over the "
                                    f"{MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise Rejected("malformed", f"not a notebook: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise Rejected("malformed", f"not a notebook: invalid JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Rejected("malformed", "not a notebook: the JSON has no list of cells")
    if data.get("nbformat") != 4:
        raise Rejected("malformed", f"not a notebook: nbformat {data.get('nbformat')!r}, expected 4")
    _fix_cell_ids(data)
    try:
        _, data = nbformat.validator.normalize(data, strip_invalid_metadata=True)
        nb = nbformat.reads(json.dumps(data), as_version=4, capture_validation_error={})
        nbformat.validate(nb)
    except Exception as err:  # noqa: BLE001 - any schema problem means "not a notebook"
        first = (str(getattr(err, "message", "") or err).strip().splitlines() or ["invalid"])[0]
        raise Rejected("malformed", f"not a notebook: {_short(first, 160)}") from None
    return nb


def identify(nb, assignment: str, chapters: dict[str, Chapter]) -> None:
    """Raise Rejected unless the notebook's grade ids say it is ``assignment``'s notebook."""
    ids = {_gid(c) for c in nb.cells if _gid(c)}
    mine = len(ids & set(chapters[assignment].order))
    best = max(((len(ids & set(ch.order)), name) for name, ch in chapters.items() if name != assignment),
               default=(0, ""))
    if best[0] > mine:
        raise Rejected("wrong-assignment", f"this is {best[1]}'s notebook, not {assignment}'s "
                                           f"({best[0]} of its graded cells belong to {best[1]})")
    if mine == 0:
        why = "it has no graded cells" if not ids else f"none of its {len(ids)} graded cells belongs to it"
        raise Rejected("wrong-assignment", f"not {assignment}'s notebook: {why}")


def repair(nb, chapter: Chapter) -> list[str]:
    """Undo accidents nbgrader handles badly, in place; returns one note per repair.

    - a graded cell pasted twice: nbgrader blanks the earlier copy's metadata and then aborts the
      whole run (SchemaTooOldError), so keep the last copy and turn the others into plain cells;
    - a locked cell that lost its nbgrader metadata: found by its source and re-tagged;
    - a deleted locked cell (test or read-only): re-inserted from the release after its predecessor
      (nbgrader's OverwriteCells then restores hidden tests into it, as for every test cell);
    - instructor-owned metadata (grade/solution/locked/points) reset to the release's;
    and notes locked cells whose source was edited (nbgrader restores them from the gradebook).
    """
    notes = []
    counts = Counter(_gid(c) for c in nb.cells if _gid(c))
    for gid, n in counts.items():
        if n > 1:
            copies = [c for c in nb.cells if _gid(c) == gid]
            for cell in copies[:-1]:
                cell.metadata.pop("nbgrader", None)
            notes.append(f"cell {gid} appears {n} times; graded the last copy")

    present = {_gid(c) for c in nb.cells if _gid(c)}
    for gid in chapter.order:
        if gid in present or not chapter.is_locked(gid):
            continue
        want = chapter.cells[gid].source.strip()
        twin = next((c for c in nb.cells if not _meta(c) and c.source.strip() == want
                     and c.cell_type == chapter.cells[gid].cell_type), None)
        if twin is not None:
            twin.metadata["nbgrader"] = copy.deepcopy(chapter.cells[gid].metadata["nbgrader"])
            if "tags" in chapter.cells[gid].metadata:
                twin.metadata["tags"] = list(chapter.cells[gid].metadata["tags"])
            present.add(gid)
            notes.append(f"cell {gid} had lost its grading metadata; restored it")

    used_ids = {c.get("id") for c in nb.cells}
    for pos, gid in enumerate(chapter.order):
        if gid in present or not chapter.is_locked(gid):
            continue
        cell = copy.deepcopy(chapter.cells[gid])
        if "id" in cell:
            while cell["id"] in used_ids:
                cell["id"] = (cell["id"] + "r")[-64:]
            used_ids.add(cell["id"])
        before = [g for g in chapter.order[:pos] if g in present]
        after = [g for g in chapter.order[pos + 1:] if g in present]
        index = {(_gid(c)): i for i, c in enumerate(nb.cells) if _gid(c)}
        if before:
            nb.cells.insert(index[before[-1]] + 1, cell)
        elif after:
            nb.cells.insert(index[after[0]], cell)
        else:
            nb.cells.append(cell)
        present.add(gid)
        what = "re-inserted and graded" if chapter.is_test(gid) else "re-inserted"
        notes.append(f"{chapter.kind(gid)} {gid} was missing; {what}")

    for cell in nb.cells:
        gid = _gid(cell)
        if gid not in chapter.cells:
            if "nbgrader" in cell.get("metadata", {}):
                # a cell of the learner's own making, or one whose grade id is not the chapter's:
                # nbgrader would drop the id anyway, and stray metadata can abort the whole run
                cell.metadata.pop("nbgrader", None)
            continue
        ref = chapter.cells[gid]
        keys = ("grade", "solution", "locked", "points")
        if any(bool(_meta(cell).get(k)) != bool(_meta(ref).get(k)) for k in keys[:3]) or \
                float(_meta(cell).get("points", 0) or 0) != float(_meta(ref).get("points", 0) or 0):
            notes.append(f"{chapter.kind(gid)} {gid} had its grading metadata changed; restored it")
        cell.metadata["nbgrader"] = copy.deepcopy(ref.metadata["nbgrader"])
        if chapter.is_locked(gid):
            if "tags" in ref.metadata:
                cell.metadata["tags"] = list(ref.metadata["tags"])
            if cell.cell_type == ref.cell_type and cell.source.strip() != ref.source.strip():
                notes.append(f"{chapter.kind(gid)} {gid} was edited; graded the original")
    return notes


# ------------------------------------------------------------------------------------------------
# reading a graded notebook


def first_error_line(cell, per_cell: int | None) -> str:
    """The first line of what cost a graded cell its points."""
    outputs = cell.get("outputs", [])
    for out in outputs:
        if out.get("output_type") == "error" and out.get("ename") == TIMEOUT_ENAME:
            return f"exceeded the per-cell limit of {per_cell} s"
    for out in outputs:
        if out.get("output_type") == "error":
            lines = [ln for ln in str(out.get("evalue", "")).strip().splitlines() if ln.strip()]
            return f"{out.get('ename', 'Error')}: {lines[0].strip()}" if lines else str(out.get("ename", "Error"))
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            lines = [ln for ln in str(out.get("text", "")).splitlines() if ln.strip()]
            return f"wrote to stderr: {lines[0].strip() if lines else ''}"
    for out in outputs:
        if out.get("output_type") == "execute_result":
            return "partial credit"
    return "lost points"


def timed_out_cells(nb) -> list[str]:
    out = []
    for i, cell in enumerate(nb.cells):
        if any(o.get("output_type") == "error" and o.get("ename") == TIMEOUT_ENAME for o in cell.get("outputs", [])):
            out.append(_gid(cell) or f"#{i}")
    return out


def _progress(path: Path) -> list[dict]:
    try:
        return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, ValueError):
        return []


def _cell_name(event: dict | None) -> str:
    if not event:
        return "an unknown cell"
    return event.get("grade_id") or f"#{event.get('index')} (a cell without a grade id)"


# ------------------------------------------------------------------------------------------------
# the batch


@dataclass
class Job:
    student: str
    assignment: str
    staged: Path
    notes: list[str]
    skip: dict[str, str] = field(default_factory=dict)
    attempt: int = 0
    started: float = 0.0
    first_start: float = 0.0
    child: object = None
    log: Path | None = None
    progress: Path | None = None
    timed_out_cell: bool = False


class Grader:
    def __init__(self, root: Path, out: Path, per_cell: int | None, notebook_timeout: float, jobs: int,
                 quiet: bool = False):
        from servelab_autograder import release

        self.release = release
        self.root = root
        self.out = out
        self.autograded = out / "autograded"
        self.feedback = out / "feedback"
        self.logs = out / "runs" / "grade-logs"
        self.db_url = "sqlite:///" + str(out / "gradebook.db")
        self.per_cell = per_cell if per_cell is not None else configured_cell_timeout(root)
        self.notebook_timeout = notebook_timeout
        self.jobs = max(1, jobs)
        self.quiet = quiet
        self.env = release.venv_path_env()
        self.staging = Path(tempfile.mkdtemp(prefix="servelab-grade-"))
        self.chapters: dict[str, Chapter] = {}
        self.every_chapter: dict[str, Chapter] = {}   # all of solutions/, to recognise a foreign notebook
        self.results: list[Outcome] = []
        self.total = 0

    # --- output -----------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        if not self.quiet:
            print(text, flush=True)

    def report(self, outcome: Outcome) -> None:
        self.results.append(outcome)
        n = len(self.results)
        width = len(str(self.total))
        self.say(f"[{n:>{width}}/{self.total}] {outcome.assignment}  {outcome.student:<28} "
                 f"{_num(outcome.score):>5}/{_num(outcome.max_score):<5} {outcome.status:<17} "
                 f"{outcome.seconds:5.1f}s  {_short(outcome.message, 90)}")

    # --- nbgrader ---------------------------------------------------------------------------------
    def nbgrader_args(self) -> list[str]:
        return [f"--CourseDirectory.db_url={self.db_url}",
                f"--CourseDirectory.submitted_directory={self.staging / 'submitted'}",
                f"--CourseDirectory.autograded_directory={self.autograded}",
                f"--CourseDirectory.feedback_directory={self.feedback}",
                f"--Execute.timeout={self.per_cell}"]

    def register(self, assignments: list[str]) -> None:
        """generate_assignment each chapter into a scratch release with this run's gradebook, so the
        gradebook holds the current cells (and hidden tests) and we know the released notebook."""
        from nbgrader.api import Gradebook, MissingEntry

        rel = self.staging / "release"
        for a in assignments:
            args = ["generate_assignment", a, "--force", f"--CourseDirectory.release_directory={rel}",
                    f"--CourseDirectory.db_url={self.db_url}"]
            run = self.release.run_nbgrader(args, cwd=self.root, env=self.env)
            if run.returncode != 0 and "submissions associated" in run.output:
                with Gradebook(self.db_url) as gb:
                    try:
                        stale = [s.student.id for s in gb.find_assignment(a).submissions]
                    except MissingEntry:
                        stale = []
                    for student in stale:
                        gb.remove_submission(a, student)
                self.say(f"{a} changed since it was last graded: dropped {len(stale)} old gradebook "
                         f"submission(s) of it")
                run = self.release.run_nbgrader(args, cwd=self.root, env=self.env)
            path = rel / a / f"{a}.ipynb"
            if run.returncode != 0 or not path.is_file():
                raise RuntimeError(f"cannot register {a} in the gradebook: "
                                   f"{self.release.last_error(run.output)}")
            self.chapters[a] = Chapter.from_release(a, path)

    def clean(self, student: str, assignment: str) -> None:
        for base in (self.autograded, self.feedback):
            target = base / student / assignment
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)

    # --- the run ----------------------------------------------------------------------------------
    def grade(self, submissions: Path) -> list[Outcome]:
        known = self.release.chapters(self.root)
        found = []
        for sdir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for adir in sorted(p for p in sdir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                found.append((sdir.name, adir.name, adir))
        self.total = len(found)
        if not found:
            self.say(f"no submissions under {submissions} (expected <student>/<assignment>/<assignment>.ipynb)")
            return []
        needed = sorted({a for _, a, _ in found if a in known})
        start = time.monotonic()
        self.register(needed)
        # a notebook is recognised among ALL chapters, not only those graded in this run
        self.every_chapter = dict(self.chapters)
        for a in known:
            if a not in self.every_chapter:
                self.every_chapter[a] = Chapter.from_release(a, self.release.source_notebook(self.root, a))
        self.say(f"registered {', '.join(needed) or 'no chapters'} in {self.db_url[len('sqlite:///'):]} "
                 f"({time.monotonic() - start:.1f} s); grading {len(found)} submission(s), per-cell limit "
                 f"{self.per_cell} s, notebook limit {self.notebook_timeout:g} s, {self.jobs} at a time")

        from nbgrader.api import Gradebook, MissingEntry

        pending: list[Job] = []
        with Gradebook(self.db_url) as gb:
            for student, assignment, adir in found:
                t0 = time.monotonic()
                self.clean(student, assignment)
                if assignment in known:
                    try:
                        gb.remove_submission(assignment, student)
                    except MissingEntry:
                        pass
                try:
                    job_or_outcome = self.prepare(student, assignment, adir, known)
                except Exception as err:  # noqa: BLE001 - one odd submission must not stop the batch
                    top = self.chapters[assignment].max_score if assignment in self.chapters else 0.0
                    job_or_outcome = Outcome(student, assignment, 0.0, top, "grader-error",
                                             f"pre-check failed: {type(err).__name__}: {_short(str(err), 160)}")
                if isinstance(job_or_outcome, Outcome):
                    job_or_outcome.seconds = time.monotonic() - t0
                    self.write_failure_feedback(job_or_outcome)
                    self.report(job_or_outcome)
                else:
                    gb.update_or_create_student(student)
                    pending.append(job_or_outcome)
        self.run_jobs(pending)
        self.make_feedback()
        return self.results

    def prepare(self, student: str, assignment: str, adir: Path, known: list[str]) -> Job | Outcome:
        chapter = self.chapters.get(assignment)
        top = chapter.max_score if chapter else 0.0
        if assignment not in known:
            return Outcome(student, assignment, 0.0, top, "unknown-assignment",
                           f"unknown assignment {assignment!r} (known: {', '.join(known) or 'none'})")
        path = adir / f"{assignment}.ipynb"
        if not path.is_file():
            others = sorted(p.name for p in adir.glob("*.ipynb"))
            return Outcome(student, assignment, 0.0, top, "malformed",
                           f"not a notebook: no {assignment}.ipynb in the submission"
                           + (f" (found {', '.join(others)})" if others else ""))
        try:
            nb = load_submission(path)
            identify(nb, assignment, self.every_chapter or self.chapters)
            notes = repair(nb, chapter)
        except Rejected as rej:
            return Outcome(student, assignment, 0.0, top, rej.status, rej.message)
        staged = self.staging / "submitted" / student / assignment / f"{assignment}.ipynb"
        staged.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, staged)
        stamp = adir / "timestamp.txt"
        if stamp.is_file():
            shutil.copy(stamp, staged.parent / "timestamp.txt")
        return Job(student, assignment, staged, notes)

    def start(self, job: Job) -> None:
        job.attempt += 1
        suffix = "" if job.attempt == 1 else f".{job.attempt}"
        job.log = self.logs / job.assignment / f"{job.student}{suffix}.log"
        job.progress = self.logs / job.assignment / f"{job.student}{suffix}.progress"
        job.log.parent.mkdir(parents=True, exist_ok=True)
        job.progress.unlink(missing_ok=True)
        env = dict(self.env)
        env[ENV_PROGRESS] = str(job.progress)
        env[ENV_SKIP] = json.dumps(job.skip)
        argv = ["autograde", job.assignment, "--student", job.student, "--force", *self.nbgrader_args()]
        job.started = time.monotonic()
        if job.attempt == 1:
            job.first_start = job.started
        job.child = self.release.start_nbgrader(argv, cwd=self.root, log_path=job.log, env=env)

    def run_jobs(self, pending: list[Job]) -> None:
        running: list[Job] = []
        while pending or running:
            busy = {j.student for j in running}
            for job in list(pending):
                if len(running) >= self.jobs:
                    break
                if job.student in busy:  # nbgrader creates/updates the student row: one at a time
                    continue
                pending.remove(job)
                self.start(job)
                running.append(job)
                busy.add(job.student)
            time.sleep(0.02)
            for job in list(running):
                deadline = job.started + self.notebook_timeout
                run = job.child.poll(deadline=deadline)
                if run is None:
                    continue
                running.remove(job)
                try:
                    again = self.finish_attempt(job, run)
                except Exception as err:  # noqa: BLE001 - e.g. an unreadable autograded notebook
                    top = self.chapters[job.assignment].max_score
                    failed = Outcome(job.student, job.assignment, 0.0, top, "grader-error",
                                     f"reading the result failed: {type(err).__name__}: {_short(str(err), 160)}",
                                     time.monotonic() - job.first_start)
                    self.write_failure_feedback(failed)
                    self.report(failed)
                    again = False
                if again:
                    pending.insert(0, job)

    def finish_attempt(self, job: Job, run) -> bool:
        """Handle one nbgrader run; True when the submission must be graded again."""
        events = _progress(job.progress)
        last = events[-1] if events else None
        running_cell = next((e for e in reversed(events) if e.get("event") in ("start", "error")), None)
        error = last.get("error") if last and last.get("event") == "error" else None
        top = self.chapters[job.assignment].max_score
        done = Outcome(job.student, job.assignment, 0.0, top)
        if run.timed_out:
            where = f" (running cell {_cell_name(running_cell)})" if running_cell else ""
            done.status = "notebook-timeout"
            done.message = f"grading exceeded the notebook limit of {self.notebook_timeout:g} s{where}"
        elif run.returncode == 0 and self.autograded_path(job).is_file():
            self.read_scores(job, done)
        elif (error == "DeadKernelError") or "Kernel died" in run.output:
            done.status = "kernel-died"
            done.message = f"kernel died in cell {_cell_name(running_cell)}"
        elif error == TIMEOUT_ENAME and job.attempt < MAX_ATTEMPTS:
            # the kernel ignored the interrupt: grade again with this cell replaced by a timeout error
            msg = f"cell {_cell_name(last)} exceeded the per-cell limit of {self.per_cell} s"
            job.skip[str(last["index"])] = msg + " (the kernel stayed busy, so the cell was skipped)"
            job.notes.append(msg)
            job.timed_out_cell = True
            return True
        elif error == TIMEOUT_ENAME:
            done.status = "cell-timeout"
            done.message = (f"cell {_cell_name(last)} exceeded the per-cell limit of {self.per_cell} s; "
                            f"gave up after {job.attempt} runs")
        else:
            done.status = "grader-error"
            done.message = f"nbgrader failed: {_short(self.release.last_error(run.output), 160)}"
        graded = self.autograded_path(job).is_file() and done.status in ("ok", "repaired", "cell-timeout")
        if not graded:
            done.message = "; ".join(dict.fromkeys([done.message, *job.notes]))
            self.write_failure_feedback(done)
        done.seconds = time.monotonic() - job.first_start
        self.report(done)
        return False

    def autograded_path(self, job: Job) -> Path:
        return self.autograded / job.student / job.assignment / f"{job.assignment}.ipynb"

    def read_scores(self, job: Job, done: Outcome) -> None:
        from nbgrader.api import Gradebook

        graded = nbformat.read(self.autograded_path(job), as_version=4)
        cells = {_gid(c): c for c in graded.cells if _gid(c)}
        lost, manual = [], []
        with Gradebook(self.db_url) as gb:
            sub = gb.find_submission(job.assignment, job.student)
            done.score, done.max_score = float(sub.score or 0.0), float(sub.max_score or 0.0)
            order = {g: i for i, g in enumerate(self.chapters[job.assignment].order)}
            grades = sorted((g for nb in sub.notebooks for g in nb.grades), key=lambda g: order.get(g.name, 1e9))
            for g in grades:
                if g.needs_manual_grade:
                    manual.append(g.name)
                elif (g.score or 0.0) < g.max_score and g.name in cells:
                    why = first_error_line(cells[g.name], self.per_cell)
                    if not why.startswith("exceeded the per-cell limit"):  # said once, below
                        lost.append(f"{g.name}: {_short(why, 500)}")
        notes = list(job.notes)
        for gid in timed_out_cells(graded):
            msg = f"cell {gid} exceeded the per-cell limit of {self.per_cell} s"
            if not any(n.startswith(msg) for n in notes):
                notes.append(msg)
            job.timed_out_cell = True
        if manual:
            notes.append(f"needs manual grading: {', '.join(manual)}")
        done.status = "cell-timeout" if job.timed_out_cell else "repaired" if job.notes else "ok"
        parts = notes + lost
        done.message = "; ".join(parts) if parts else "all tests passed"

    # --- feedback ---------------------------------------------------------------------------------
    def make_feedback(self) -> None:
        """One generate_feedback per chapter for everything autograded (about 1 s per chapter, against
        about 1 s per student when run one by one); per student for any page it did not make."""
        graded: dict[str, list[str]] = {}
        for r in self.results:
            if (self.autograded / r.student / r.assignment / f"{r.assignment}.ipynb").is_file():
                graded.setdefault(r.assignment, []).append(r.student)
        for a, students in sorted(graded.items()):
            argv = ["generate_feedback", a, "--force", *self.nbgrader_args()]
            run = self.release.run_nbgrader(argv, cwd=self.root, env=self.env,
                                            log_path=self.logs / a / "_feedback.log")
            missing = [s for s in students if not (self.feedback / s / a / f"{a}.html").is_file()]
            if run.returncode != 0 or missing:
                for s in missing:
                    self.release.run_nbgrader([*argv, "--student", s], cwd=self.root, env=self.env,
                                              log_path=self.logs / a / f"_feedback-{s}.log")

    def write_failure_feedback(self, outcome: Outcome) -> None:
        """A small feedback page for submissions nbgrader could not grade."""
        folder = self.feedback / outcome.student / outcome.assignment
        folder.mkdir(parents=True, exist_ok=True)
        title = f"{outcome.assignment}: {outcome.student}"
        body = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                f"</head><body><h1>{html.escape(title)}</h1>"
                f"<p>Score: {_num(outcome.score)} / {_num(outcome.max_score)}</p>"
                f"<p>Status: {html.escape(outcome.status)}</p><p>{html.escape(outcome.message)}</p>"
                "</body></html>\n")
        (folder / f"{outcome.assignment}.html").write_text(body, encoding="utf-8")

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def configured_cell_timeout(root: Path) -> int:
    """``c.Execute.timeout`` from the course's nbgrader configuration (nbgrader's default: 30)."""
    from traitlets.config.loader import PyFileConfigLoader

    try:
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        value = cfg.Execute.timeout
        return int(value) if isinstance(value, int) else 30
    except Exception:  # noqa: BLE001 - no or broken config: nbgrader's default
        return 30


def write_csv(path: Path, outcomes: list[Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["student", "assignment", "score", "max_score", "status", "message"])
        writer.writeheader()
        for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
            writer.writerow(o.row())


def summary(outcomes: list[Outcome]) -> str:
    rows = [("student", "assignment", "score", "status", "message")]
    for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
        rows.append((o.student, o.assignment, f"{_num(o.score)}/{_num(o.max_score)}", o.status, _short(o.message, 70)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(r[j].ljust(widths[j]) for j in range(4)) + "  " + r[4])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 7)
    counts = Counter(o.status for o in outcomes)
    lines.append(f"{len(outcomes)} submission(s)" + "".join(f", {n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from servelab_autograder import release

    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<assignment>/<assignment>.ipynb")
    parser.add_argument("--per-cell-timeout", type=int, default=None, metavar="S",
                        help="seconds one cell may run (default: c.Execute.timeout of the nbgrader config)")
    parser.add_argument("--notebook-timeout", type=float, default=600.0, metavar="S",
                        help="wall-clock seconds one grading run may take before it is killed (default 600)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="grades.csv, gradebook.db, autograded/, feedback/ (default: autograder/)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="submissions graded at the same time, each in its own process (default 1)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)

    root = release.repo_root()
    out = (args.out or root / "autograder").resolve()
    if not args.submissions.is_dir():
        print(f"no such folder: {args.submissions}", file=sys.stderr)
        return 2
    os.environ.update(release.venv_path_env())
    out.mkdir(parents=True, exist_ok=True)
    grader = Grader(root, out, args.per_cell_timeout, args.notebook_timeout, args.jobs, quiet=args.quiet)
    started = time.monotonic()
    try:
        outcomes = grader.grade(args.submissions.resolve())
    except Exception as err:  # noqa: BLE001 - the grader itself broke
        traceback.print_exc()
        print(f"grading aborted: {err}", file=sys.stderr)
        return 1
    finally:
        grader.close()
    write_csv(out / "grades.csv", outcomes)
    print()
    print(summary(outcomes))
    print(f"grades: {out / 'grades.csv'}; feedback: {grader.feedback}; {time.monotonic() - started:.1f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
