"""Chapter 13 is graded from its table (servelab_autograder/judge/checks/ch13.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch13_fairness_and_priority/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the cases reach what the pitfalls get wrong: a target the interactive decodes alone miss, no interactive decodes,
  a returning tenant below and above the least counter, a tenant with no counter yet, nobody who stayed;
- the drills name their known-wrong answers; the notebook tags each of its questions on a graded cell.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import costmodel, fairness  # noqa: E402
from servelab.analytic.costmodel import GPUSpec, ModelSpec  # noqa: E402
from servelab_autograder.exercises import ch13
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch13 as table  # noqa: E402

A = "ch13_fairness_and_priority"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["interactive_tpot", "batch_kv_quota", "request_fair_shares", "next_tenant", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.fairness")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 2                         # the shares over a run, the TPOT against the batch decodes


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_next_tenant")


def _ref(name, args):
    return ch13.SPECS[name].expected(tuple(args))


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    quotas = CHAPTER.cells["test_batch_kv_quota"].fixed()
    assert any(_ref("batch_kv_quota", c) == 0 for c in quotas) and any(c[3] == 0 for c in quotas)
    assert any(_ref("batch_kv_quota", c) > 0 for c in quotas)
    picks = CHAPTER.cells["test_next_tenant"].fixed()
    lifted = [c for c in picks if c[4]]
    assert any(set(c[4]) == set(c[3]) for c in lifted)                       # nobody stayed backlogged
    assert any(t not in c[0] for c in lifted for t in c[4])                   # a tenant with no counter yet
    assert any(_ref("next_tenant", c)[1][t] > c[0].get(t, 0) for c in lifted for t in c[4])   # lifted
    assert any(_ref("next_tenant", c)[1][t] == c[0][t] for c in lifted for t in c[4] if t in c[0])   # kept


def test_the_closed_forms_agree_with_the_step_model():
    """The document length of the drills gives its share back, and the quota is the most the step allows."""
    w = table.roofline_weights()
    doc = fairness.document_len_for_share(0.9, (500, 300), 300, w)
    assert abs(fairness.request_fair_shares({"d": (doc, 300), "c": (500, 300)}, w)["d"] - 0.9) < 1e-9
    for c in verdicts.cases(CHAPTER.cells["test_batch_kv_quota"], 3)[:12]:
        model, gpu = ModelSpec(**c[0]), GPUSpec(**c[1])
        q, target, n_i, c_i, c_b = _ref("batch_kv_quota", c), c[2], c[3], c[4], c[5]
        left = costmodel.kv_capacity_tokens(model, gpu) - n_i * c_i
        if q:
            n = q // c_b
            assert fairness.interactive_tpot(model, gpu, n_i, c_i, n, c_b) <= target and n * c_b <= left
            # one more misses the target or does not fit beside the interactive sequences
            assert fairness.interactive_tpot(model, gpu, n_i, c_i, n + 1, c_b) > target or (n + 1) * c_b > left


def test_the_drills_name_a_known_wrong_answer():
    from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B

    d1, d2 = table.V["drill_1"].numbers(""), table.V["drill_2"].numbers("")      # the workbook's own numbers
    ns = {**solution(), "drill_1": fairness.interactive_tpot(LLAMA31_8B, H100_SXM, *table._d1(d1))}
    assert "milliseconds" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": fairness.batch_kv_quota(LLAMA31_8B, H100_SXM, *table._d2(d2)) // d2.batch_ctx}
    assert "the quota is KV tokens" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]


def test_every_interactive_tpot_case_holds_a_decode():
    """A step with no decode at all has no time: a random case like that would fail every correct answer (the
    end-to-end grading drew one with its own seed)."""
    ex = CHAPTER.cells["test_interactive_tpot"]
    for seed in range(400):
        for args in verdicts.cases(ex, seed):
            assert args[2] + args[4] >= 1, (seed, args)
