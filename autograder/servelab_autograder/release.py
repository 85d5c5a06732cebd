"""Build the learner notebooks in course/ from the instructor notebooks in solutions/.

    python -m servelab_autograder.release                 # every chapter (make release)
    python -m servelab_autograder.release ch01_x ch02_y   # only these
    python -m servelab_autograder.release --if-stale      # only chapters whose sources changed (make lab)
    python -m servelab_autograder.release --check         # exit 1 if course/ differs from a fresh build

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
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from servelab_autograder.paths import RELEASE_DIR, SOURCE_DIR, chapters, release_notebook, repo_root, source_notebook

STAMPS = "autograder/runs/release-stamps.json"
BACKUPS = "autograder/runs/release-backups"

# nbgrader's delimiters (ClearSolutions / ClearHiddenTests defaults) and the stub it writes instead.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}


# ------------------------------------------------------------------------------------------------
# locating things


def venv_path_env() -> dict[str, str]:
    """os.environ with this interpreter's bin/ first on PATH: nbgrader shells out to `alembic`
    when it creates a gradebook, and finds kernels and tools there."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir]
    env["PATH"] = os.pathsep.join([bindir, *parts])
    return env


# ------------------------------------------------------------------------------------------------
# running nbgrader in its own process


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float
    timed_out: bool = False


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc). Kernels start in their own session, so a
    process-group kill alone would leave them running."""
    from servelab_autograder import procs

    return procs.descendants(pid)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group and every descendant (found before the kill)."""
    victims = _descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for victim in [pid, *victims]:
        try:
            os.kill(victim, signal.SIGKILL)
        except OSError:
            pass


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies, so a grader killed mid-batch leaves no nbgrader (and
    with it no sandbox: bwrap's --die-with-parent) running."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child_main(argv: list[str], log_path: str, cwd: str, env: dict[str, str]) -> int:
    """Body of a forked child: become a process-group leader, send all output to the log, run
    ``nbgrader <argv>`` through nbgrader's own entry point."""
    os.setsid()
    _die_with_parent()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from nbgrader.apps.nbgraderapp import NbGraderApp

    try:
        NbGraderApp.launch_instance(argv=argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report anything and exit non-zero
        traceback.print_exc()
        code = 1
    return code


def _single_threaded() -> bool:
    """Forking is only safe with one thread (a zmq or asyncio thread could hold a lock forever)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        import threading

        return threading.active_count() == 1


class Child:
    """``nbgrader <argv>`` running in its own process group; see :func:`start_nbgrader`."""

    def __init__(self, argv: list[str], cwd: Path, log_path: Path | None, env: dict[str, str] | None):
        env = dict(env if env is not None else venv_path_env())
        self.own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="nbgrader-", suffix=".log")
            os.close(fd)
            log_path = Path(name)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.start = time.monotonic()
        self.proc = None
        if hasattr(os, "fork") and not os.environ.get("SERVELAB_NO_FORK") and _single_threaded():
            import nbgrader.apps.nbgraderapp  # noqa: F401  (import once in the parent, before forking)

            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # child
                code = 1
                try:
                    code = _child_main(argv, str(log_path), str(cwd), env)
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            self.pid = pid
        else:
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen([sys.executable, "-m", "nbgrader", *argv], cwd=cwd, env=env,
                                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True, preexec_fn=_die_with_parent)
            self.pid = self.proc.pid

    def _reap(self, block: bool) -> int | None:
        if self.proc is not None:
            return self.proc.wait() if block else self.proc.poll()
        done, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    def poll(self, deadline: float | None = None) -> Run | None:
        """The finished run, or None while it runs; past ``deadline`` (monotonic) the tree is killed."""
        code = self._reap(block=False)
        timed_out = False
        if code is None:
            if deadline is None or time.monotonic() < deadline:
                return None
            timed_out = True
            kill_tree(self.pid)
            code = self._reap(block=True)
        # whatever the child left behind (a kernel whose parent vanished) goes too
        for orphan in _descendants(self.pid):
            try:
                os.kill(orphan, signal.SIGKILL)
            except OSError:
                pass
        try:
            output = self.log_path.read_text(encoding="utf-8", errors="replace")
        finally:
            if self.own_log:
                self.log_path.unlink(missing_ok=True)
        return Run(code, output, time.monotonic() - self.start, timed_out)

    def wait(self, timeout: float | None = None) -> Run:
        deadline = None if timeout is None else self.start + timeout
        while True:
            run = self.poll(deadline)
            if run is not None:
                return run
            time.sleep(0.02)


def start_nbgrader(argv: list[str], cwd: Path, log_path: Path | None = None,
                   env: dict[str, str] | None = None) -> Child:
    """Start ``nbgrader <argv>`` in its own process and process group. Forks this interpreter when
    it can (POSIX, single-threaded), which skips the ~2 s import of nbgrader per call; otherwise, or
    when $SERVELAB_NO_FORK is set, runs ``python -m nbgrader``."""
    return Child(argv, cwd, log_path, env)


def run_nbgrader(argv: list[str], cwd: Path, log_path: Path | None = None, timeout: float | None = None,
                 env: dict[str, str] | None = None) -> Run:
    """Run ``nbgrader <argv>`` to completion; past ``timeout`` seconds the whole tree (kernel
    included) is killed and the run marked timed out."""
    return start_nbgrader(argv, cwd, log_path, env).wait(timeout)


def last_error(output: str) -> str:
    """The most useful line of an nbgrader log: its last ERROR line, else its last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "| ERROR]" in ln or ln.startswith(("RuntimeError", "Error", "ValueError"))]
    pick = errors[-1] if errors else (lines[-1] if lines else "no output")
    return re.sub(r"^\[\w+ \| ERROR\] ", "", pick)


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


def _load_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _canonical(nb: dict) -> str:
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False)


