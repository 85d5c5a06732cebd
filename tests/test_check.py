"""`make check`: a learner grades their own notebook through the trusted grading path.

One real run (nbgrader, the sandbox where the machine has one) on a chapter 01 notebook with one exercise
right, one exercise holding a known pitfall, one drill wrong and the others unanswered: the report gives
each exercise's points and the pitfall's own message, marks the drills without giving an answer away,
keeps the progress, and leaves the learner's notebook byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nbformat
import pytest

from servelab_autograder import paths
from servelab_autograder.course import check
from servelab_autograder.judge import known_wrong, verdicts
from servelab_autograder.runner import sandbox
from servelab_autograder.testing import notebooks, submissions

ROOT = paths.repo_root()
A = "ch01_continuous_batching"


def _learner_notebook():
    """The release with simulate_static solved, simulate_continuous holding a pitfall, drill_1 wrong."""
    nb = notebooks.load_release(A, ROOT)
    solved = notebooks.complete_submission(A, ROOT)
    wrong, _ = submissions.known_wrong(A, ROOT)["continuous_waits_for_batch"]
    answers = {"simulate_static": solved, "simulate_continuous": wrong}
    for cell in nb.cells:
        gid = notebooks.grade_id(cell)
        if gid in answers:
            cell.source = next(c.source for c in answers[gid].cells if notebooks.grade_id(c) == gid)
        elif gid == "drills":
            cell.source = "drill_1 = 299\n"
    return nb


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("check")
    path = tmp / "course" / A / f"{A}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(_learner_notebook(), path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = check.main([A, "--seed", "7", "--course", str(tmp / "course"), "--state", str(tmp / "state")])
    return rc, out.getvalue(), path, before, tmp / "state"


def test_check_reports_each_exercise(checked):
    rc, text, *_ = checked
    assert rc == 0, text
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith("  ") and ln.split()}
    assert "right" in lines["simulate_static"] and "2/2" in lines["simulate_static"], text
    pitfall = known_wrong.load(known_wrong.folder(ROOT, A) / "continuous_waits_for_batch.diff").message
    assert pitfall in lines["simulate_continuous"] and "0/3" in lines["simulate_continuous"], text
    assert "fill in the function first" in lines["utilization"], text
    assert f"{A}: 2 / " in text, text   # the one-line summary of the chapter


def test_check_marks_drills_without_their_answers(checked):
    _, text, *_ = checked
    assert "drill_1 = 299: not yet" in text and "not answered: drill_2" in text, text
    drills = verdicts.table(A).drills.drills
    told = text.replace("= 299", "")
    for drill in drills:   # what the learner wrote and the questions themselves may hold numbers
        told = told.replace(drill.question, "")
    for drill in drills:
        assert f"{float(drill.expected()):.3g}" not in told, f"{drill.name}'s answer shows in the report"


def test_check_keeps_progress_and_leaves_the_notebook_alone(checked):
    _, text, path, before, state = checked
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "make check changed the learner's notebook"
    progress = json.loads((state / check.PROGRESS).read_text(encoding="utf-8"))
    assert progress[A]["score"] == 2 and "simulate_static" in progress[A]["done"], progress
    assert "simulate_continuous" in progress[A]["todo"], progress
    assert "your progress" in text and "to do: simulate_continuous" in text, text


def test_check_says_in_a_learners_words_where_the_notebook_runs(monkeypatch):
    monkeypatch.setattr(sandbox, "check", lambda: None)
    use, line = check.where_to_grade()
    assert use and "grading sandbox (no network" in line and "mode" not in line


def test_check_says_when_there_is_no_sandbox(monkeypatch):
    def refuse():
        raise sandbox.SandboxUnavailable("bwrap is not installed")

    monkeypatch.setattr(sandbox, "check", refuse)
    use, line = check.where_to_grade()
    assert not use and "no grading sandbox on this machine (bwrap is not installed)" in line and "your own code" in line


def test_check_refuses_a_student_id_that_is_not_a_folder_name(tmp_path, capsys):
    assert check.main([A, "--student", "../other", "--state", str(tmp_path)]) == 2
    assert "is not a student id" in capsys.readouterr().err


# %check (servelab_autograder.exercises.magic): the same check from inside JupyterLab; tests/test_browser.py runs
# it in the learner's lab in Chromium

def test_the_magic_finds_the_chapter_of_the_notebook_jupyterlab_opened(tmp_path, monkeypatch):
    from servelab_autograder.exercises import magic

    nb = tmp_path / "course" / A / f"{A}.ipynb"
    assert magic.notebook_path({}) is None and magic.notebook_path({"JPY_SESSION_NAME": "x/console-1"}) is None
    assert magic.notebook_path({"JPY_SESSION_NAME": str(nb)}) == nb
    monkeypatch.chdir(tmp_path)
    assert magic.notebook_path({"JPY_SESSION_NAME": f"{A}/{A}.ipynb"}) == tmp_path / f"{A}.ipynb"
    assert magic.chapter_of(nb) == A and magic.chapter_of(tmp_path / "course" / "README.ipynb") is None


def test_the_magic_checks_as_the_hub_user_on_a_hub(tmp_path):
    from servelab_autograder.exercises import magic

    local = magic.command(A, tmp_path, env={})
    assert local[-3:] == [A, "--course", str(tmp_path)] and "--student" not in local
    hub = magic.command(A, tmp_path, env={"JUPYTERHUB_USER": "ada"})
    assert hub[hub.index("--student") + 1] == "ada" and hub[hub.index("--state") + 1].endswith(".servelab")


def test_the_magic_does_nothing_outside_a_jupyterlab_session(monkeypatch, capsys):
    """A %check left in a notebook runs in nbgrader's kernel while it grades: it must not check from there."""
    from servelab_autograder.exercises import magic

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert magic.check("") is None
    assert "runs in a notebook opened in JupyterLab" in capsys.readouterr().out


def test_the_course_kernel_loads_the_magic(tmp_path):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("kernelspec", ROOT / "scripts" / "kernelspec.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = tmp_path / "kernel.json"
    kernel.write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]}))
    first = mod.add_magic(kernel)
    assert mod.add_magic(kernel) == first and first.count(mod.EXT) == 1   # idempotent
    installed = json.loads((Path(sys.prefix) / "share/jupyter/kernels/servelab/kernel.json").read_text())
    assert mod.EXT in installed["argv"], "make setup did not give the course kernel %check (scripts/kernelspec.py)"
