"""The grading jobs of a batch: :class:`Grader` registers the chapters, pre-checks each submission, runs
``nbgrader autograde`` for it in a sandboxed process (locally or on Dask), re-grades a notebook a cell left
unable to go on, and collects scores and feedback."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from servelab_autograder import paths
from servelab_autograder.exercises import variants
from servelab_autograder.judge import verdicts
from servelab_autograder.runner import limits as grading_limits
from servelab_autograder.runner import nbgrader_process, sandbox
from servelab_autograder.runner.kernel_guard import ENV_PLAN, TIMEOUT_ENAME, learner_env
from servelab_autograder.runner.results import (
    RESULTS,
    Outcome,
    load_results,
    move_aside,
    polish_feedback,
    save_result,
    score_text,
    write_atomic,
    write_failure_page,
)
from servelab_autograder.runner.staging import STAGING_PREFIX, sweep_stale_staging
from servelab_autograder.runner.submission import (
    GradedCells,
    Rejected,
    cell_name,
    cells_with_error,
    digest_file,
    first_error_line,
    grade_id,
    identify,
    load_submission,
    repair,
    short,
)

MAX_ATTEMPTS = 4  # one run plus up to three re-grades

# what nbgrader's exchange puts beside a submitted notebook and its later steps read: the submission time (late
# penalties, the gradebook) and the learner's secret, which names the feedback page only they can fetch
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


def _progress(path: Path) -> list[dict]:
    try:
        return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, ValueError):
        return []


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
        self.dask = dask   # None: the local process pool; "local" or a scheduler address: runner.fanout
        self.env = nbgrader_process.venv_path_env()
        sweep_stale_staging()
        self.staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
        os.chmod(self.staging, 0o711)  # the sandbox users cross it to reach their own scratch folders
        (self.staging / "owner.pid").write_text(str(os.getpid()), encoding="utf-8")
        self.boxes = 0
        self.font_cache: Path | None = None
        self.seed = seed if seed is not None else secrets.randbelow(2**31)
        self.libraries: dict[str, Path] = {}
        self.chapters: dict[str, GradedCells] = {}
        self.every_chapter: dict[str, GradedCells] = {}   # all of solutions/, to recognise a foreign notebook
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
                 f"{score_text(outcome.score):>5}/{score_text(outcome.max_score):<5} {outcome.status:<17} "
                 f"{'resumed' if how == 'resumed' else f'{outcome.seconds:5.1f}s'}  {short(outcome.message, 90)}")

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
            fingerprint = paths.fingerprint(self.root, a)
            args = ["generate_assignment", a, "--force", f"--CourseDirectory.release_directory={rel}"]
            keep = self.resume and stamps.get(a) == fingerprint
            args.append("--no-db" if keep else f"--CourseDirectory.db_url={self.db_url}")
            run = nbgrader_process.run_nbgrader(args, cwd=self.root, env=self.env)
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
                run = nbgrader_process.run_nbgrader(args, cwd=self.root, env=self.env)
            path = rel / a / f"{a}.ipynb"
            if run.returncode != 0 or not path.is_file():
                raise RuntimeError(f"cannot register {a} in the gradebook: "
                                   f"{nbgrader_process.last_error(run.output)}")
            self.chapters[a] = GradedCells.from_release(a, path)
            stamps[a] = fingerprint
        write_atomic(stamps_path, json.dumps(stamps, indent=1, sort_keys=True) + "\n")

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
        known = paths.chapters(self.root)
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
                self.every_chapter[a] = GradedCells.from_release(a, paths.source_notebook(self.root, a))
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
                                             f"pre-check failed: {type(err).__name__}: {short(str(err), 160)}")
                if isinstance(job_or_outcome, Outcome):
                    job_or_outcome.seconds = time.monotonic() - t0
                    job_or_outcome.digest = digest_file(adir / f"{assignment}.ipynb")
                    write_failure_page(self.feedback, job_or_outcome)
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
            # whose drill numbers: this submission's student id, in this course (exercises.variants)
            plan["verdicts"] = {"assignment": job.assignment, "seed": self.seed, "learner": job.student,
                                "course": variants.course()}
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
        env = dict(self.env, **learner_env(plan))   # a kernel outside the sandbox inherits nbgrader's environment
        env[ENV_PLAN] = str(plan_path)
        argv = ["autograde", job.assignment, "--student", job.student, "--force", *self.nbgrader_args()]
        job.child = nbgrader_process.start_nbgrader(argv, cwd=self.root, log_path=job.log, env=env)

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
        """Each attempt is one task of servelab_autograder.runner.fanout on the cluster; the results come back as they
        finish and are taken in here, on the head, one at a time (the gradebook has this one writer)."""
        from distributed import as_completed

        from servelab_autograder.runner import fanout

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
        the scores put into the gradebook; returns the attempt's nbgrader_process.Run."""
        from servelab_autograder.runner import fanout

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
        return nbgrader_process.Run(result["returncode"], result["output"], result["seconds"], result["timed_out"])

    def finish_or_fail(self, job: Job, run) -> bool:
        """finish_attempt, with a failure to read the result reported as this submission's grader error."""
        try:
            return self.finish_attempt(job, run)
        except Exception as err:  # noqa: BLE001 - e.g. an unreadable autograded notebook
            top = self.chapters[job.assignment].max_score
            failed = Outcome(job.student, job.assignment, 0.0, top, "grader-error",
                             f"reading the result failed: {type(err).__name__}: {short(str(err), 160)}",
                             time.monotonic() - job.first_start, job.digest)
            write_failure_page(self.feedback, failed)
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
                job.remarks.append(f"cell {cell_name(e)} passed the {lim.cell_wall_s:g} s wall-clock backstop "
                                   f"using {e.get('cpu', 0):g} s of CPU; graded again with twice the time")
            return True

        if limit is not None and limit.get("limit") == "notebook-cpu":
            done.status = "notebook-timeout"
            done.message = f"{limit.get('detail')} (in cell {cell_name(limit)})"
        elif run.timed_out:
            where = f" (running cell {cell_name(running_cell)})" if running_cell else ""
            done.status = "notebook-timeout"
            done.message = f"grading passed the notebook's {lim.notebook_wall_s:g} s wall-clock backstop{where}"
        elif run.returncode == 0 and self.autograded_path(job).is_file():
            self.read_scores(job, done)
        elif error == TIMEOUT_ENAME and retry:
            # the kernel ignored the interrupt and was killed: grade again with this cell replaced by a timeout
            why = last.get("detail") or "the cell passed its time limit"
            job.skip[str(last["index"])] = why
            job.remarks.append(f"cell {cell_name(last)}: {why}; graded again without it")
            job.timed_out_cell = True
            return True
        elif error == TIMEOUT_ENAME:
            done.status = "cell-timeout"
            done.message = f"cell {cell_name(last)} passed its time limit; gave up after {job.attempt} runs"
        elif limit is not None or error == "DeadKernelError" or "Kernel died" in run.output:
            exited = next((e for e in reversed(events) if e.get("event") == "exit"), None)
            died = next((e for e in reversed(events) if e.get("event") == "died"), None)
            if limit is not None:
                culprit, why = limit, f"cell {cell_name(limit)}: {limit.get('detail')}, so the kernel was killed"
            elif exited is not None:
                culprit, why = exited, f"cell {cell_name(exited)} ended the kernel (it called exit() or quit())"
            elif died is not None:
                culprit, why = died, f"cell {cell_name(died)}: the kernel died in it"
            else:
                culprit, why = running_cell, f"cell {cell_name(running_cell)}: the kernel died in it"
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
            done.message = f"nbgrader failed: {short(nbgrader_process.last_error(run.output), 160)}"
        graded = self.autograded_path(job).is_file() and done.status in ("graded", "repaired", "cell-timeout",
                                                                          "kernel-died")
        if not graded:
            done.message = "; ".join(dict.fromkeys([done.message, *job.notes, *job.remarks]))
            write_failure_page(self.feedback, done)
        done.seconds = time.monotonic() - job.first_start
        self.report(done)
        return False

    def autograded_path(self, job: Job) -> Path:
        return self.autograded / job.student / job.assignment / f"{job.assignment}.ipynb"

    def read_scores(self, job: Job, done: Outcome) -> None:
        from nbgrader.api import Gradebook

        graded = nbformat.read(self.autograded_path(job), as_version=4)
        cells = {grade_id(c): c for c in graded.cells if grade_id(c)}
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
                    lost.append(f"{g.name}: {short(first_error_line(cells[g.name]), 500)}")
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
            run = nbgrader_process.run_nbgrader(argv, cwd=self.root, env=self.env,
                                            log_path=self.logs / a / "_feedback.log")
            missing = [s for s in students if not (self.feedback / s / a / f"{a}.html").is_file()]
            if run.returncode != 0 or missing:
                for s in missing:
                    nbgrader_process.run_nbgrader([*argv, "--student", s], cwd=self.root, env=self.env,
                                              log_path=self.logs / a / f"_feedback-{s}.log")

        for r in self.results:
            page = self.feedback / r.student / r.assignment / f"{r.assignment}.html"
            nb = self.autograded / r.student / r.assignment / f"{r.assignment}.ipynb"
            if page.is_file() and nb.is_file():
                try:
                    polish_feedback(page, nb)
                except Exception as err:  # noqa: BLE001 - nbgrader's page stays as it is; one page never stops the batch
                    self.say(f"feedback page {page} left as nbgrader made it: {type(err).__name__}: {short(str(err))}")

    def close(self) -> None:
        for box in self.staging.glob("s[0-9]*"):
            sandbox.sweep(box)
        shutil.rmtree(self.staging, ignore_errors=True)
