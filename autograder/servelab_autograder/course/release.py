"""Build the learner notebooks in course/ from the instructor notebooks in solutions/.

    python -m servelab_autograder.course.release                 # every chapter (make release)
    python -m servelab_autograder.course.release ch01_x ch02_y   # only these
    python -m servelab_autograder.course.release --if-stale      # only chapters whose sources changed (make lab)
    python -m servelab_autograder.course.release --check         # exit 1 if course/ differs from a fresh build

Each chapter is one ``nbgrader generate_assignment <a> --force`` (run in its own process), which also
registers the chapter in the gradebook, then one run of the released notebook with its stubs in place
(``execute.illustrate``): the outputs of every ungraded cell that runs without error are kept, so the
pictures and worked traces are there before the learner's first Run All. ``generate_assignment`` is
deterministic: the same source gives the same bytes (checked by ``--check`` and the tests), so ``--check``
only normalises JSON layout and leaves the kept outputs to nbval, which runs every course/ notebook in
``make test`` and compares them (conftest.py); it tolerates a learner's answers in course/ (solution cells,
outputs, scratch cells) as long as the notebook committed at git HEAD is the fresh build, and it fails on any
leak (see ``find_leaks``).

Learners work inside course/, so a rebuild never silently destroys edits: a notebook that differs from
what was last generated is copied to autograder/runs/release-backups/ first, and ``--if-stale`` (the
``make lab`` path) carries the learner's answers (solution cells, by grade id) into the new notebook.
Staleness is content based: a fingerprint of the chapter's sources and of the nbgrader configuration,
kept in autograder/runs/release-stamps.json (git-ignored), not file times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servelab_autograder.course.leaks import find_leaks
from servelab_autograder.paths import (
    RELEASE_DIR,
    SOURCE_DIR,
    chapters,
    fingerprint,
    read_json,
    release_notebook,
    repo_root,
    resolve,
    visible_files,
)
from servelab_autograder.runner.nbgrader_process import Run, last_error, run_nbgrader, venv_path_env

STAMPS = "autograder/runs/release-stamps.json"
BACKUPS = "autograder/runs/release-backups"



# ------------------------------------------------------------------------------------------------
# generating releases


def generate(root: Path, assignment: str, release_dir: Path | None = None, db: bool = True,
             db_url: str | None = None) -> Run:
    """``nbgrader generate_assignment <assignment> --force`` into ``release_dir`` (default course/).
    With ``db`` it records the chapter's cells in the gradebook (``db_url``, default the config's)."""
    argv = ["generate_assignment", assignment, "--force"]
    if release_dir is not None:
        argv.append(f"--CourseDirectory.release_directory={release_dir}")
    if not db:
        argv.append("--no-db")
    elif db_url:
        argv.append(f"--CourseDirectory.db_url={db_url}")
    return run_nbgrader(argv, cwd=root)


def _canonical(nb: dict) -> str:
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False)


def normalized(path: Path) -> str:
    """A notebook as canonical JSON (sorted keys, fixed layout): equal iff the content is equal."""
    return _canonical(read_json(path))


def _without_pictures(nb: dict) -> dict:
    """``nb`` less the outputs of its cells that are not graded: the ones the release keeps from running the
    stub notebook (see ``execute.illustrate``), which ``nbgrader generate_assignment`` alone does not make."""
    from servelab_autograder.course.execute import graded

    nb = json.loads(json.dumps(nb))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and not graded(cell):
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def comparable(path: Path) -> str:
    """What the release check compares: the notebook as canonical JSON, less the kept outputs of its
    ungraded cells. Those outputs are proven by nbval instead, which runs every course/ notebook and
    compares each ungraded cell's stored outputs with what it prints now (see conftest.py)."""
    return _canonical(_without_pictures(read_json(path)))


def digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in visible_files(folder)}


