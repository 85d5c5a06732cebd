"""The course's accounts from a CSV roster, as root: `make hub-roster ROSTER=roster.csv`.

    username,role,first_name,last_name,email,password
    alice,learner,Alice,Liddell,alice@example.org,s3cret
    kay,instructor,Kay,Ng,kay@example.org,

Each row makes (or updates) a Linux user with a home of mode 700, in the group servelab-learners or
servelab-instructors (the hub's config lets both in and gives the second formgrader). A password, when given,
is set with chpasswd; an empty one leaves the account as it is (a new account stays locked until `passwd`).
An instructor gets ~/servelab-course: nbgrader's course folder, with the released chapters in release/ and the
roster's learners in its gradebook; the sandboxed grader writes its grades there. `--remove` deletes the
listed accounts, their homes and their course folders. Prints what it did; exit status 2 for a bad roster.
"""

from __future__ import annotations

import argparse
import csv
import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

LEARNERS, INSTRUCTORS = "servelab-learners", "servelab-instructors"
GROUPS = {"learner": LEARNERS, "instructor": INSTRUCTORS}
COLUMNS = ("username", "role", "first_name", "last_name", "email", "password")
NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
COURSE = "servelab-course"
COURSE_ID = os.environ.get("SERVELAB_COURSE_ID", "servelab")   # the exchange's name for the course
REPO = Path(__file__).resolve().parents[1]


def read_roster(path: Path) -> list[dict]:
    """The roster's rows, checked: every column present, a valid unique username, a known role."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: the header lacks {', '.join(missing)} (expected {','.join(COLUMNS)})")
        rows = [{k: (v or "").strip() for k, v in row.items() if k in COLUMNS} for row in reader]
    seen = set()
    for i, row in enumerate(rows, start=2):
        if not NAME.match(row["username"]):
            raise ValueError(f"{path}, line {i}: {row['username']!r} is not a valid Linux user name")
        if row["role"] not in GROUPS:
            raise ValueError(f"{path}, line {i}: role must be learner or instructor, not {row['role']!r}")
        if row["username"] in seen:
            raise ValueError(f"{path}, line {i}: {row['username']} appears twice")
        seen.add(row["username"])
    return rows


def run(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, input=stdin, text=True, check=True, capture_output=True)


def as_user(user: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """`argv` run as `user` from the hub's course environment (which every user can read), in `cwd`."""
    prefix = os.environ.get("SERVELAB_HUB_PREFIX", "/opt/servelab-hub")
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    env = {"PATH": f"{prefix}/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": pwd.getpwnam(user).pw_dir,
           "USER": user, "LANG": "C.UTF-8"}
    return subprocess.run([runuser, "-u", user, "--", *argv], cwd=cwd, text=True, capture_output=True, env=env)


def ensure_account(row: dict) -> str:
    name, group = row["username"], GROUPS[row["role"]]
    for g in GROUPS.values():
        try:
            grp.getgrnam(g)
        except KeyError:
            run("groupadd", g)
    try:
        pwd.getpwnam(name)
        run("usermod", "--append", "--groups", group, name)
        what = "updated"
    except KeyError:
        run("useradd", "--create-home", "--shell", "/bin/bash", "--groups", group, name)
        what = "created"
    home = Path(pwd.getpwnam(name).pw_dir)
    os.chmod(home, 0o700)   # a classmate reads nothing of it
    if row["password"]:
        run("chpasswd", stdin=f"{name}:{row['password']}\n")
    return what


def course_folder(instructor: str, learners: list[dict]) -> Path:
    """~/servelab-course of an instructor: nbgrader's config, the released chapters, the learners."""
    home = Path(pwd.getpwnam(instructor).pw_dir)
    course = home / COURSE
    (course / "release").mkdir(parents=True, exist_ok=True)
    for chapter in sorted(p for p in (REPO / "course").iterdir() if (p / f"{p.name}.ipynb").is_file()):
        shutil.copytree(chapter, course / "release" / chapter.name, dirs_exist_ok=True)
    (course / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n", encoding="utf-8")
    jupyter = home / ".jupyter"
    jupyter.mkdir(exist_ok=True)
    (jupyter / "nbgrader_config.py").write_text(   # formgrader, wherever the instructor's lab starts
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}\n", encoding="utf-8")
    user = pwd.getpwnam(instructor)
    for path in [course, jupyter, *course.rglob("*"), *jupyter.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    if learners:   # one nbgrader command for all of them (each start of nbgrader costs seconds)
        table = course / ".roster.csv"
        with open(table, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["id", "first_name", "last_name", "email"])
            writer.writerows([r["username"], r["first_name"], r["last_name"], r["email"]] for r in learners)
        os.chown(table, user.pw_uid, user.pw_gid)
        added = as_user(instructor, "nbgrader", "db", "student", "import", str(table), cwd=course)
        table.unlink()
        if added.returncode != 0:
            raise RuntimeError(f"nbgrader db student import failed: {added.stderr[-500:]}")
    return course


def remove_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)   # its lab server, its kernels
    run("userdel", "--remove", name)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roster", type=Path, help="CSV with columns " + ",".join(COLUMNS))
    parser.add_argument("--remove", action="store_true", help="delete the listed accounts and their homes")
    args = parser.parse_args(argv)
    try:
        rows = read_roster(args.roster)
    except (OSError, ValueError) as err:
        print(f"bad roster: {err}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("the roster makes Linux accounts: run it as root", file=sys.stderr)
        return 2
    if args.remove:
        for row in rows:
            print(f"{row['username']}: {'removed' if remove_account(row['username']) else 'no such account'}")
        return 0
    learners = [r for r in rows if r["role"] == "learner"]
    for row in rows:
        print(f"{row['username']} ({row['role']}): {ensure_account(row)}")
    for row in rows:
        if row["role"] == "instructor":
            course = course_folder(row["username"], learners)
            print(f"{row['username']}: course folder {course} with {len(learners)} learner(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
