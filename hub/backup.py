"""Back up a hub's course and restore it into a fresh hub, as root: `make hub-backup TO=file.tar.gz`,
`make hub-restore FROM=file.tar.gz`.

    python hub/backup.py backup  course-2026-12-04.tar.gz
    python hub/backup.py restore course-2026-12-04.tar.gz

What a backup holds (one gzip'd tar, readable by root only):
    roster.csv      every account of the groups servelab-learners and servelab-instructors, in hub/roster.py's
                    columns (names and e-mails from the instructors' gradebooks), no passwords
    shadow.txt      each of those accounts' password hash, so a restored account logs in with its password
    courses/<who>/  each instructor's ~/servelab-course: the gradebook (copied with SQLite's backup API, so a hub
                    that is grading meanwhile still gives a consistent copy), the collected submissions, the
                    autograded notebooks, the feedback, the releases, the grades
    exchange/       nbgrader's exchange for the course: released chapters, submissions not collected yet, feedback
                    not fetched yet (owners kept by name, modes kept: the inbound folder stays unlistable)
    manifest.json   when, which course, who
A restore makes the accounts (hub/roster.py), sets their password hashes, puts each course folder back in its
instructor's home and the exchange back in place; grading, feedback and formgrader then work on it as before.
"""

from __future__ import annotations

import argparse
import csv
import grp
import io
import json
import os
import pwd
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roster import COLUMNS, COURSE, COURSE_ID, INSTRUCTORS, LEARNERS  # noqa: E402

PREFIX = Path(os.environ.get("SERVELAB_HUB_PREFIX", "/opt/servelab-hub"))


def exchange_base() -> Path:
    """nbgrader's exchange, as hub/install.sh configured it in the course environment."""
    text = (PREFIX / "venv" / "etc" / "jupyter" / "nbgrader_config.py").read_text()
    return Path(text.split("c.Exchange.root = ")[1].split("\n")[0].strip("\"'"))


def exchange_root() -> Path:
    """The course's folder in the exchange."""
    return exchange_base() / COURSE_ID


def members(group: str) -> list[str]:
    try:
        return sorted(grp.getgrnam(group).gr_mem)
    except KeyError:
        return []


def learner_details(instructors: list[str]) -> dict[str, tuple[str, str, str]]:
    """learner -> (first name, last name, e-mail), from the instructors' gradebooks."""
    out = {}
    for who in instructors:
        db = Path(pwd.getpwnam(who).pw_dir) / COURSE / "gradebook.db"
        if db.is_file():
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                for sid, first, last, email in con.execute("SELECT id, first_name, last_name, email FROM student"):
                    out[sid] = (first or "", last or "", email or "")
    return out


def shadow_hashes(names: set[str]) -> dict[str, str]:
    out = {}
    for line in Path("/etc/shadow").read_text().splitlines():
        name, hashed, *_ = line.split(":")
        if name in names:
            out[name] = hashed
    return out


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
    tar.addfile(info, io.BytesIO(data))


def backup(dest: Path) -> dict:
    instructors, learners = members(INSTRUCTORS), members(LEARNERS)
    details = learner_details(instructors)
    rows = io.StringIO()
    writer = csv.writer(rows)
    writer.writerow(COLUMNS)
    for role, names in (("instructor", instructors), ("learner", learners)):
        for name in names:
            writer.writerow([name, role, *details.get(name, ("", "", "")), ""])
    old = os.umask(0o077)
    try:
        with tarfile.open(dest, "w:gz") as tar, tempfile.TemporaryDirectory() as tmp:
            _add_bytes(tar, "roster.csv", rows.getvalue().encode())
            hashes = shadow_hashes(set(instructors) | set(learners))
            _add_bytes(tar, "shadow.txt", "".join(f"{n}:{h}\n" for n, h in sorted(hashes.items())).encode())
            for who in instructors:
                course = Path(pwd.getpwnam(who).pw_dir) / COURSE
                if not course.is_dir():
                    continue
                db = course / "gradebook.db"
                tar.add(course, f"courses/{who}", filter=lambda t: None if t.name.endswith("/gradebook.db") else t)
                if db.is_file():
                    copy = Path(tmp) / f"{who}.db"
                    with sqlite3.connect(db) as src, sqlite3.connect(copy) as dst:
                        src.backup(dst)
                    info = tar.gettarinfo(str(copy), f"courses/{who}/gradebook.db")
                    info.uname, info.gname = who, grp.getgrgid(pwd.getpwnam(who).pw_gid).gr_name
                    with open(copy, "rb") as fh:
                        tar.addfile(info, fh)
            exchange = exchange_root()
            if exchange.is_dir():
                tar.add(exchange, "exchange")
            manifest = {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "course_id": COURSE_ID,
                        "instructors": instructors, "learners": learners}
            _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
    finally:
        os.umask(old)
    os.chmod(dest, 0o600)
    return manifest


def _extract(tar: tarfile.TarFile, where: Path, part: list[tarfile.TarInfo]) -> None:
    """Our own archive, owners and modes as stored (Python before 3.11.4 has no extraction filters)."""
    if hasattr(tarfile, "fully_trusted_filter"):
        tar.extractall(where, members=part, filter="fully_trusted")
    else:
        tar.extractall(where, members=part)


def restore(src: Path) -> dict:
    with tarfile.open(src, "r:gz") as tar, tempfile.TemporaryDirectory() as tmp:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        roster_csv = Path(tmp) / "roster.csv"
        roster_csv.write_bytes(tar.extractfile("roster.csv").read())
        made = subprocess.run([sys.executable, str(Path(__file__).with_name("roster.py")), str(roster_csv)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise RuntimeError(f"hub/roster.py failed: {made.stdout}{made.stderr}")
        hashes = tar.extractfile("shadow.txt").read().decode()
        if hashes.strip():
            subprocess.run(["chpasswd", "-e"], input=hashes, text=True, check=True, capture_output=True)
        for who in manifest["instructors"]:
            home = Path(pwd.getpwnam(who).pw_dir)
            part = [m for m in tar.getmembers() if m.name == f"courses/{who}" or m.name.startswith(f"courses/{who}/")]
            for m in part:
                m.name = COURSE + m.name[len(f"courses/{who}"):]
            _extract(tar, home, part)        # owners by name: the new accounts' ids
        exchange = exchange_root()
        part = [m for m in tar.getmembers() if m.name == "exchange" or m.name.startswith("exchange/")]
        for m in part:
            m.name = COURSE_ID + m.name[len("exchange"):]
        exchange.parent.mkdir(parents=True, exist_ok=True)
        _extract(tar, exchange.parent, part)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("backup", "restore"))
    parser.add_argument("file", type=Path, help="the backup (.tar.gz)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("backups read and restore accounts, homes and password hashes: run it as root", file=sys.stderr)
        return 2
    if args.step == "backup":
        m = backup(args.file)
        print(f"{args.file}: {len(m['instructors'])} instructor(s), {len(m['learners'])} learner(s), "
              f"course {m['course_id']}, the exchange and every gradebook")
        return 0
    if not args.file.is_file():
        print(f"no backup {args.file}", file=sys.stderr)
        return 2
    m = restore(args.file)
    print(f"restored {args.file} (made {m['made']}): {len(m['instructors'])} instructor(s), "
          f"{len(m['learners'])} learner(s), course {m['course_id']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