def differences(built: Path, committed: Path, assignment: str) -> list[str]:
    """How course/<a>/ (``committed``) differs from a fresh build (``built``); empty when equal."""
    problems = []
    built_nb, committed_nb = built / f"{assignment}.ipynb", committed / f"{assignment}.ipynb"
    if not committed_nb.is_file():
        return [f"{committed_nb} is missing"]
    try:
        same = comparable(built_nb) == comparable(committed_nb)
    except ValueError as err:
        return [f"{committed_nb} is not valid JSON ({err})"]
    if not same:
        new, old = read_json(built_nb), read_json(committed_nb)
        where = "notebook metadata"
        for i, (a, b) in enumerate(zip(new.get("cells", []), old.get("cells", []), strict=False)):
            if a != b:
                gid = a.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                where = f"cell {i}" + (f" ({gid})" if gid else "")
                break
        else:
            if len(new.get("cells", [])) != len(old.get("cells", [])):
                where = f"cell count ({len(old.get('cells', []))} committed, {len(new.get('cells', []))} built)"
        problems.append(f"{committed_nb} differs from a fresh build, first at {where}")
    extra = _files(committed) - _files(built)
    missing = _files(built) - _files(committed)
    if extra:
        problems.append(f"{committed} has files the release would not contain: {sorted(extra)}")
    if missing:
        problems.append(f"{committed} lacks released files: {sorted(missing)}")
    for name in sorted(_files(built) & _files(committed)):
        if name.endswith(".ipynb"):
            continue
        if (built / name).read_bytes() != (committed / name).read_bytes():
            problems.append(f"{committed / name} differs from {SOURCE_DIR}/{assignment}/{name}")
    return problems


# What a learner may change in course/ without the release being stale: their answers (solution
# cell sources), outputs and execution counts, UI metadata, and cells of their own.
_UI_METADATA = ("collapsed", "scrolled", "jupyter", "execution", "ExecuteTime", "editable", "deletable", "trusted")


def _masked(cell: dict) -> dict:
    cell = json.loads(json.dumps(cell))
    for key in ("outputs", "execution_count", "attachments"):
        cell.pop(key, None)
    for key in _UI_METADATA:
        cell.get("metadata", {}).pop(key, None)
    if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
        cell.pop("source", None)
    return cell


def learner_edits_only(built_nb: Path, course_nb: Path) -> bool:
    """True when ``course_nb`` is the release ``built_nb`` plus what a learner does while working in it:
    answers in solution cells, outputs, UI state, added cells without nbgrader metadata."""
    try:
        built, mine = read_json(built_nb), read_json(course_nb)
    except (OSError, ValueError):
        return False
    meta_b, meta_m = dict(built.get("metadata", {})), dict(mine.get("metadata", {}))
    if meta_b.get("kernelspec") != meta_m.get("kernelspec"):
        return False
    cells_b, cells_m = built.get("cells", []), mine.get("cells", [])
    if all("id" in c for c in cells_b + cells_m):
        ids_b = {c["id"] for c in cells_b}
        extra = [c for c in cells_m if c["id"] not in ids_b]
        if any(c.get("metadata", {}).get("nbgrader") for c in extra):
            return False
        cells_m = [c for c in cells_m if c["id"] in ids_b]
    return len(cells_b) == len(cells_m) and all(_masked(b) == _masked(m) for b, m in zip(cells_b, cells_m))


def git_head_version(root: Path, path: Path) -> bytes | None:
    """``path`` as committed at HEAD, or None (not committed, or no git)."""
    try:
        proc = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{path.relative_to(root).as_posix()}"],
                              capture_output=True, timeout=30)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def compare(root: Path, assignment: str, built_dir: Path) -> tuple[list[str], str]:
    """(problems, note) for course/<a> against a fresh build in ``built_dir``/<a>. A learner's answers
    in course/ are no problem as long as the committed notebook (git HEAD) is the fresh build."""
    problems = differences(built_dir / assignment, root / RELEASE_DIR / assignment, assignment)
    if not problems:
        return [], ""
    built_nb, course_nb = release_notebook(root, assignment, built_dir), release_notebook(root, assignment)
    others = [p for p in problems if not p.startswith(f"{course_nb} differs from a fresh build")]
    if not others and learner_edits_only(built_nb, course_nb):
        head = git_head_version(root, course_nb)
        if head is None or _canonical(_without_pictures(json.loads(head))) == comparable(built_nb):
            return [], "holds local answers; the release itself is current"
    return problems, ""


