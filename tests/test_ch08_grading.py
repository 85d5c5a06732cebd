"""Chapter 08 is graded from its table (servelab_autograder/judge/checks/ch08.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch08_preemption_and_kv_tiers/*.diff) still applies to the
  solution, loses exactly the cells it lists, and names its pitfall on the first line of each;
- the fixed cases reach what the pitfalls get wrong: part-filled blocks, a fraction of peak below 1, long prompts;
- a visible assert's message names the pitfall; the drills name a known-wrong answer;
- the notebook's claims hold: the simulated crossover is within 10% of the closed form.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab_autograder import paths
from servelab_autograder.exercises import ch08
from servelab_autograder.judge.checks import ch08 as table  # noqa: E402

ROOT = paths.repo_root()
A = "ch08_preemption_and_kv_tiers"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    assert NB.solution_ids() == ["recompute_time", "break_even_bandwidth", "effective_copy_bandwidth", "swap_time",
                                 "drills"]
    assert {g: m["points"] for g, m in NB.test_cells().items()} == {
        "test_recompute_time": 2, "test_break_even_bandwidth": 2, "test_effective_copy_bandwidth": 1,
        "test_swap_time": 2, "test_drills": 3}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & tests
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        assert module == "servelab.analytic.kv_tiers" and callable(getattr(table.K, name)), ref


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)


def test_the_fixed_cases_reach_what_the_pitfalls_get_wrong():
    swaps = CHAPTER.cells["test_swap_time"].fixed()
    assert any(t % bs for _, t, bs, _, _ in swaps) and any(0 < t < bs for _, t, bs, _, _ in swaps)
    assert any(lat > 0 for *_, lat in swaps) and any(lat == 0 for *_, lat in swaps)
    recompute = CHAPTER.cells["test_recompute_time"].fixed()
    assert any(mfu < 1 for *_, mfu in recompute) and any(t > 1 for _, _, t, _ in recompute)
    copies = CHAPTER.cells["test_effective_copy_bandwidth"].fixed()
    assert any(lat > 0 for *_, lat in copies)


def test_visible_messages_name_the_pitfall():
    wrong = solution("swap_partial_block")["swap_time"]
    text = ch08.diagnose(wrong, table.LLAMA2_7B, 17, 16, 64e9, 10e-6)
    assert text.splitlines()[0].startswith("Pitfall: a part-filled last block is copied whole")
    wrong = solution("recompute_at_peak")["recompute_time"]
    text = ch08.diagnose(wrong, table.LLAMA3_8B, table.H100_SXM, 1024)
    assert text.splitlines()[0].startswith("Pitfall: recompute runs at the stated fraction of peak")
    right = solution()["effective_copy_bandwidth"]
    assert ch08.diagnose(right, 32768, 64e9, 10e-6).endswith("is correct on this input")


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": solution()["drill_1"] * 2}
    assert "bf16 cache" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_3": 53.0}                 # the link's whole bandwidth: no fixed cost paid
    assert grade(ns, cells=["test_drills"])["test_drills"].message.startswith("Pitfall: every copy pays the per-copy")