def normalized(path: Path) -> str:
    """A notebook as canonical JSON (sorted keys, fixed layout): equal iff the content is equal."""
    return _canonical(_load_json(path))


def _without_pictures(nb: dict) -> dict:
    """``nb`` less the outputs of its cells that are not graded: the ones the release keeps from running the
    stub notebook (see ``execute.illustrate``), which ``nbgrader generate_assignment`` alone does not make."""
    from servelab_autograder.execute import graded

    nb = json.loads(json.dumps(nb))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and not graded(cell):
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def comparable(path: Path) -> str:
    """What the release check compares: the notebook as canonical JSON, less the kept outputs of its
    ungraded cells. Those outputs are proven by nbval instead, which runs every course/ notebook and
    compares each ungraded cell's stored outputs with what it prints now (see conftest.py)."""
    return _canonical(_without_pictures(_load_json(path)))


def digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") if isinstance(text, str) else text).hexdigest()


def _visible(folder: Path) -> list[Path]:
    """Files under ``folder`` except dot-folders/files (.ipynb_checkpoints) and __pycache__."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts))


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in _visible(folder)}


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
        new, old = _load_json(built_nb), _load_json(committed_nb)
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
        built, mine = _load_json(built_nb), _load_json(course_nb)
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


def fingerprint(root: Path, assignment: str) -> str:
    """Hash of everything a chapter's release is made from: its source folder, the nbgrader
    configuration and nbgrader's version."""
    import nbgrader

    h = hashlib.sha256()
    h.update(f"nbgrader {nbgrader.__version__}\n".encode())
    for cfg in (root / "nbgrader_config.py", root / "autograder" / "nbgrader_config.py"):
        h.update(cfg.name.encode() + b"\0" + (cfg.read_bytes() if cfg.is_file() else b"") + b"\0")
    folder = root / SOURCE_DIR / assignment
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or any(p in ("__pycache__", ".ipynb_checkpoints") for p in rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


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
        return _load_json(root / STAMPS)
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
            "stubs": _stubs(_load_json(built_nb))}


def _carry_answers(old: dict, new_path: Path, old_stubs: dict[str, str]) -> list[str]:
    """Copy the learner's solution cells from ``old`` into the freshly built notebook."""
    new = _load_json(new_path)
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
            previous = _load_json(target)
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
    from servelab_autograder.execute import illustrate

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
# leak scanning


def _regions(source: str) -> tuple[list[str], list[str]]:
    """Split a cell's lines into (inside solution/hidden regions, outside), markers dropped."""
    inside, outside, depth = [], [], 0
    for line in source.splitlines():
        upper = line.upper()
        if "BEGIN SOLUTION" in upper or "BEGIN HIDDEN TESTS" in upper:
            depth += 1
            continue
        if "END SOLUTION" in upper or "END HIDDEN TESTS" in upper:
            depth = max(0, depth - 1)
            continue
        (inside if depth else outside).append(line)
    return inside, outside


def _text_lines(obj) -> list[str]:
    return "".join(obj).splitlines() if isinstance(obj, list) else str(obj).splitlines()


def secret_lines(solution_nb: Path) -> set[str]:
    """Non-trivial lines (stripped) of every solution region and hidden-test block of a source
    notebook that appear nowhere else in it: if one of them shows up in the release, it leaked."""
    nb = _load_json(solution_nb)
    secret, public = set(), set(STUB_LINES)
    for cell in nb.get("cells", []):
        inside, outside = _regions("".join(cell.get("source", "")))
        secret.update(ln.strip() for ln in inside)
        public.update(ln.strip() for ln in outside)
        for out in cell.get("outputs", []):
            for key in ("text", "data"):
                if key == "text" and "text" in out:
                    public.update(ln.strip() for ln in _text_lines(out["text"]))
                elif key == "data":
                    for value in out.get("data", {}).values():
                        if isinstance(value, list | str):
                            public.update(ln.strip() for ln in _text_lines(value))
    return {ln for ln in secret - public if len(ln) >= 4 and re.search(r"[A-Za-z0-9]", ln)}