def build_all(root: Path, assignments: list[str], dest: Path) -> dict[str, str]:
    """Fresh releases of ``assignments`` in ``dest`` (no gradebook); returns {chapter: error} for failures."""
    failed = {}
    for a in assignments:
        run = generate(root, a, release_dir=dest, db=False)
        if run.returncode != 0 or not release_notebook(root, a, dest).is_file():
            failed[a] = f"nbgrader generate_assignment failed: {last_error(run.output)}"
    return failed


def check(root: Path, assignments: list[str]) -> tuple[dict[str, list[str]], dict[str, str], list[str]]:
    """Build every chapter into a temporary folder (no gradebook) and compare with course/.
    Returns ({stale chapter: problems}, {chapter: note}, leaks): leaks are scanned in the fresh build
    and in course/ (except in a learner's own answers)."""
    stale: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="servelab-release-") as tmp:
        failed = build_all(root, assignments, Path(tmp))
        for a in assignments:
            if a in failed:
                stale[a] = [failed[a]]
                continue
            problems, note = compare(root, a, Path(tmp))
            if problems:
                stale[a] = problems
            if note:
                notes[a] = note
        built = [a for a in assignments if a not in failed]
        leaks = find_leaks(root, built, release_dir=Path(tmp))
    leaks += find_leaks(root, [a for a in built if a not in notes])
    return stale, notes, sorted(set(leaks))


# ------------------------------------------------------------------------------------------------
# staleness and learner edits


def _stubs(nb_json: dict) -> dict[str, str]:
    """grade_id -> source of every solution cell of a release notebook."""
    out = {}
    for cell in nb_json.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            out[meta["grade_id"]] = "".join(cell.get("source", ""))
    return out


def load_stamps(root: Path) -> dict:
    try:
        return read_json(root / STAMPS)
    except (OSError, ValueError):
        return {}


def save_stamps(root: Path, stamps: dict) -> None:
    path = root / STAMPS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamps, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _stamp_for(root: Path, assignment: str, built_nb: Path) -> dict:
    return {"fingerprint": fingerprint(root, assignment), "release": digest(comparable(built_nb)),
            "stubs": _stubs(read_json(built_nb))}


def _carry_answers(old: dict, new_path: Path, old_stubs: dict[str, str]) -> list[str]:
    """Copy the learner's solution cells from ``old`` into the freshly built notebook."""
    new = read_json(new_path)
    answers = {}
    for cell in old.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        src = "".join(cell.get("source", ""))
        if meta.get("solution") and gid and src.strip() != old_stubs.get(gid, "").strip():
            answers[gid] = cell
    kept = []
    for cell in new.get("cells", []):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell["source"] = answers[gid].get("source", "")
            kept.append(gid)
    if kept:
        new_path.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return kept


def build(root: Path, assignment: str, stamps: dict, keep_answers: bool = False) -> tuple[bool, str]:
    """Generate one chapter into course/ (registering it in the gradebook). Returns (ok, message)."""
    target = release_notebook(root, assignment)
    previous = prev_norm = prev_digest = None
    if target.is_file():
        try:
            previous = read_json(target)
            prev_norm, prev_digest = normalized(target), digest(comparable(target))
        except ValueError:
            previous = None
    stamp = stamps.get(assignment, {})
    notes = []
    run = generate(root, assignment)
    if run.returncode != 0 and "submissions associated" in run.output:
        # the gradebook holds graded submissions of an older version of this chapter: build the
        # release without touching it (grade.py re-registers chapters in its own gradebook).
        notes.append("gradebook not updated (it holds submissions of the previous version)")
        run = generate(root, assignment, db=False)
    if run.returncode != 0 or not target.is_file():
        return False, f"nbgrader generate_assignment failed: {last_error(run.output)}"
    from servelab_autograder.course.execute import illustrate

    try:
        kept, total = illustrate(target)
    except RuntimeError as err:
        return False, str(err)
    notes.append(f"outputs of {kept} of {total} code cells kept")
    new_stamp = _stamp_for(root, assignment, target)
    if previous is not None and prev_digest != new_stamp["release"]:
        edited = prev_digest != stamp.get("release")
        if edited or not stamp:
            saved = _backup_text(root, assignment, prev_norm)
            notes.append(f"previous notebook saved to {saved.relative_to(root)}")
            if keep_answers:
                kept = _carry_answers(previous, target, stamp.get("stubs") or new_stamp["stubs"])
                if kept:
                    notes.append(f"kept your answers in {', '.join(kept)}")
    stamps[assignment] = new_stamp
    return True, "; ".join(notes)


