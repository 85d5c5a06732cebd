"""`%check`: check the chapter open in JupyterLab without a terminal, as `make check CH=...` does from one.

The course kernel loads this extension (its kernel.json passes ``--ext servelab_autograder.exercises.magic``).
``%check`` asks JupyterLab to save the notebook, waits until the file on disk changes, then runs
``python -m servelab_autograder.course.check <chapter> --course <the notebook's course folder>`` in a process of its
own, outside this kernel, and prints its report line by line as it comes: the same sandbox, verdicts, feedback page
and progress file as ``make check``. ``%check ch03`` checks another chapter of the same course folder.

On a course hub (``JUPYTERHUB_USER`` set) the check grades as that user and keeps the progress in
``~/.servelab``, where the learner's server can grade at all: grading needs the course's solutions, which a hub
keeps in the instructor's folder, so today it says so and stops. Run anywhere but a JupyterLab session (nbgrader's
grading, nbval, a script) it says so and does nothing: a ``%check`` left in a notebook never grades from inside
the grader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SAVE_JS = ("(window.jupyterapp && window.jupyterapp.commands.hasCommand('docmanager:save')) ? "
           "window.jupyterapp.commands.execute('docmanager:save') : undefined;")
SAVE_WAIT_S = 10.0


def notebook_path(env=None) -> Path | None:
    """The notebook this kernel serves: JupyterLab puts its path in JPY_SESSION_NAME when it starts the kernel
    (absolute, or relative to the kernel's folder, the notebook's own); None outside a JupyterLab session."""
    name = (env if env is not None else os.environ).get("JPY_SESSION_NAME", "")
    if not name.endswith(".ipynb"):
        return None
    path = Path(name)
    return path if path.is_absolute() else Path.cwd() / path.name


def chapter_of(path: Path) -> str | None:
    """<chapter>/<chapter>.ipynb -> chapter; None for any other notebook."""
    return path.stem if path.suffix == ".ipynb" and path.parent.name == path.stem else None


def command(chapter: str, course: Path, env=None) -> list[str]:
    """The check this magic runs: one chapter of `course`, as the hub user when there is one."""
    env = env if env is not None else os.environ
    cmd = [sys.executable, "-m", "servelab_autograder.course.check", chapter, "--course", str(course)]
    user = env.get("JUPYTERHUB_USER")
    if user:
        cmd += ["--student", user, "--state", str(Path.home() / ".servelab")]
    return cmd


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def save(path: Path, wait_s: float = SAVE_WAIT_S) -> bool:
    """Ask JupyterLab to save the notebook; True once the file on disk has changed."""
    from IPython.display import Javascript, display

    before = _mtime(path)
    display(Javascript(SAVE_JS))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _mtime(path) != before:
            time.sleep(0.2)         # let the write finish
            return True
        time.sleep(0.1)
    return False


def check(line: str = "") -> int | None:
    """%check [chapter]: save this notebook and check its chapter (or the one named) in a process of its own."""
    path = notebook_path()
    if path is None:
        print("%check runs in a notebook opened in JupyterLab; here there is none to check (from a terminal: "
              "make check CH=ch01)")
        return None
    asked = line.strip()
    chapter = asked or chapter_of(path)
    if not chapter:
        print(f"{path.name} is not a chapter notebook (<chapter>/<chapter>.ipynb): name one, e.g. %check ch01")
        return None
    course = path.parent.parent if chapter_of(path) else path.parent
    if save(path):
        print(f"saved {path.name}; checking {chapter} (your notebook is not changed) ...", flush=True)
    else:
        print(f"could not save from here: checking {path.name} as last saved (save with Ctrl-S and run %check "
              "again to include newer edits) ...", flush=True)
    proc = subprocess.Popen(command(chapter, course), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    assert proc.stdout is not None
    for out in proc.stdout:
        print(out, end="", flush=True)
    rc = proc.wait()
    if rc == 2 and os.environ.get("JUPYTERHUB_USER"):
        print("this course hub does not grade from the lab: the grader's course folder is the instructor's. "
              "Use Validate and hand in with the Assignments tab.")
    return rc


def _magic(line: str = "") -> None:
    check(line)                     # the report is printed; no Out[] value


def load_ipython_extension(ipython) -> None:
    ipython.register_magic_function(_magic, magic_kind="line", magic_name="check")