def _released_lines(path: Path) -> list[tuple[str, str]]:
    """(where, stripped line) for every line of text in a released file."""
    if path.suffix == ".ipynb":
        try:
            nb = _load_json(path)
        except ValueError:
            return [(str(path), ln.strip()) for ln in path.read_text(errors="replace").splitlines()]
        lines = []
        for i, cell in enumerate(nb.get("cells", [])):
            chunks = [cell.get("source", "")]
            for out in cell.get("outputs", []):
                chunks.append(out.get("text", ""))
                chunks.extend(v for v in out.get("data", {}).values() if isinstance(v, list | str))
            for chunk in chunks:
                lines.extend((f"{path} cell {i}", ln.strip()) for ln in _text_lines(chunk))
        lines.extend((f"{path} metadata", ln.strip()) for ln in json.dumps(nb.get("metadata", {})).splitlines())
        return lines
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return []  # binary (an image): nothing to compare line by line
    return [(str(path), ln.strip()) for ln in text.splitlines()]


_NUMBER = re.compile(r"(?<![\w.])-?\d[\d_,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def drill_answers(assignment: str) -> list[tuple[str, float, float]]:
    """(drill, answer, how close an answer must be to be graded right) for the chapter's graded drills."""
    from servelab_autograder import verdicts

    chapter = verdicts.table(assignment)
    if chapter is None or chapter.drills is None:
        return []
    out = []
    for d in chapter.drills.drills:
        value = float(d.expected())
        out.append((d.name, value, max(d.abs_tol, d.rel_tol * abs(value), 1e-9 * abs(value))))
    return out


def _output_numbers(path: Path) -> list[tuple[str, float, float]]:
    """(where, number, half a unit of its last printed digit) for every number of two or more significant
    digits printed in the stored outputs of a notebook."""
    if path.suffix != ".ipynb":
        return []
    try:
        nb = _load_json(path)
    except ValueError:
        return []
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items()
                                             if k.startswith("text/") and isinstance(v, list | str)]
            for text in texts:
                for token in _NUMBER.findall("".join(text) if isinstance(text, list) else text):
                    mantissa = re.split(r"[eE]", token.replace(",", "").replace("_", ""))[0]
                    if len(mantissa.replace("-", "").replace(".", "").lstrip("0")) < 2:
                        continue  # one significant digit ("8", "0.3") tells no answer
                    exponent = int(re.split(r"[eE]", token)[1]) if re.search(r"[eE]", token) else 0
                    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
                    try:
                        found.append((f"{path} cell {i} output", float(token.replace(",", "").replace("_", "")),
                                      0.5 * 10.0 ** (exponent - decimals)))
                    except ValueError:
                        pass
    return found


def find_leaks(root: Path | None = None, assignments: list[str] | None = None,
               release_dir: Path | None = None) -> list[str]:
    """Everything in a release that must not be there: nbgrader markers anywhere in course/<a>/, any line
    of <a>'s solution regions or hidden tests, and a graded drill's answer printed in an output: a number that
    is the answer rounded to the digits shown and would be graded right (a whole answer of one digit, or a
    printed number of one significant digit, is too common to tell). Returns one description per leak."""
    root = root or repo_root()
    release_dir = release_dir or root / RELEASE_DIR
    leaks = []
    for a in assignments if assignments is not None else chapters(root):
        folder = release_dir / a
        if not folder.is_dir():
            continue
        secrets = secret_lines(source_notebook(root, a))
        answers = [(name, v, tol) for name, v, tol in drill_answers(a) if not (v.is_integer() and abs(v) < 10)]
        for path in _visible(folder):
            for where, number, half_unit in _output_numbers(path):
                for name, value, tol in answers:
                    # the answer itself, rounded to the digits printed, and close enough to be graded right
                    if abs(number - value) <= min(tol, half_unit) * (1 + 1e-9):
                        leaks.append(f"{where}: {number:g}, the answer to {name}")
            for where, line in _released_lines(path):
                upper = line.upper()
                marker = next((m for m in MARKERS if m in upper), None)
                if marker:
                    leaks.append(f"{where}: nbgrader marker {marker!r}")
                elif line in secrets:
                    leaks.append(f"{where}: solution/hidden-test line {line!r}")
    return leaks


# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="chapters to build (default: every solutions/*)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="build into a temp dir, exit 1 if course/ differs")
    mode.add_argument("--if-stale", action="store_true", help="rebuild only chapters whose sources changed")
    args = parser.parse_args(argv)

    root = repo_root()
    os.environ.update(venv_path_env())
    known = chapters(root)
    unknown = [a for a in args.assignments if a not in known]
    if unknown:
        print(f"unknown chapter(s): {', '.join(unknown)} (have: {', '.join(known) or 'none'})", file=sys.stderr)
        return 2
    todo = args.assignments or known
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
    failed = []
    for a in todo:
        if args.if_stale and not is_stale(root, a, stamps):
            print(f"up to date  {a}")
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
    # scan what was generated; a notebook holding a learner's answers is their work, not a leak
    pristine = [a for a in todo if a not in failed and release_notebook(root, a).is_file()
                and digest(comparable(release_notebook(root, a))) == stamps.get(a, {}).get("release")]
    leaks = find_leaks(root, pristine)
    for leak in leaks:
        print(f"LEAK  {leak}", file=sys.stderr)
    return 1 if failed or leaks else 0


if __name__ == "__main__":
    sys.exit(main())
