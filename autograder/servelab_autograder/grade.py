"""Autograde a folder of submissions (``make autograde SUBMISSIONS=dir``).

    python -m servelab_autograder.grade SUBMISSIONS_DIR [--out DIR] [--jobs N] [--dask ADDRESS] [--resume]
                                        [--cell-cpu S] [--notebook-cpu S] [--wall-factor F]
                                        [--unsafe-no-sandbox] [--quiet]

SUBMISSIONS_DIR holds nbgrader's submitted layout, ``<student>/<assignment>/<assignment>.ipynb``.
For each submission the grader

1. pre-checks a copy: valid JSON / nbformat / Unicode, a known assignment, and by its grade ids the right
   notebook; repairs what a learner can break by accident (a duplicated, deleted or metadata-stripped
   graded cell) and notes what nbgrader will undo (an edited test cell, restored by checksum);
2. runs ``nbgrader autograde <a> --student <s> --force`` in its own process, whose kernel runs in a
   sandbox of its own (``servelab_autograder.sandbox``: no view of the gradebook, the solutions, the
   grader or other submissions; no network; limits on memory, processes, files and output) and is
   watched from outside (``servelab_autograder.kernel_guard``): time limits are CPU time, per cell and per
   notebook, each with a wall-clock backstop ``--wall-factor`` times larger (``servelab_autograder.limits``
   has the defaults and the per-chapter values). The notebook is graded again, up to three times, when
   a cell left the kernel unable to go on: a cell stopped by the wall-clock backstop while using little
   CPU (a starved machine) is re-run with its limits doubled; a cell whose kernel ignored the interrupt,
   died (``os._exit``, a signal, the memory limit) or was ended by ``exit()`` is skipped, so the others
   are still graded;
3. writes that submission's result at once (``results/<assignment>/<student>.json``, atomically), reads
   the scores from the gradebook and, per test cell that lost points, the first line of its error;
   ``nbgrader generate_feedback`` then writes the HTML feedback.

With ``--dask`` each attempt of step 2 runs as one task on a Dask cluster instead of the local process pool
(``servelab_autograder.fanout``); the head keeps steps 1 and 3 and is the gradebook's only writer.

A broken submission never stops the batch. A new run first moves the previous run's grades.csv and
results/ to runs/previous/<time>/ (the gradebook stays nbgrader's record); a run that was killed can be
finished with ``--resume``, which grades only the submissions that have no result yet (or changed
since). Output (``--out``, default autograder/): grades.csv (student, assignment, score, max_score, status,
message), results/, gradebook.db, autograded/, feedback/ and per-submission logs in runs/grade-logs/.
Status is one of: graded, repaired, cell-timeout, kernel-died, notebook-timeout, malformed, wrong-assignment,
unknown-assignment, grader-error.

The grader refuses to run when it cannot make the sandbox (it says why and how to fix it in one line);
``--unsafe-no-sandbox`` grades without one, on a machine where every submission is trusted.
Exit status 0 when grading completed (whatever the scores), 1 when the grader itself broke, 2 for a
bad command line or a machine that cannot sandbox.
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import html
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from servelab_autograder import limits as grading_limits
from servelab_autograder import sandbox, verdicts
from servelab_autograder.kernel_guard import ENV_PLAN, TIMEOUT_ENAME
from servelab_autograder.staging import STAGING_PREFIX, sweep_stale_staging

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_ATTEMPTS = 4  # one run plus up to three re-grades
STATUSES = ("graded", "repaired", "cell-timeout", "kernel-died", "notebook-timeout", "malformed",
            "wrong-assignment", "unknown-assignment", "grader-error")
RESULTS = "results"
# what nbgrader's exchange puts beside a submitted notebook and its later steps read: the submission time (late
# penalties, the gradebook) and the learner's secret, which names the feedback page only they can fetch
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
PREVIOUS = "runs/previous"


# ------------------------------------------------------------------------------------------------
# results


@dataclass
class Outcome:
    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "graded"
    message: str = ""
    seconds: float = 0.0
    digest: str = ""   # sha256 of the submitted notebook's bytes: a resumed run re-grades a changed one
    seed: int | None = None  # the seed of the random cases it was graded on (chapters graded from a table)

    def row(self) -> dict:
        return {"student": self.student, "assignment": self.assignment, "score": _num(self.score),
                "max_score": _num(self.max_score), "status": self.status, "message": self.message}


def _num(x: float) -> str:
    return f"{x:g}"


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole. A file replaced keeps its mode (nbgrader's feedback page must stay readable by the
    learner it is released to); a new one is the writer's alone (mode 600), like the grades."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if path.is_file():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def result_path(out: Path, student: str, assignment: str) -> Path:
    return out / RESULTS / assignment / f"{student}.json"


def save_result(out: Path, outcome: Outcome) -> None:
    """One submission's result, on disk the moment it is known."""
    _write_atomic(result_path(out, outcome.student, outcome.assignment), json.dumps(asdict(outcome), indent=1) + "\n")


