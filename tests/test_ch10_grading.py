"""Chapter 10 is graded from its table (servelab_autograder/judge/checks/ch10.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch10_async_scheduling/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the fixed cases reach what the pitfalls get wrong: eos stops with a decode in flight (with and without a block),
  max_tokens stops, a postprocess arriving after a preemption, ignore_eos;
- a visible assert's message names the pitfall; the drills name a known-wrong answer; the question is tagged on
  graded cells.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.schedulers import async_scheduler  # noqa: E402
from servelab_autograder.exercises import ch10  # noqa: E402
from servelab_autograder.judge.checks import ch10 as table  # noqa: E402

A = "ch10_async_scheduling"
CHAPTER = table.CHAPTER


NB = Notebook(A, skip=CHAPTER.demos)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = NB.test_cells()
    assert set(CHAPTER.cells) == set(tests)
    assert NB.solution_ids() == ["postprocess", "wasted_work", "overlap_speedup", "drills"]
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_postprocess": 3, "test_wasted_work": 2, "test_overlap_speedup": 1, "test_drills": 2}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & set(tests)
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        assert module == "servelab.schedulers.async_scheduler"
        obj = async_scheduler
        for part in name.split("."):
            obj = getattr(obj, part)
        assert callable(obj), ref


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)


def test_the_fixed_cases_reach_what_the_pitfalls_get_wrong():
    runs = [ch10.record(sc) for sc in ch10.visible_scenarios()]
    assert all(r is not None for r in runs)
    waste = [r["waste"] for r in runs]
    assert any(s and not b for s, b in waste) and any(b for _, b in waste) and [0, 0] in waste
    cases = CHAPTER.cells["test_postprocess"].fixed()
    # a postprocess arriving after its sequence was preempted (the epoch is stale), with caching off and on
    stale = [(state, step) for _, state, step in cases
             if any(e != state["async"][n]["preemptions"] for n, e in zip(step["seqs"], step["epochs"]))]
    assert {state["base"]["config"]["enable_prefix_caching"] for state, _ in stale} == {False, True}
    # a step holding a slot of a sequence that already stopped
    assert any(state["base"]["seqs"][n]["status"] == "FINISHED" for _, state, step in cases for n in step["seqs"])
    traces = CHAPTER.cells["test_wasted_work"].fixed()
    assert any(ig for _, reqs, _, _ in traces for _, ig in reqs.values())


def test_the_traces_count_what_the_scheduler_counted():
    for sc in ch10.visible_scenarios():
        rec = ch10.record(sc)
        assert list(async_scheduler.wasted_work(rec["trace"], rec["requests"], sc["config"]["eos"],
                                                sc["config"]["block_size"])) == rec["waste"], sc["label"]


def test_visible_messages_name_the_pitfall():
    wrong = solution("postprocess_no_wasted_slot")["postprocess"]
    text = ch10.diagnose("postprocess", wrong)
    assert text.splitlines()[0].startswith("Pitfall: a stop with a decode already scheduled wastes one slot"), text
    wrong = solution("wasted_ignores_ignore_eos")["wasted_work"]
    trace = [[["A", 0, 2, 9], ["B", 0, 2, 9]], [["A", 2, 1, 1], ["B", 2, 1, 1]], [["B", 3, 1, 1]]]
    text = ch10.diagnose("wasted_work", wrong, trace, {"A": [4, False], "B": [3, True]}, 9, 2)
    assert text.splitlines()[0].startswith("Pitfall: ignore_eos means sampling eos is no stop"), text
    right = solution()["overlap_speedup"]
    assert ch10.diagnose("overlap_speedup", right, 1e-3, 4e-3).endswith("is correct on this input")


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": 0.75}
    assert "other way up" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_3": 100 / 41}
    assert grade(ns, cells=["test_drills"])["test_drills"].message.startswith(
        "Pitfall: the prefill samples the first output token")
