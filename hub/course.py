"""The instructor's flow on the hub, one command a step (as root: each step runs as the instructor, except the
sandboxed grading, which needs root for its sandbox users):

    python hub/course.py release  CH   # nbgrader release_assignment: the chapter into the exchange
    python hub/course.py collect  CH   # nbgrader collect: the learners' submissions into ~/servelab-course/submitted
    python hub/course.py autograde CH [--workers N | --dask ADDRESS]   # the sandboxed grader, on Dask with N workers
    python hub/course.py feedback CH   # nbgrader release_feedback: each learner's page into the exchange
    python hub/course.py similarity CH # how alike the collected submissions are: ~/servelab-course/similarity/CH.html

`make hub-release CH=...` and its siblings call these. The course folder is the instructor's ~/servelab-course
(hub/roster.py makes it); `--instructor NAME` picks one when the group servelab-instructors has several.
The learner's side is nbgrader's own: the Assignments tab of JupyterLab, or `nbgrader fetch_assignment CH`,
`nbgrader submit CH` and `nbgrader fetch_feedback CH` in a terminal.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roster import COURSE, COURSE_ID, INSTRUCTORS, REPO, as_user  # noqa: E402

OUTPUTS = ("gradebook.db", "autograded", "feedback", "results", "runs", "grades.csv")


def instructor(name: str | None) -> str:
    if name:
        return name
    try:
        members = grp.getgrnam(INSTRUCTORS).gr_mem
    except KeyError:
        members = []
    if len(members) != 1:
        raise SystemExit(f"name the instructor with --instructor (the group {INSTRUCTORS} has "
                         f"{len(members)} members: {', '.join(members) or 'none'})")
    return members[0]


def chown_tree(path: Path, user: str) -> None:
    ids = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(p, ids.pw_uid, ids.pw_gid, follow_symlinks=False)


def nbgrader(user: str, course: Path, *argv: str) -> int:
    done = as_user(user, "nbgrader", *argv, cwd=course)
    print((done.stdout + done.stderr).strip())
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("release", "collect", "autograde", "feedback", "similarity"))
    parser.add_argument("chapter", help="e.g. ch01_continuous_batching")
    parser.add_argument("--instructor", default=None)
    parser.add_argument("--workers", type=int, default=None, help="grade on a Dask LocalCluster of N workers")
    parser.add_argument("--dask", default=None, help="grade on the Dask scheduler at this address")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run the course steps as root (each runs as the instructor but the sandboxed grading)", file=sys.stderr)
        return 2
    user = instructor(args.instructor)
    course = Path(pwd.getpwnam(user).pw_dir) / COURSE
    if not course.is_dir():
        print(f"{user} has no course folder {course}: add them to the roster (make hub-roster)", file=sys.stderr)
        return 2
    ch = args.chapter
    if args.step == "release":
        if not (REPO / "course" / ch / f"{ch}.ipynb").is_file():
            print(f"no chapter {ch} in {REPO / 'course'}", file=sys.stderr)
            return 2
        shutil.copytree(REPO / "course" / ch, course / "release" / ch, dirs_exist_ok=True)
        chown_tree(course / "release" / ch, user)
        return nbgrader(user, course, "release_assignment", ch, "--force")
    if args.step == "collect":
        return nbgrader(user, course, "collect", ch, "--update")
    if args.step == "feedback":
        return nbgrader(user, course, "release_feedback", ch)
    if args.step == "similarity":
        report = course / "similarity" / f"{ch}.html"
        done = subprocess.run([sys.executable, "-m", "servelab_autograder.course.similarity", ch, "--submitted",
                               str(course / "submitted"), "--out", str(report)], cwd=REPO)
        if report.parent.exists():
            chown_tree(report.parent, user)
        return done.returncode
    # autograde: everything collected, what was graded before and has not changed is kept (--resume)
    cmd = [sys.executable, "-m", "servelab_autograder.runner.grade", str(course / "submitted"), "--out", str(course),
           "--resume"]
    if args.dask or args.workers:
        cmd += ["--dask", args.dask or "local", "--jobs", str(args.workers or 2)]
    # drawn drills are judged on each learner's numbers in this course, as their notebooks printed them
    grading = subprocess.run(cmd, cwd=REPO, env={**os.environ, "SERVELAB_COURSE_ID": COURSE_ID})
    for name in OUTPUTS:
        if (course / name).exists():
            chown_tree(course / name, user)
    return grading.returncode


if __name__ == "__main__":
    sys.exit(main())
