"""nbgrader in its own process: every nbgrader call the grader and the release make (``generate_assignment``,
``autograde``, ``generate_feedback``, ``db``) goes through :func:`run_nbgrader` or :func:`start_nbgrader`, which
fork this interpreter (or start ``python -m nbgrader``) in a process group that dies with its parent, and
kill the whole tree, kernels included, past a deadline."""

from __future__ import annotations

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

from servelab_autograder.runner import procs

# ------------------------------------------------------------------------------------------------
# locating things


STUBS = Path(__file__).resolve().parents[2] / "stubs"   # autograder/stubs in a checkout


def venv_path_env() -> dict[str, str]:
    """os.environ with this interpreter's bin/ first on PATH: nbgrader shells out to `alembic`
    when it creates a gradebook, and finds kernels and tools there."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir]
    env["PATH"] = os.pathsep.join([bindir, *parts])
    if STUBS.is_dir():   # children (nbgrader's alembic among them) skip jsonschema's IRI grammar, as this process does
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(STUBS)]
        env["PYTHONPATH"] = os.pathsep.join([str(STUBS), *paths])
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
