"""Chapter 14 is graded from its table (servelab_autograder/judge/checks/ch14.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell; the released stubs fail every one (tests/test_tables.py proves both, and
  each known-wrong patch, for every chapter);
- the cases reach what the pitfalls get wrong: a link slower than the prefill, a budget shorter than one layer's
  compute, a prefill pool below utilization 1 that still misses its TTFT, a decode pool the KV cache binds;
- the drills name their known-wrong answers; the notebook's text cites no source the learner lacks.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import costmodel, disaggregation  # noqa: E402
from servelab.analytic.costmodel import GPUSpec, ModelSpec  # noqa: E402
from servelab_autograder.exercises import ch14  # noqa: E402
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch14 as table  # noqa: E402

A = "ch14_disaggregated_serving"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["tpot_stretch", "exposed_transfer_s", "break_even_bandwidth", "pd_pools", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.disaggregation")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 2                         # the stretch, the goodput against prompt length


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_exposed_transfer_s")


def _mg(c):
    return ModelSpec(**c[0]), GPUSpec(**c[1])


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    slow = []
    for c in CHAPTER.cells["test_exposed_transfer_s"].fixed():
        m, g = _mg(c)
        if c[4] and c[2]:
            compute = costmodel.step_time(m, g, prefill_tokens=c[2], overhead_s=0.0)
            slow.append(disaggregation.kv_transfer_bytes(m, c[2]) / c[3] > compute)
    assert any(slow) and not all(slow)
    short = []
    for c in CHAPTER.cells["test_break_even_bandwidth"].fixed():
        m, g = _mg(c)
        if c[4]:
            short.append(c[3] < costmodel.step_time(m, g, prefill_tokens=c[2], overhead_s=0.0) / m.num_layers)
    assert any(short) and not all(short)
    queued = kv_bound = False
    for c in CHAPTER.cells["test_pd_pools"].fixed():
        m, g = _mg(c)
        n_p, n_d = ch14.SPECS["pd_pools"].expected(c)
        rate, prompt, output = c[2], c[3], c[4]
        queued |= n_p > -(-rate * disaggregation.prefill_s(m, g, prompt) // 1)
        kv_bound |= disaggregation.decode_tpot(m, g, rate / (n_d - 1), prompt, output)[0] <= c[6] if n_d > 1 else False
    assert queued and kv_bound


def test_the_drills_name_a_known_wrong_answer():
    from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B

    ns = {**solution(), "drill_1": disaggregation.exposed_transfer_s(LLAMA31_8B, H100_SXM, 6000, 400e9, False) * 1e3}
    assert "400 Gb/s is 50 GB/s" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_3": disaggregation.break_even_bandwidth(LLAMA31_8B, H100_SXM, 8000, 0.015, False) / 1e9}
    assert "the prefill hides the rest" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]


def test_every_random_pools_case_is_reachable():
    """pd_pools searches upward: a random case whose targets one request alone misses would never end."""
    ex = CHAPTER.cells["test_pd_pools"]
    for seed in range(40):
        for c in verdicts.cases(ex, seed):
            m, g = _mg(c)
            assert disaggregation.split_ttft(m, g, 0.0, c[3], c[7]) <= c[5], (seed, c)
            assert disaggregation.decode_tpot(m, g, 0.0, c[3], c[4])[0] <= c[6], (seed, c)


def test_the_graded_cells_run_without_the_references(monkeypatch):
    """While grading, the sandbox's library lacks the references: pd_pools (and drill 4) go through split_ttft and
    decode_tpot, which must not call one of them (an end-to-end grading once lost test_pd_pools so)."""
    def gone(*args, **kwargs):
        raise RuntimeError("not available while grading")

    for ref in CHAPTER.references:
        monkeypatch.setattr(disaggregation, ref.split(":")[1], gone)
    ns = solution()
    args = (ns["LLAMA31_8B"], ns["H100_SXM"], 100.0, 4000, 256, 0.2, 0.012, 50e9)
    assert ns["pd_pools"](*args) == (8, 8)
