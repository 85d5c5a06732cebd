"""The trusted side of a grading run, in-process: the output caps, the limits, the result files.

What the kernel sends is capped in bytes per cell and per notebook, but never so that a score changes: an
error or a write to stderr past the cap still leaves a trace in the cell (nbgrader scores either as 0).
"""

from __future__ import annotations

import json

import pytest

from servelab_autograder import paths
from servelab_autograder.runner import kernel_guard, results, submission
from servelab_autograder.runner.limits import Limits, for_chapter, parse

CELL, NOTEBOOK = 1000, 2500


@pytest.fixture
def guard(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"limits": Limits(cell_output=CELL, notebook_output=NOTEBOOK).as_dict()}))
    monkeypatch.setenv(kernel_guard.ENV_PLAN, str(plan))
    return kernel_guard.GuardedExecute()


def msg(kind: str, **content) -> dict:
    return {"msg_type": kind, "content": content, "parent_header": {"msg_id": "m"}, "header": {"msg_type": kind}}


def stream(text: str, name: str = "stdout") -> dict:
    return msg("stream", name=name, text=text)


def test_output_within_the_cap_passes_unchanged(guard):
    m = stream("hello\n")
    assert guard._capped(m, 0) is m


def test_a_long_stream_is_cut_at_the_cap_with_one_line_that_says_so(guard):
    got = guard._capped(stream("x" * 5000), 0)["content"]["text"]
    assert got.startswith("x" * CELL) and "x" * (CELL + 1) not in got
    assert f"[output truncated at {CELL} bytes" in got and len(got) < CELL + 200
    assert guard._capped(stream("more"), 0) is None  # the rest of the cell's stdout is dropped


def test_past_the_cap_stderr_and_errors_still_leave_a_trace(guard):
    guard._capped(stream("x" * 5000), 0)
    err = guard._capped(stream("warning!", "stderr"), 0)
    assert err["content"]["name"] == "stderr" and "truncated" in err["content"]["text"]
    e = guard._capped(msg("error", ename="AssertionError", evalue="y" * 10**6, traceback=["z" * 10**6] * 50), 0)
    assert e["content"]["ename"] == "AssertionError"
    assert len(e["content"]["evalue"]) <= 2000 and len(e["content"]["traceback"]) == 20
    assert all(len(line) <= 2000 for line in e["content"]["traceback"])


def test_a_display_past_the_cap_becomes_a_note(guard):
    big = msg("display_data", data={"image/png": "A" * 5000}, metadata={})
    got = guard._capped(big, 3)
    assert got["content"]["data"] == {"text/plain": got["content"]["data"]["text/plain"]}
    assert "truncated" in got["content"]["data"]["text/plain"]
    assert guard._capped(big, 3) is None


def test_the_notebook_cap_spans_cells(guard):
    for index in range(2):  # 2 x 900 bytes fit the notebook's 2500
        assert guard._capped(stream("x" * 900), index)["content"]["text"] == "x" * 900
    left = NOTEBOOK - 2 * (900 + len("stdout"))  # a message counts its text and its stream name
    got = guard._capped(stream("x" * 900), 2)["content"]["text"]
    assert got.startswith("x" * left + "\n[output truncated") and f"truncated at {NOTEBOOK} bytes" in got
    assert guard._capped(stream("x"), 3)["content"]["text"].startswith("\n[output truncated")


def test_without_a_plan_it_is_nbgraders_execute(monkeypatch):
    monkeypatch.delenv(kernel_guard.ENV_PLAN, raising=False)
    ex = kernel_guard.GuardedExecute()
    assert ex.plan is None and ex.kernel_manager_class.__name__ == "AsyncKernelManager"
    assert ex.timeout == 30  # nbgrader's own default
    import nbformat

    ex.reset_execution_trackers()
    ex.clear_before_next_output = False
    cell = nbformat.v4.new_code_cell("print('x' * 10**6)")
    ex.process_message(stream("x" * 10**6), cell, 0)
    assert cell.outputs[0]["text"] == "x" * 10**6  # no cap without the grader's plan


