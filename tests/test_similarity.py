"""The similarity report (servelab_autograder.course.similarity): what it compares, that a planted copy is listed and
independent implementations are not, and the command end to end on nbgrader's submitted layout.

The calibration data are autograder/similarity/<assignment>/*.py, independent implementations of a chapter's
exercises, written differently; each must be a correct program (graded here through the trusted engine), and the
report's THRESHOLD must sit above every pair of them and below every planted copy (the disguise of
course/disguise.py: locals renamed, independent statements swapped).
"""

from __future__ import annotations

import json
import math
import random

import nbformat
import pytest

from servelab_autograder.course import similarity as S
from servelab_autograder.course.disguise import disguise
from servelab_autograder.paths import chapters, repo_root, source_notebook
from servelab_autograder.testing.notebooks import complete_submission, grade_id, is_solution

ROOT = repo_root()
CALIBRATED = sorted(p.name for p in (ROOT / S.IMPLEMENTATIONS).iterdir() if p.is_dir()) \
    if (ROOT / S.IMPLEMENTATIONS).is_dir() else []

SPIKE = '''\
def dead(spike_rate, base_rate, capacity, spike_s, timeout_s):
    """Requests served after their client gave up."""
    line = timeout_s * capacity   # the backlog a new arrival can wait behind
    peak = max(0.0, spike_rate - capacity) * spike_s
    if peak <= line:
        return 0.0
    t_cross = line / (spike_rate - capacity)
    during = spike_rate * (spike_s - t_cross)
    after = base_rate * (peak - line) / (capacity - base_rate)
    return during + after
'''


def test_compared_code_ignores_docstrings_comments_layout_and_short_functions():
    code = S.comparable(SPIKE)
    assert '"""' not in code and "#" not in code and code.startswith("def dead(")
    assert S.comparable("def tiny(a, b):\n    return a * b\n") == ""          # 10 tokens: nobody's own
    assert S.tokens("def tiny(a, b):\n    return a * b  # why\n") == 12
    assert S.comparable("def broken(:\n" + "    x = 1\n" * 20) != ""           # compared as written


def test_swapping_independent_statements_changes_nothing_compared():
    copy = disguise(SPIKE)
    assert copy != S.comparable(SPIKE)
    lines = [ln.strip().split(" = ")[0] for ln in copy.splitlines()[1:3]]
    assert lines != ["line", "peak"]                                   # the disguise did swap the first two
    canon = [ln.split(" = ")[1] for ln in S.comparable(SPIKE).splitlines() if " = " in ln]
    canon_copy = [ln.split(" = ")[1] for ln in S.comparable(copy).splitlines() if " = " in ln]
    assert len(canon) == len(canon_copy) == 5


def test_a_disguised_copy_computes_what_the_original_does():
    rng = random.Random(3)
    ns, ns_copy = {}, {}
    exec(SPIKE, ns)
    exec(disguise(SPIKE), ns_copy)
    for _ in range(200):
        args = (rng.uniform(11, 40), rng.uniform(0, 9), 10.0, rng.uniform(1, 100), rng.uniform(1, 60))
        assert math.isclose(ns["dead"](*args), ns_copy["dead"](*args))


def test_the_planted_copy_is_listed_and_both_sides_are_in_the_report(tmp_path):
    a = "ch12_queueing_and_overload"
    sol = S.solution_cells(nbformat.read(source_notebook(ROOT, a), as_version=4))
    pairs = S.compare(ROOT, a, {"ada": sol, "bob": {c: disguise(s) for c, s in sol.items()}}, tmp_path / "r.html")
    listed = {(p.cell, frozenset((p.first, p.second))) for p in pairs}
    long_enough = {c for c, s in sol.items() if S.comparable(s)}
    for cell in long_enough:
        assert (cell, frozenset(("ada", "bob"))) in listed, cell
        assert (cell, frozenset(("bob", S.SOLUTION))) in listed, cell
    assert (S.WHOLE, frozenset(("ada", "bob"))) in listed                  # the submissions compared whole, too
    html = (tmp_path / "r.html").read_text()
    assert "bob" in html and S.SOLUTION in html


