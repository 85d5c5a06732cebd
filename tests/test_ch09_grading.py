"""Chapter 09 is graded from its table (servelab_autograder/judge/checks/ch09.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch09_capacity_and_concurrency/*.diff) still applies to the
  solution, loses exactly the cells it lists, and names its pitfall on the first line of each;
- the cases reach what the pitfalls get wrong: contexts with and without a compute ridge, rates past the wall and
  exactly on it, prompts longer than the budget, decodes that are compute-bound alone;
- the drills name their known-wrong answers; the notebook tags each of its questions on a graded cell.
"""

from __future__ import annotations

import math

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import capacity  # noqa: E402
from servelab.analytic.costmodel import GPUSpec, ModelSpec  # noqa: E402
from servelab_autograder.exercises import ch09
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch09 as table  # noqa: E402

A = "ch09_capacity_and_concurrency"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["kv_ceiling", "compute_ridge_batch", "resident_sequences", "fleet_size", "budget_knee", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.capacity")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]   # each output checked there: stdout, no figure repr, no address
    assert sum(pngs) == 3                         # the ceilings, N against load, the fleet split


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_resident_sequences")


def _ref(name, args):
    return ch09.SPECS[name].expected(tuple(args))


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    ridges = [_ref("compute_ridge_batch", c) for c in CHAPTER.cells["test_compute_ridge_batch"].fixed()]
    assert math.inf in ridges and any(r != math.inf for r in ridges)
    loads = [rate * length * b for rate, length, _, b in CHAPTER.cells["test_resident_sequences"].fixed()]
    assert any(x > 1 for x in loads) and 1.0 in loads and 0.0 in loads
    fleets = CHAPTER.cells["test_fleet_size"].fixed()
    assert any(prompt > budget for *_, prompt, _, budget in fleets)
    assert any(_ref("fleet_size", c)[0] == 1 for c in fleets)
    knees = CHAPTER.cells["test_budget_knee"].fixed()
    assert any(_ref("budget_knee", c) == c[2] > 0 for c in knees)       # the decodes alone are compute-bound
    assert any(c[2] == 0 for c in knees)


def test_the_reference_knee_and_ridge_are_the_cost_models_own():
    """The library settles the closed form on step_cost; the notebook's closed form agrees on the random cases."""
    from servelab.analytic import costmodel

    for c in verdicts.cases(CHAPTER.cells["test_compute_ridge_batch"], 3)[:40]:
        model, gpu, ctx = ModelSpec(**c[0]), GPUSpec(**c[1]), c[2]
        b = capacity.compute_ridge_batch(model, gpu, ctx)
        if b != math.inf:
            assert costmodel.step_cost(model, gpu, decode_context_lens=[ctx] * b).bound == "compute"
            assert b == 1 or costmodel.step_cost(model, gpu, decode_context_lens=[ctx] * (b - 1)).bound == "memory"


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_3": 60 * 512 * sum(table._d3_line(table.V["drill_3"].numbers("")))}
    assert "not rate x L x t(1)" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_1": capacity.kv_ceiling(capacity.LLAMA3_8B, capacity.H100_SXM, 3000)}
    assert "That is the H100's answer" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]