def test_a_sandboxed_plan_uses_the_sandboxed_kernel_and_a_backstop_behind_the_watch(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"limits": Limits(cell_cpu_s=10, wall_factor=3).as_dict(), "sandbox": True,
                                "scale": {"4": 2.0}}))
    monkeypatch.setenv(kernel_guard.ENV_PLAN, str(plan))
    ex = kernel_guard.GuardedExecute()
    assert ex.kernel_manager_class is kernel_guard.SandboxKernelManager
    assert ex.timeout == 10 * 3 * 2 + 60


def test_a_watch_says_which_limit_stopped_the_cell():
    w = kernel_guard.Watch(3, "test_x", Limits(cell_cpu_s=10, wall_factor=5), scale=2.0)
    assert (w.cpu_limit, w.wall_limit) == (20, 100)
    w.stopped = "cpu"
    assert w.message().startswith("this cell used more than 20 s of CPU time")
    w.stopped, w.cpu = "wall", 0.25
    assert "100 s wall-clock backstop while using only 0.2 s of CPU" in w.message()


def test_limits_refuse_nonsense_and_parse_units():
    with pytest.raises(ValueError, match="cell_cpu_s must be a positive number"):
        Limits(cell_cpu_s=0)
    with pytest.raises(ValueError, match="wall_factor must be at least 1"):
        Limits(wall_factor=0.5)
    assert parse("memory=2GiB") == ("memory", 2 * 2**30) and parse("cell_cpu_s=2.5") == ("cell_cpu_s", 2.5)
    with pytest.raises(ValueError, match="NAME one of cell_cpu_s"):
        parse("speed=3")
    with pytest.raises(ValueError, match="is not a number"):
        parse("memory=lots")
    assert for_chapter("ch01_continuous_batching", cell_cpu_s=None, processes=8).processes == 8


def test_a_lone_surrogate_is_malformed_not_a_grader_error(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text('{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "\\ud800"}], '
                    '"metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    with pytest.raises(submission.Rejected) as err:
        submission.load_submission(path)
    assert err.value.status == "malformed" and "lone surrogate" in err.value.message and "\\ud800" in err.value.message


def test_results_are_written_at_once_and_a_new_run_moves_the_old_ones_aside(tmp_path):
    one = results.Outcome("ada", "ch01_x", 3, 17, "graded", "fine", 1.5, "abc")
    results.save_result(tmp_path, one)
    assert results.load_results(tmp_path) == {("ch01_x", "ada"): one}
    assert not list((tmp_path / "results" / "ch01_x").glob(".*"))  # no temporary file left behind
    results.write_csv(tmp_path / "grades.csv", [one])
    moved = results.move_aside(tmp_path)
    assert (moved / "grades.csv").is_file() and (moved / "results" / "ch01_x" / "ada.json").is_file()
    assert not (tmp_path / "grades.csv").exists() and results.load_results(tmp_path) == {}
    assert results.move_aside(tmp_path) is None


def test_a_feedback_page_shows_each_demo_cells_released_figures():
    """A demo cell shows the reference, which the sandbox does not have, so it is not run while grading; the
    feedback page shows what the release keeps for it (a picture, a trace) rather than an empty cell."""
    from servelab_autograder.judge import verdicts

    for a in paths.chapters():
        chapter = verdicts.table(a)
        shown = kernel_guard.released_outputs(a, set(chapter.demos))
        assert set(shown) <= set(chapter.demos), a
    chapter = verdicts.table("ch01_continuous_batching")
    shown = kernel_guard.released_outputs("ch01_continuous_batching", set(chapter.demos))
    assert set(shown) == set(chapter.demos)
    assert any("image/png" in o.get("data", {}) for outputs in shown.values() for o in outputs)