@pytest.mark.parametrize("assignment", CALIBRATED)
def test_independent_implementations_are_correct_programs(assignment):
    """Grading 75 implementations takes minutes, so `python -m servelab_autograder.course.similarity CH --calibrate`
    grades them through the trusted engine and records the digest of each file it graded: the record must be of
    these files, and every one must have passed."""
    authors = S.implementations(ROOT, assignment)
    assert len(authors) >= 5, f"{assignment}: {len(authors)} independent implementations, five are needed"
    solution_ids = set(S.solution_cells(nbformat.read(source_notebook(ROOT, assignment), as_version=4)))
    for who, cells in authors.items():
        assert set(cells) == solution_ids, f"{assignment}/{who}.py: cells {sorted(set(cells) ^ solution_ids)}"
    recorded = json.loads((ROOT / S.IMPLEMENTATIONS / S.CALIBRATION).read_text()).get(assignment, {})
    assert recorded.get("digests") == S.digests(ROOT, assignment), \
        f"{assignment}: implementations changed since graded: run `python -m {S.__name__} {assignment} --calibrate`"
    assert recorded["failing"] == {who: [] for who in authors}, f"{assignment}: {recorded['failing']}"


def test_one_implementation_is_graded_here_too():
    """The record's grading, done again for one chapter in this process: a correct implementation passes, and the
    same file with one cell broken does not."""
    a = "ch12_queueing_and_overload"
    cells = S.implementations(ROOT, a)["impl_a"]
    assert S.failing_cells(a, cells) == {}
    broken = {**cells, "drain_time": cells["drain_time"].replace("capacity - base_rate", "capacity + base_rate")}
    got = set(S.failing_cells(a, broken))             # the drills use drain_time too
    assert "test_drain_time" in got and not got & {"test_utilization_limit", "test_retry_after"}, got


@pytest.mark.parametrize("assignment", CALIBRATED)
def test_the_threshold_parts_independent_work_from_planted_copies(assignment):
    for cell, (independent, planted) in S.calibration(ROOT, assignment).items():
        assert independent <= S.THRESHOLD, f"{assignment}/{cell}: independent implementations share {independent:.0%}"
        assert math.isnan(planted) or planted > S.THRESHOLD, f"{assignment}/{cell}: a planted copy shares {planted:.0%}"


def test_every_chapter_is_calibrated():
    assert CALIBRATED == chapters(ROOT)


def test_the_command_over_nbgrader_submitted_layout(tmp_path, capsys):
    a = "ch12_queueing_and_overload"
    sol = complete_submission(a)
    copy = nbformat.from_dict(json.loads(json.dumps(sol)))
    for cell in copy.cells:
        if is_solution(cell) and grade_id(cell) != "drills":
            cell.source = disguise(cell.source)
    for who, nb in (("ada", sol), ("bob", copy)):
        (tmp_path / "submitted" / who / a).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "submitted" / who / a / f"{a}.ipynb")
    (tmp_path / "submitted" / "cy" / a).mkdir(parents=True)
    (tmp_path / "submitted" / "cy" / a / f"{a}.ipynb").write_text("{ not json")
    out = tmp_path / "report.html"
    assert S.main(["ch12", "--submitted", str(tmp_path / "submitted"), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "cy: left out" in printed.err and "2 submissions" in printed.out
    assert "bob" in printed.out and out.is_file()
    assert S.main(["ch99", "--submitted", str(tmp_path)]) == 2
    assert S.main(["ch12", "--submitted", str(tmp_path / "nothing")]) == 2


def test_the_report_leaves_the_callers_figures_alone(tmp_path):
    """copydetect draws on pyplot's current figure: a chapter's plot left open (constrained layout) must neither
    break the report nor be drawn on or closed by it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = plt.figure(layout="constrained")
    try:
        a = "ch12_queueing_and_overload"
        sol = S.solution_cells(nbformat.read(source_notebook(ROOT, a), as_version=4))
        S.compare(ROOT, a, {"ada": sol, "bob": {c: disguise(s) for c, s in sol.items()}}, tmp_path / "r.html")
        assert (tmp_path / "r.html").is_file()
        assert plt.gcf() is mine and plt.fignum_exists(mine.number) and not mine.axes
    finally:
        plt.close(mine)
