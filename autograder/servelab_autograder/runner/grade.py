"""Autograde a folder of submissions (``make autograde SUBMISSIONS=dir``).

    python -m servelab_autograder.runner.grade SUBMISSIONS_DIR [--out DIR] [--jobs N] [--dask ADDRESS] [--resume]
                                        [--cell-cpu S] [--notebook-cpu S] [--wall-factor F]
                                        [--unsafe-no-sandbox] [--quiet]

SUBMISSIONS_DIR holds nbgrader's submitted layout, ``<student>/<assignment>/<assignment>.ipynb``.
For each submission the grader

1. pre-checks a copy: valid JSON / nbformat / Unicode, a known assignment, and by its grade ids the right
   notebook; repairs what a learner can break by accident (a duplicated, deleted or metadata-stripped
   graded cell) and notes what nbgrader will undo (an edited test cell, restored by checksum);
2. runs ``nbgrader autograde <a> --student <s> --force`` in its own process, whose kernel runs in a
   sandbox of its own (``servelab_autograder.runner.sandbox``: no view of the gradebook, the solutions, the
   grader or other submissions; no network; limits on memory, processes, files and output) and is
   watched from outside (``servelab_autograder.runner.kernel_guard``): time limits are CPU time, per cell and per
   notebook, each with a wall-clock backstop ``--wall-factor`` times larger (``servelab_autograder.runner.limits``
   has the defaults and the per-chapter values). The notebook is graded again, up to three times, when
   a cell left the kernel unable to go on: a cell stopped by the wall-clock backstop while using little
   CPU (a starved machine) is re-run with its limits doubled; a cell whose kernel ignored the interrupt,
   died (``os._exit``, a signal, the memory limit) or was ended by ``exit()`` is skipped, so the others
   are still graded;
3. writes that submission's result at once (``results/<assignment>/<student>.json``, atomically), reads
   the scores from the gradebook and, per test cell that lost points, the first line of its error;
   ``nbgrader generate_feedback`` then writes the HTML feedback.

With ``--dask`` each attempt of step 2 runs as one task on a Dask cluster instead of the local process pool
(``servelab_autograder.runner.fanout``); the head keeps steps 1 and 3 and is the gradebook's only writer.

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
import os
import sys
import time
import traceback
from pathlib import Path

from servelab_autograder import paths
from servelab_autograder.runner import limits as grading_limits
from servelab_autograder.runner import nbgrader_process, sandbox
from servelab_autograder.runner.jobs import Grader
from servelab_autograder.runner.results import summary, write_csv


def main(argv: list[str] | None = None) -> int:

    defaults = grading_limits.Limits()
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.runner.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<assignment>/<assignment>.ipynb")
    parser.add_argument("--cell-cpu", type=float, default=None, metavar="S",
                        help=f"CPU seconds one cell may use (default {defaults.cell_cpu_s:g}, or the chapter's)")
    parser.add_argument("--notebook-cpu", type=float, default=None, metavar="S",
                        help=f"CPU seconds a whole notebook may use (default {defaults.notebook_cpu_s:g})")
    parser.add_argument("--wall-factor", type=float, default=None, metavar="F",
                        help=f"wall-clock backstop as a multiple of each CPU limit (default {defaults.wall_factor:g})")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                        help="any other grading limit of servelab_autograder/runner/limits.py, e.g. memory=2GiB or "
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

    root = paths.repo_root()
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
    os.environ.update(nbgrader_process.venv_path_env())
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