def load_results(out: Path) -> dict[tuple[str, str], Outcome]:
    """(assignment, student) -> Outcome for every readable result file under out/results/."""
    found = {}
    for path in sorted((out / RESULTS).glob("*/*.json")):
        try:
            o = Outcome(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
        found[(o.assignment, o.student)] = o
    return found


def move_aside(out: Path) -> Path | None:
    """Move the previous run's grades.csv and results/ to runs/previous/<time>/, so that nothing of an
    earlier run can pass for this one's; returns where they went (None when there was nothing)."""
    old = [p for p in (out / "grades.csv", out / RESULTS) if p.exists()]
    if not old:
        return None
    dest = out / PREVIOUS / datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    dest.mkdir(parents=True)
    for p in old:
        os.replace(p, dest / p.name)
    return dest


def digest_file(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


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
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        bad = err.object[err.start:err.end].encode("unicode_escape").decode("ascii")
        raise Rejected("malformed", f"not a notebook: it holds text that is not Unicode (a lone surrogate "
                                    f"escape, {bad})") from None
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


def first_error_line(cell) -> str:
    """The first line of what cost a graded cell its points."""
    outputs = cell.get("outputs", [])
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


def cells_with_error(nb, ename: str) -> list[tuple[str, str]]:
    """(cell name, error message) of every cell with an ``ename`` error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == ename:
                found.append((_cell_name({"grade_id": _gid(cell), "index": i}), str(o.get("evalue", "")).strip()))
                break
    return found


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
    notes: list[str]                       # repairs of the notebook (status "repaired")
    digest: str = ""
    remarks: list[str] = field(default_factory=list)   # what happened while grading
    skip: dict[str, str] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    attempt: int = 0
    started: float = 0.0
    first_start: float = 0.0
    child: object = None
    log: Path | None = None
    progress: Path | None = None
    box_dir: Path | None = None
    timed_out_cell: bool = False
    kernel_died: bool = False


class Grader:
    def __init__(self, root: Path, out: Path, limits: grading_limits.Limits | None = None,
                 overrides: dict | None = None, jobs: int = 1, quiet: bool = False, use_sandbox: bool = True,
                 resume: bool = False, seed: int | None = None, dask: str | None = None):
        from servelab_autograder import release

        self.release = release
        self.root = root
        self.out = out
        self.autograded = out / "autograded"
        self.feedback = out / "feedback"
        self.logs = out / "runs" / "grade-logs"
        self.db_url = "sqlite:///" + str(out / "gradebook.db")
        self.base_limits = limits or grading_limits.Limits()
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.jobs = max(1, jobs)
        self.quiet = quiet
        self.use_sandbox = use_sandbox
        self.resume = resume
        self.dask = dask   # None: the local process pool; "local" or a scheduler address: servelab_autograder.fanout
        self.env = release.venv_path_env()
        sweep_stale_staging()
        self.staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
        os.chmod(self.staging, 0o711)  # the sandbox users cross it to reach their own scratch folders
        (self.staging / "owner.pid").write_text(str(os.getpid()), encoding="utf-8")
        self.boxes = 0
        self.font_cache: Path | None = None
        self.seed = seed if seed is not None else secrets.randbelow(2**31)
        self.libraries: dict[str, Path] = {}
        self.chapters: dict[str, Chapter] = {}
        self.every_chapter: dict[str, Chapter] = {}   # all of solutions/, to recognise a foreign notebook
        self.results: list[Outcome] = []
        self.total = 0
        self.widths = (0, 0)   # of the assignment and student columns of the progress lines

    def limits(self, assignment: str) -> grading_limits.Limits:
        return grading_limits.for_chapter(assignment, self.base_limits, **self.overrides)

    # --- output -----------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        if not self.quiet:
            print(text, flush=True)

    def report(self, outcome: Outcome, how: str = "") -> None:
        """Record a finished submission: its result file first, then the progress line."""
        if how != "resumed":
            save_result(self.out, outcome)
        self.results.append(outcome)
        n = len(self.results)
        width = len(str(self.total))
        aw, sw = self.widths
        self.say(f"[{n:>{width}}/{self.total}] {outcome.assignment:<{aw}}  {outcome.student:<{sw}}  "
                 f"{_num(outcome.score):>5}/{_num(outcome.max_score):<5} {outcome.status:<17} "
                 f"{'resumed' if how == 'resumed' else f'{outcome.seconds:5.1f}s'}  {_short(outcome.message, 90)}")

    # --- nbgrader ---------------------------------------------------------------------------------
    def nbgrader_args(self) -> list[str]:
        return [f"--CourseDirectory.db_url={self.db_url}",
                f"--CourseDirectory.submitted_directory={self.staging / 'submitted'}",
                f"--CourseDirectory.autograded_directory={self.autograded}",
                f"--CourseDirectory.feedback_directory={self.feedback}"]

    def register(self, assignments: list[str]) -> None:
        """generate_assignment each chapter into a scratch release with this run's gradebook, so the
        gradebook holds the current cells (and hidden tests) and we know the released notebook. A resumed
        run keeps the gradebook's record of a chapter that has not changed."""
        from nbgrader.api import Gradebook, MissingEntry

        rel = self.staging / "release"
        stamps_path = self.out / RESULTS / "_chapters.json"
        try:
            stamps = json.loads(stamps_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stamps = {}
        for a in assignments:
            fingerprint = self.release.fingerprint(self.root, a)
            args = ["generate_assignment", a, "--force", f"--CourseDirectory.release_directory={rel}"]
            keep = self.resume and stamps.get(a) == fingerprint
            args.append("--no-db" if keep else f"--CourseDirectory.db_url={self.db_url}")
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
            stamps[a] = fingerprint
        _write_atomic(stamps_path, json.dumps(stamps, indent=1, sort_keys=True) + "\n")

    def clean(self, student: str, assignment: str) -> None:
        for base in (self.autograded, self.feedback):
            target = base / student / assignment
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)

    def prepare_sandbox(self) -> None:
        """Matplotlib's font list, built once on the trusted side (each sandbox would spend about 1 s on it)."""
        cache = self.out / "runs" / "sandbox-cache" / "matplotlib"
        found = sorted(cache.glob("fontlist-*.json"))
        if not found:
            cache.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], capture_output=True,
                           env={**self.env, "MPLCONFIGDIR": str(cache)}, timeout=300)
            found = sorted(cache.glob("fontlist-*.json"))
        self.font_cache = found[-1] if found else None

    # --- the run ----------------------------------------------------------------------------------
    def grade(self, submissions: Path) -> list[Outcome]:
        known = self.release.chapters(self.root)
        found = []
        for sdir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for adir in sorted(p for p in sdir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                found.append((sdir.name, adir.name, adir))
        self.total = len(found)
        self.widths = (max((len(a) for _, a, _ in found), default=0), max((len(s) for s, _, _ in found), default=0))
        if not self.resume:
            moved = move_aside(self.out)
            if moved:
                self.say(f"moved the previous run's grades.csv and results to {moved}")
        if not found:
            self.say(f"no submissions under {submissions} (expected <student>/<assignment>/<assignment>.ipynb)")
            return []
        done = load_results(self.out) if self.resume else {}
        todo = []
        for student, assignment, adir in found:
            old = done.get((assignment, student))
            if old is not None and old.digest == digest_file(adir / f"{assignment}.ipynb"):
                self.report(old, "resumed")
            else:
                todo.append((student, assignment, adir))
        if self.resume:
            self.say(f"resuming: {len(found) - len(todo)} result(s) kept, {len(todo)} to grade")
        needed = sorted({a for _, a, _ in todo if a in known})
        start = time.monotonic()
        self.register(needed)
        if self.use_sandbox and todo:
            self.prepare_sandbox()
        # a notebook is recognised among ALL chapters, not only those graded in this run
        self.every_chapter = dict(self.chapters)
        for a in known:
            if a not in self.every_chapter:
                self.every_chapter[a] = Chapter.from_release(a, self.release.source_notebook(self.root, a))
        for a in needed:
            chapter = verdicts.table(a)
            if chapter is not None and chapter.references and self.use_sandbox:
                self.libraries[a] = sandbox.build_library(self.root, self.staging / f"lib-{a}", chapter.references)
        lim = self.limits(needed[0]) if needed else self.base_limits
        where = f"in a {sandbox.mode()}-mode sandbox" if self.use_sandbox else "WITHOUT a sandbox"
        self.say(f"registered {', '.join(needed) or 'no chapters'} in {self.db_url[len('sqlite:///'):]} "
                 f"({time.monotonic() - start:.1f} s); grading {len(todo)} submission(s) {where}, "
                 f"{self.jobs} at a time; limits: {lim.cell_cpu_s:g} CPU-s a cell, {lim.notebook_cpu_s:g} a "
                 f"notebook, wall-clock backstops x{lim.wall_factor:g}; random cases from seed {self.seed}")

        from nbgrader.api import Gradebook, MissingEntry

        pending: list[Job] = []
        with Gradebook(self.db_url) as gb:
            for student, assignment, adir in todo:
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
                    job_or_outcome.digest = digest_file(adir / f"{assignment}.ipynb")
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
        for name in EXCHANGE_FILES:
            if (adir / name).is_file():
                shutil.copy(adir / name, staged.parent / name)
        return Job(student, assignment, staged, notes, digest_file(path))

    def plan(self, job: Job) -> dict:
        """Begin one more attempt at `job`: its log and progress paths, and the kernel guard's plan for it."""
        job.attempt += 1
        suffix = "" if job.attempt == 1 else f".{job.attempt}"
        job.log = self.logs / job.assignment / f"{job.student}{suffix}.log"
        job.progress = self.logs / job.assignment / f"{job.student}{suffix}.progress"
        job.log.parent.mkdir(parents=True, exist_ok=True)
        job.progress.unlink(missing_ok=True)
        self.boxes += 1
        job.box_dir = self.staging / f"s{self.boxes}"  # short: the kernel's socket paths must fit 107 bytes
        lim = self.limits(job.assignment)
        plan = {"progress": str(job.progress), "skip": job.skip, "scale": job.scale, "limits": lim.as_dict(),
                "sandbox": self.use_sandbox, "box_dir": str(job.box_dir),
                "font_cache": str(self.font_cache) if self.font_cache else None}
        if verdicts.table(job.assignment) is not None:
            plan["verdicts"] = {"assignment": job.assignment, "seed": self.seed}
        if job.assignment in self.libraries:
            plan["library"] = str(self.libraries[job.assignment])
        job.started = time.monotonic()
        if job.attempt == 1:
            job.first_start = job.started
        return plan

    def start(self, job: Job) -> None:
        plan = self.plan(job)
        plan_path = self.staging / f"plan-{self.boxes}.json"
        plan_path.write_text(json.dumps(plan), encoding="utf-8")
        env = dict(self.env)
        env[ENV_PLAN] = str(plan_path)
        argv = ["autograde", job.assignment, "--student", job.student, "--force", *self.nbgrader_args()]
        job.child = self.release.start_nbgrader(argv, cwd=self.root, log_path=job.log, env=env)

    def run_jobs(self, pending: list[Job]) -> None:
        if self.dask is not None:
            return self.run_jobs_on_dask(pending)
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
                deadline = job.started + self.limits(job.assignment).notebook_wall_s
                run = job.child.poll(deadline=deadline)
                if run is None:
                    continue
                running.remove(job)
                sandbox.sweep(job.box_dir)
                if self.finish_or_fail(job, run):
                    pending.insert(0, job)

    def run_jobs_on_dask(self, pending: list[Job]) -> None:
        """Each attempt is one task of servelab_autograder.fanout on the cluster; the results come back as they
        finish and are taken in here, on the head, one at a time (the gradebook has this one writer)."""
        from distributed import as_completed

        from servelab_autograder import fanout

        if not pending:
            return
        gradebook = fanout.learnerless_gradebook(Path(self.db_url[len("sqlite:///"):]))
        client, cluster = fanout.client(self.dask, self.jobs)
        try:
            where = "a LocalCluster" if cluster is not None else self.dask
            self.say(f"grading on Dask ({where}, {len(client.scheduler_info().get('workers', {}))} worker(s))")
            shared = client.scatter(gradebook, broadcast=True)
            tasks, done = {}, as_completed()

            def submit(job: Job) -> None:
                plan = self.plan(job)
                stamp = job.staged.parent / "timestamp.txt"
                chapter = verdicts.table(job.assignment)
                task = {"root": str(self.root), "assignment": job.assignment, "student": job.student,
                        "notebook": job.staged.read_text(encoding="utf-8"),
                        "timestamp": stamp.read_text(encoding="utf-8") if stamp.is_file() else None,
                        "plan": plan, "wall_s": self.limits(job.assignment).notebook_wall_s,
                        "references": list(chapter.references) if chapter is not None and chapter.references
                        else []}
                future = client.submit(fanout.grade_attempt, task, shared, pure=False,
                                       key=f"grade-{job.assignment}-{job.student}-{job.attempt}-{secrets.token_hex(4)}")
                tasks[future] = job
                done.add(future)

            for job in pending:
                submit(job)
            for future in done:
                job = tasks.pop(future)
                try:
                    result = future.result()
                except Exception as err:  # noqa: BLE001 - a lost worker or a task that raised: this one fails
                    result = {"returncode": 1, "timed_out": False, "seconds": 0.0, "log": "", "progress": "",
                              "autograded": None, "output": f"the Dask task failed: {type(err).__name__}: {err}"}
                if self.finish_or_fail(job, self.take_in(job, result)):
                    submit(job)
        finally:
            try:
                client.run(fanout.cleanup)
            except Exception as err:  # noqa: BLE001 - a worker already gone; the next grader sweeps what it left
                self.say(f"could not clean every Dask worker's scratch folder: {type(err).__name__}: {err}")
            client.close()
            if cluster is not None:
                cluster.close()

    def take_in(self, job: Job, result: dict):
        """A worker's result written where a local attempt leaves its own (log, progress, autograded notebook),
        the scores put into the gradebook; returns the attempt's release.Run."""
        from servelab_autograder import fanout

        job.log.write_text(result["log"] or result["output"], encoding="utf-8")
        job.progress.write_text(result["progress"], encoding="utf-8")
        if result["autograded"] is not None:
            path = self.autograded_path(job)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(result["autograded"], encoding="utf-8")
            for name in EXCHANGE_FILES:   # as nbgrader autograde leaves them
                if (job.staged.parent / name).is_file():
                    shutil.copy(job.staged.parent / name, path.parent / name)
            stamp = job.staged.parent / "timestamp.txt"
            if result["returncode"] == 0:
                fanout.save_autogrades(self.db_url, job.assignment, job.student,
                                       nbformat.reads(result["autograded"], as_version=4),
                                       stamp.read_text(encoding="utf-8") if stamp.is_file() else None)
        return self.release.Run(result["returncode"], result["output"], result["seconds"], result["timed_out"])

    def finish_or_fail(self, job: Job, run) -> bool:
        """finish_attempt, with a failure to read the result reported as this submission's grader error."""
        try:
            return self.finish_attempt(job, run)
        except Exception as err:  # noqa: BLE001 - e.g. an unreadable autograded notebook
            top = self.chapters[job.assignment].max_score
            failed = Outcome(job.student, job.assignment, 0.0, top, "grader-error",
                             f"reading the result failed: {type(err).__name__}: {_short(str(err), 160)}",
                             time.monotonic() - job.first_start, job.digest)
            self.write_failure_feedback(failed)
            self.report(failed)
            return False

    def finish_attempt(self, job: Job, run) -> bool:
        """Handle one nbgrader run; True when the submission must be graded again."""
        events = _progress(job.progress)
        last = events[-1] if events else None
        running_cell = next((e for e in reversed(events) if e.get("event") in ("start", "error")), None)
        error = last.get("error") if last and last.get("event") == "error" else None
        limit = next((e for e in events if e.get("event") == "limit"), None)
        lim = self.limits(job.assignment)
        top = self.chapters[job.assignment].max_score
        done = Outcome(job.student, job.assignment, 0.0, top, digest=job.digest,
                       seed=self.seed if verdicts.table(job.assignment) is not None else None)
        retry = job.attempt < MAX_ATTEMPTS

        # A cell stopped by the wall-clock backstop had used little CPU: the machine, or a wait, not the
        # learner's computation. Grade the notebook once more with that cell's limits doubled.
        starved = [e for e in events if e.get("event") == "stopped" and e.get("why") == "wall"
                   and str(e.get("index")) not in job.scale]
        if starved and retry:
            for e in starved:
                job.scale[str(e["index"])] = 2.0
                job.remarks.append(f"cell {_cell_name(e)} passed the {lim.cell_wall_s:g} s wall-clock backstop "
                                   f"using {e.get('cpu', 0):g} s of CPU; graded again with twice the time")
            return True

        if limit is not None and limit.get("limit") == "notebook-cpu":
            done.status = "notebook-timeout"
            done.message = f"{limit.get('detail')} (in cell {_cell_name(limit)})"
        elif run.timed_out:
            where = f" (running cell {_cell_name(running_cell)})" if running_cell else ""
            done.status = "notebook-timeout"
            done.message = f"grading passed the notebook's {lim.notebook_wall_s:g} s wall-clock backstop{where}"
        elif run.returncode == 0 and self.autograded_path(job).is_file():
            self.read_scores(job, done)
        elif error == TIMEOUT_ENAME and retry:
            # the kernel ignored the interrupt and was killed: grade again with this cell replaced by a timeout
            why = last.get("detail") or "the cell passed its time limit"
            job.skip[str(last["index"])] = why
            job.remarks.append(f"cell {_cell_name(last)}: {why}; graded again without it")
            job.timed_out_cell = True
            return True
        elif error == TIMEOUT_ENAME:
            done.status = "cell-timeout"
            done.message = f"cell {_cell_name(last)} passed its time limit; gave up after {job.attempt} runs"
        elif limit is not None or error == "DeadKernelError" or "Kernel died" in run.output:
            exited = next((e for e in reversed(events) if e.get("event") == "exit"), None)
            died = next((e for e in reversed(events) if e.get("event") == "died"), None)
            if limit is not None:
                culprit, why = limit, f"cell {_cell_name(limit)}: {limit.get('detail')}, so the kernel was killed"
            elif exited is not None:
                culprit, why = exited, f"cell {_cell_name(exited)} ended the kernel (it called exit() or quit())"
            elif died is not None:
                culprit, why = died, f"cell {_cell_name(died)}: the kernel died in it"
            else:
                culprit, why = running_cell, f"cell {_cell_name(running_cell)}: the kernel died in it"
            if culprit is not None and retry:
                if culprit is died or culprit is running_cell:
                    # A kill can land after its cell has answered, in the next cell. A death now seen in an earlier
                    # cell than one skipped before for a death means that later cell only ran into this one's
                    # kill: grade it again.
                    for k, w in [(k, w) for k, w in job.skip.items() if int(k) > int(culprit["index"])
                                 and "the kernel died in it" in w]:
                        del job.skip[k]
                        job.remarks.append(f"{w.split(': ')[0]}: graded again with it (the kill came from an "
                                           f"earlier cell)")
                job.skip[str(culprit["index"])] = why + "; this cell was skipped so the others could be graded"
                job.remarks.append(why + "; graded again without it")
                job.kernel_died = True
                return True
            done.status = "kernel-died"
            done.message = why + (f"; gave up after {job.attempt} runs" if culprit is not None else "")
        else:
            done.status = "grader-error"
            done.message = f"nbgrader failed: {_short(self.release.last_error(run.output), 160)}"
        graded = self.autograded_path(job).is_file() and done.status in ("graded", "repaired", "cell-timeout",
                                                                          "kernel-died")
        if not graded:
            done.message = "; ".join(dict.fromkeys([done.message, *job.notes, *job.remarks]))
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
        remarks = list(job.remarks)
        stopped = dict(cells_with_error(graded, TIMEOUT_ENAME))
        for name, why in stopped.items():
            if not any(why in r for r in remarks):
                remarks.append(f"cell {name}: {why}")
            job.timed_out_cell = True
        for name, _ in cells_with_error(graded, "SystemExit"):
            remarks.append(f"cell {name} called sys.exit(); the cells after it were still graded")
        with Gradebook(self.db_url) as gb:
            sub = gb.find_submission(job.assignment, job.student)
            done.score, done.max_score = float(sub.score or 0.0), float(sub.max_score or 0.0)
            order = {g: i for i, g in enumerate(self.chapters[job.assignment].order)}
            grades = sorted((g for nb in sub.notebooks for g in nb.grades), key=lambda g: order.get(g.name, 1e9))
            for g in grades:
                if g.needs_manual_grade:
                    manual.append(g.name)
                elif (g.score or 0.0) < g.max_score and g.name in cells and g.name not in stopped:
                    lost.append(f"{g.name}: {_short(first_error_line(cells[g.name]), 500)}")
        if manual:
            remarks.append(f"needs manual grading: {', '.join(manual)}")
        done.status = ("kernel-died" if job.kernel_died else "cell-timeout" if job.timed_out_cell
                       else "repaired" if job.notes else "graded")
        parts = job.notes + remarks + lost
        done.message = "; ".join(dict.fromkeys(parts)) if parts else "all tests passed"

    # --- feedback ---------------------------------------------------------------------------------
    def make_feedback(self) -> None:
        """One generate_feedback per chapter for everything autograded (about 1 s per chapter, against
        about 1 s per student when run one by one); per student for any page it did not make. A resumed
        run makes the pages a killed run did not get to."""
        graded: dict[str, list[str]] = {}
        for r in self.results:
            page = self.feedback / r.student / r.assignment / f"{r.assignment}.html"
            nb = self.autograded / r.student / r.assignment / f"{r.assignment}.ipynb"
            if nb.is_file() and (not page.is_file() or page.stat().st_mtime < nb.stat().st_mtime):
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

        for r in self.results:
            page = self.feedback / r.student / r.assignment / f"{r.assignment}.html"
            nb = self.autograded / r.student / r.assignment / f"{r.assignment}.ipynb"
            if page.is_file() and nb.is_file():
                try:
                    polish_feedback(page, nb)
                except Exception as err:  # noqa: BLE001 - nbgrader's page stays as it is; one page never stops the batch
                    self.say(f"feedback page {page} left as nbgrader made it: {type(err).__name__}: {_short(str(err))}")

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
        for box in self.staging.glob("s[0-9]*"):
            sandbox.sweep(box)
        shutil.rmtree(self.staging, ignore_errors=True)


FEEDBACK_STYLE = """<style id="servelab-feedback">
/* servelab: a failure message is read whole, not cut at the box's edge */
div.output_area pre, div.output_subarea pre { white-space: pre-wrap; overflow-wrap: anywhere; }
#toc .servelab-lost { display: block; margin-left: 1em; color: #a94442; white-space: pre-wrap; }
</style>
"""


def polish_feedback(page: Path, graded_nb: Path) -> None:
    """Make nbgrader's feedback page read: failure messages wrap instead of being cut, and each test cell in
    the list at the top is named by its exercise, with the first line of what cost it points (read from the
    autograded notebook ``graded_nb``). A page already polished is left as it is."""
    text = page.read_text(encoding="utf-8")
    if 'id="servelab-feedback"' in text:
        return
    lost = {}
    for cell in nbformat.read(graded_nb, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        failed = any(o.get("output_type") == "error" or o.get("name") == "stderr" for o in cell.get("outputs", []))
        if meta.get("grade") and not meta.get("solution") and meta.get("grade_id") and failed:
            lost[meta["grade_id"]] = first_error_line(cell).removeprefix("AssertionError: ")

    def entry(m) -> str:
        gid = html.unescape(m.group(1))
        name = gid.removeprefix("test_")
        why = f'<span class="servelab-lost">{html.escape(lost[gid])}</span>' if gid in lost else ""
        return f'<li><a href="#{m.group(1)}">{html.escape(name)}</a> (Score: {m.group(2)}){why}</li>'

    text = re.sub(r'<li><a href="#([^"]+)">Test cell</a> \(Score: ([^)]*)\)</li>', entry, text)
    text = re.sub(r'<li><a href="#comment-([^"]+)">Comment</a></li>',
                  lambda m: f'<li><a href="#comment-{m.group(1)}">comment on your {m.group(1)}</a></li>', text)
    text = text.replace("</head>", FEEDBACK_STYLE + "</head>", 1)
    _write_atomic(page, text)


def write_csv(path: Path, outcomes: list[Outcome]) -> None:
    """grades.csv, written atomically: a reader never sees half a file."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["student", "assignment", "score", "max_score", "status", "message"])
    writer.writeheader()
    for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
        writer.writerow(o.row())
    _write_atomic(path, buf.getvalue())


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

    defaults = grading_limits.Limits()
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<assignment>/<assignment>.ipynb")
    parser.add_argument("--cell-cpu", type=float, default=None, metavar="S",
                        help=f"CPU seconds one cell may use (default {defaults.cell_cpu_s:g}, or the chapter's)")
    parser.add_argument("--notebook-cpu", type=float, default=None, metavar="S",
                        help=f"CPU seconds a whole notebook may use (default {defaults.notebook_cpu_s:g})")
    parser.add_argument("--wall-factor", type=float, default=None, metavar="F",
                        help=f"wall-clock backstop as a multiple of each CPU limit (default {defaults.wall_factor:g})")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                        help="any other grading limit of servelab_autograder/limits.py, e.g. memory=2GiB or "
                             "processes=32 (repeatable)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="grades.csv, results/, gradebook.db, autograded/, feedback/ (default: autograder/)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="submissions graded at the same time, each in its own process and sandbox (default 1)")
    parser.add_argument("--dask", default=None, metavar="ADDRESS",
                        help="grade on Dask, one task per submission: 'local' for a LocalCluster of --jobs workers, "
                             "or a scheduler's address (tcp://host:8786); the gradebook is written here alone")
    parser.add_argument("--resume", action="store_true",
                        help="keep the results of an earlier, interrupted run; grade only what has none (or changed)")
    parser.add_argument("--seed", type=int, default=None, metavar="N",
                        help="seed of the random cases of chapters graded from a table (default: a fresh one, "
                             "printed and kept in each result; give it to reproduce a run)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run learners' code without a sandbox, as you, seeing your files: only on a trusted "
                             "machine with trusted submissions")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args(argv)

    root = release.repo_root()
    out = (args.out or root / "autograder").resolve()
    if not args.submissions.is_dir():
        print(f"no such folder: {args.submissions}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("--jobs must be at least 1", file=sys.stderr)
        return 2
    try:
        overrides = dict(grading_limits.parse(item) for item in args.limit)
        overrides.update({k: v for k, v in (("cell_cpu_s", args.cell_cpu), ("notebook_cpu_s", args.notebook_cpu),
                                             ("wall_factor", args.wall_factor)) if v is not None})
        grading_limits.for_chapter("", **overrides)
    except ValueError as err:
        print(f"bad limit: {err}", file=sys.stderr)
        return 2
    if args.unsafe_no_sandbox:
        print("grading WITHOUT a sandbox (--unsafe-no-sandbox): learners' code runs as you, with your files",
              file=sys.stderr)
    else:
        try:
            sandbox.check()
        except sandbox.SandboxUnavailable as err:
            print(f"refusing to grade without a sandbox: {err}. On a trusted machine, --unsafe-no-sandbox "
                  f"grades without one.", file=sys.stderr)
            return 2
        if sandbox.mode() == "root" and args.jobs > len(sandbox.users()):
            print(f"--jobs {args.jobs} needs {args.jobs} sandbox users and there are {len(sandbox.users())}: "
                  f"`make sandbox-deps SANDBOX_USERS={args.jobs}`", file=sys.stderr)
            return 2
    os.environ.update(release.venv_path_env())
    out.mkdir(parents=True, exist_ok=True)
    grader = Grader(root, out, overrides=overrides, jobs=args.jobs, quiet=args.quiet,
                    use_sandbox=not args.unsafe_no_sandbox, resume=args.resume, seed=args.seed, dask=args.dask)
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
