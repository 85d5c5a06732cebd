"""runner.fanout's plain parts, in-process: what a Dask worker is given of the gradebook, and how the
head takes a worker's notebook in. tests/test_hub.py grades a course on a real two-worker LocalCluster."""

from __future__ import annotations

import shutil
import sqlite3

import nbformat
import pytest
from nbgrader.api import Gradebook

from servelab_autograder.runner import fanout


@pytest.fixture(scope="module")
def _template(tmp_path_factory):
    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"   # made once: nbgrader's migrations take seconds
    with Gradebook(f"sqlite:///{path}") as gb:
        gb.add_assignment("ch01")
        gb.add_notebook("ch01", "ch01")
        gb.add_grade_cell("test_a", "ch01", "ch01", max_score=2.0, cell_type="code")
        gb.add_solution_cell("answer_a", "ch01", "ch01")
        for student in ("alice", "bob"):
            gb.add_student(student)
            gb.add_submission("ch01", student)
    return path


@pytest.fixture
def gradebook(_template, tmp_path):
    path = tmp_path / "gradebook.db"
    shutil.copy(_template, path)
    return path


def test_a_worker_gets_the_chapters_and_no_learner(gradebook, tmp_path):
    copy = tmp_path / "copy.db"
    copy.write_bytes(fanout.learnerless_gradebook(gradebook))
    with Gradebook(f"sqlite:///{copy}") as gb:
        assert [a.name for a in gb.assignments] == ["ch01"]
        assert [c.name for c in gb.find_notebook("ch01", "ch01").grade_cells] == ["test_a"]
        assert gb.students == []
    with sqlite3.connect(copy) as db:   # not hidden but gone: no row of anyone's submission is left
        assert db.execute("select count(*) from submitted_assignment").fetchone() == (0,)
    with Gradebook(f"sqlite:///{gradebook}") as gb:   # the head's own is untouched
        assert sorted(s.id for s in gb.students) == ["alice", "bob"]


def _graded(error: bool):
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {"solution": True, "grade": False,
                                                                        "grade_id": "answer_a", "locked": False}})
    test = nbformat.v4.new_code_cell("assert x == 1", metadata={"nbgrader": {"grade": True, "solution": False,
                                                                             "grade_id": "test_a", "points": 2,
                                                                             "locked": True}})
    if error:
        test.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="", traceback=[])]
    nb.cells = [answer, test]
    return nb


@pytest.mark.parametrize("error, score", [(False, 2.0), (True, 0.0)])
def test_the_head_writes_a_workers_scores_with_nbgraders_own_preprocessor(gradebook, error, score):
    url = f"sqlite:///{gradebook}"
    with Gradebook(url) as gb:
        gb.remove_submission("ch01", "alice")
    fanout.save_autogrades(url, "ch01", "alice", _graded(error), "2026-12-01 10:00:00.000000 UTC")
    with Gradebook(url) as gb:
        sub = gb.find_submission("ch01", "alice")
        assert sub.score == score and sub.max_score == 2.0
        assert sub.timestamp.year == 2026
        assert gb.find_submission("ch01", "bob").score == 0.0   # a classmate's row is left alone