def _backup_text(root: Path, assignment: str, text: str) -> Path:
    dest = root / BACKUPS / assignment / f"{assignment}-{time.strftime('%Y%m%d-%H%M%S')}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text + "\n", encoding="utf-8")
    return dest


def is_stale(root: Path, assignment: str, stamps: dict) -> bool:
    """True when course/<a> must be rebuilt: it is missing, or the chapter's sources changed since
    it was generated. Without a stamp (fresh checkout) a temporary build decides."""
    target = release_notebook(root, assignment)
    if not target.is_file():
        return True
    stamp = stamps.get(assignment)
    if stamp:
        return stamp.get("fingerprint") != fingerprint(root, assignment)
    with tempfile.TemporaryDirectory(prefix="servelab-release-") as tmp:
        run = generate(root, assignment, release_dir=Path(tmp), db=False)
        built = release_notebook(root, assignment, Path(tmp))
        if run.returncode != 0 or not built.is_file():
            return True
        problems, _ = compare(root, assignment, Path(tmp))
        if problems:
            return True
        stamps[assignment] = _stamp_for(root, assignment, built)
    return False


# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.course.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="chapters to build, by name or short id (ch03); default: all")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="build into a temp dir, exit 1 if course/ differs")
    mode.add_argument("--if-stale", action="store_true", help="rebuild only chapters whose sources changed")
    args = parser.parse_args(argv)

    root = repo_root()
    os.environ.update(venv_path_env())
    known = chapters(root)
    try:
        todo = resolve(args.assignments, known) or known
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if not todo:
        print(f"no chapters under {root / SOURCE_DIR}")
        return 0

    if args.check:
        stale, notes, leaks = check(root, todo)
        for a in todo:
            if a in stale:
                print(f"STALE {a}")
                for problem in stale[a]:
                    print(f"      {problem}")
            else:
                print(f"ok    {a}" + (f" (course/{a} {notes[a]})" if a in notes else ""))
        for leak in leaks:
            print(f"LEAK  {leak}")
        if stale:
            print(f"course/ is out of date for: {' '.join(sorted(stale))} (run `make release`)")
        return 1 if stale or leaks else 0

    stamps = load_stamps(root)
    failed, fresh = [], []
    for a in todo:
        if args.if_stale and not is_stale(root, a, stamps):
            fresh.append(a)
            continue
        start = time.monotonic()
        ok, note = build(root, a, stamps, keep_answers=args.if_stale)
        took = time.monotonic() - start
        if ok:
            print(f"built       {a} ({took:.1f} s){'; ' + note if note else ''}")
        else:
            print(f"FAILED      {a}: {note}", file=sys.stderr)
            failed.append(a)
    save_stamps(root, stamps)
    if fresh:   # one line, not one a chapter: `make check CH=...` and `make lab` start with this
        print(f"up to date  {fresh[0] if len(fresh) == 1 else f'{len(fresh)} chapters'}")
    # scan what was generated; a notebook holding a learner's answers is their work, not a leak
    pristine = [a for a in todo if a not in failed and release_notebook(root, a).is_file()
                and digest(comparable(release_notebook(root, a))) == stamps.get(a, {}).get("release")]
    leaks = find_leaks(root, pristine)
    for leak in leaks:
        print(f"LEAK  {leak}", file=sys.stderr)
    return 1 if failed or leaks else 0


if __name__ == "__main__":
    sys.exit(main())
