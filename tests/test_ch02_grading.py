"""Chapter 02's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast, on the solution notebook run cell by cell (tests/grading_harness.py; matplotlib on Agg);
nbgrader grades the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import re
import textwrap

import matplotlib
import pytest
from grading_harness import Notebook, caught_under_python_O

matplotlib.use("Agg")

from servelab_autograder import ch02  # noqa: E402

NB = Notebook("ch02_nanovllm_scheduler")

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_needs_new_block": lambda ns: ch02.check_needs_new_block(ns["needs_new_block"]),
    "test_preempt": lambda ns: ch02.check_preempt(ns["preempt"]),
    "test_schedule": lambda ns: ch02.check_schedule(ns["schedule"]),
    "test_postprocess": lambda ns: ch02.check_postprocess(ns["postprocess"]),
    "test_lesson_step2": lambda ns: ch02.check_lesson_step2(ns["Scheduler"]),
    "test_can_allocate": lambda ns: ch02.check_can_allocate(ns["can_allocate"]),
    "test_drills": lambda ns: ch02.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"]]),
}


# --------------------------------------------------------------------------------------------------------
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    solutions = NB.solution_ids()
    tests = NB.test_cells()
    assert solutions == ["needs_new_block", "preempt", "schedule", "postprocess", "can_allocate", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_needs_new_block": 1, "test_preempt": 1, "test_schedule": 3, "test_postprocess": 2,
        "test_lesson_step2": 2, "test_can_allocate": 2, "test_drills": 3}
    for c, meta, source in NB.conventional_code_cells():
        if meta.get("grade"):
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            # every test cell ends with its hidden block, which calls the matching helper
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
        if meta.get("grade") or meta.get("solution"):
            # executed cells carry no output (a test cell prints nothing when it passes)
            assert c.get("outputs") == [], meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    for text, _ in NB.saved_outputs():
        assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"


# --------------------------------------------------------------------------------------------------------
# the solution passes


@pytest.mark.parametrize("test_cell", sorted(HELPERS))
def test_solution_passes_every_check(test_cell):
    HELPERS[test_cell](NB.solution_namespace())


def test_solution_passes_every_test_cell():
    NB.assert_solution_passes_every_test_cell(HELPERS)


# --------------------------------------------------------------------------------------------------------
# every known-wrong submission fails, with its pitfall's name


def test_there_is_a_known_wrong_for_every_pitfall_the_chapter_names():
    NB.assert_a_known_wrong_per_pitfall(HELPERS, ch02.PITFALLS, at_least=7)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_fails_its_checks_with_its_message(name):
    NB.assert_known_wrong_fails_its_checks(name, HELPERS, message_first=False)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    NB.assert_known_wrong_loses_exactly_the_points_of_fails(name)


def test_dependencies_between_cells_are_what_the_chapter_says():
    assert NB.affected_tests({"schedule"}) == ["test_schedule", "test_lesson_step2"]
    assert NB.affected_tests({"preempt"}) == ["test_preempt", "test_lesson_step2"]
    assert NB.affected_tests({"can_allocate"}) == ["test_can_allocate"]
    assert NB.affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks refuse the reference and explain the drills


def test_calling_the_reference_is_refused():
    import servelab.scheduler as ref

    with pytest.raises(AssertionError, match="is servelab.scheduler.Scheduler.schedule itself"):
        ch02.check_schedule(ref.Scheduler.schedule)
    ns = dict(NB.solution_namespace())
    exec(textwrap.dedent("""
        def via_super(self):
            return super(type(self), self).schedule()

        def via_module(self, seq):
            servelab.scheduler.Scheduler.preempt(self, seq)

        def via_helper(self, seq):
            hits = len(list(self._cached_prefix(seq)))
            return hits
    """), ns)
    with pytest.raises(AssertionError, match="calls servelab.scheduler.Scheduler.schedule"):
        ch02.check_schedule(ns["via_super"])
    with pytest.raises(AssertionError, match="calls servelab.scheduler.Scheduler.preempt"):
        ch02.check_preempt(ns["via_module"])
    with pytest.raises(AssertionError, match="calls servelab.scheduler.BlockManager._cached_prefix"):
        ch02.check_can_allocate(ns["via_helper"])
    with pytest.raises(AssertionError, match="Scheduler.postprocess itself"):
        ch02.check_lesson_step2(type("S", (ns["Scheduler"],), {"postprocess": ref.Scheduler.postprocess}))


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = NB.solution_namespace()
    assert [ns["drill_1"], ns["drill_2"], ns["drill_3"]] == [int(q[1]()) for q in ch02.DRILLS.values()]
    with pytest.raises(AssertionError, match="prefilled again, generated tokens included"):
        ch02.check_drills([14, ns["drill_2"], ns["drill_3"]])
    with pytest.raises(AssertionError, match="Hits are whole blocks"):
        ch02.check_drills([ns["drill_1"], 1000, ns["drill_3"]])
    with pytest.raises(AssertionError, match="R2 cannot hit them"):
        ch02.check_drills({"drill_1": ns["drill_1"], "drill_2": ns["drill_2"], "drill_3": 56})
    with pytest.raises(AssertionError, match="whole number"):
        ch02.check_drills([19.5, ns["drill_2"], ns["drill_3"]])


def test_learner_errors_are_reported_in_their_terms():
    def schedule(self):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="schedule\\(\\) raised NotImplementedError: fill in the function"):
        ch02.check_schedule(schedule)

    def postprocess(self, seqs, token_ids, is_prefill):
        NB.solution_namespace()["postprocess"](self, seqs, token_ids, is_prefill)   # forgets to return

    with pytest.raises(AssertionError, match="must return the list of sequences that finished"):
        ch02.check_postprocess(postprocess)


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    wrong = NB.known_wrong("preempt_head").REPLACE["schedule"]
    out = caught_under_python_O("ch02", "check_schedule", "schedule", NB.source("schedule"), wrong,
                                imports={"SequenceStatus": "from servelab.scheduler import SequenceStatus"})
    assert "caught: Pitfall: preempted the head of running instead of the tail" in out
