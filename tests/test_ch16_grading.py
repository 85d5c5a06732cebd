"""Chapter 16 is graded from its table (servelab_autograder/judge/checks/ch16.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell; the released stubs fail every one (tests/test_tables.py proves both, and
  each known-wrong patch, for every chapter);
- the cases reach what the pitfalls get wrong: more GPUs than KV heads, one GPU, an all-reduce with no latency and
  one with no bytes, a batch of exactly a captured size and one above the largest, sizes out of order, one GPU of EP;
- the drills name their known-wrong answers; the notebook's text cites no source the learner lacks; the graded
  cells run without the references.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import parallelism  # noqa: E402
from servelab.analytic.costmodel import ModelSpec  # noqa: E402
from servelab_autograder.judge.checks import ch16 as table  # noqa: E402

A = "ch16_parallelism_and_cuda_graphs"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["tp_comm_s", "kv_tokens_per_degree", "all_to_all_bytes", "pad_to_graph", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.parallelism")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 2                         # the degree's two panels, the CUDA-graph cliff


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_pad_to_graph")


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    kv = [(ModelSpec(**c[0]), c[2]) for c in CHAPTER.cells["test_kv_tokens_per_degree"].fixed()]
    assert any(tp > m.num_kv_heads for m, tp in kv) and any(tp == 1 for _, tp in kv)
    comm = CHAPTER.cells["test_tp_comm_s"].fixed()
    assert any(c[4] == 0 for c in comm) and any(c[1] == 0 and c[2] > 1 for c in comm) and any(c[2] == 1 for c in comm)
    pad = CHAPTER.cells["test_pad_to_graph"].fixed()
    assert any(c[0] in c[1] for c in pad) and any(c[0] > max(c[1]) for c in pad)
    assert any(list(c[1]) != sorted(c[1]) for c in pad)
    assert any(c[3] == 1 for c in CHAPTER.cells["test_all_to_all_bytes"].fixed())


def test_the_drills_name_a_known_wrong_answer():
    from servelab.analytic import serving
    from servelab.analytic.costmodel import DEEPSEEK_V3, H200

    sizes = table.SIZES
    ns = {**solution(), "drill_4": max(s for s in sizes if s <= 261) - 261}       # the workbook's own numbers
    assert "pad up, not down" in grade(ns, cells=["test_drills"])["test_drills"].message
    m, g = serving.priced(DEEPSEEK_V3, H200, "fp8")
    ns = {**solution(), "drill_5": g.ridge_flops_per_byte * m.bytes_per_param / 2}
    assert "k / E of the tokens" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]


def test_the_graded_cells_run_without_the_references(monkeypatch):
    """While grading, the sandbox's library lacks the references: the drills and the library functions the
    walkthrough keeps (graph_step, the closed form) must not call one of them."""
    def gone(*args, **kwargs):
        raise RuntimeError("not available while grading")

    for ref in CHAPTER.references:
        monkeypatch.setattr(parallelism, ref.split(":")[1], gone)
    ns = solution()
    assert ns["drill_4"] == 11 and ns["pad_to_graph"](513, table.SIZES) is None
    assert parallelism.graph_step(ns["LLAMA31_8B"], ns["H100_SXM"], 513, 512, table.SIZES).padded is None
    assert parallelism.tp_decode_tpot(ns["LLAMA31_8B"], ns["H100_SXM"], 2, 10.0, 1000, 64)[0] > 0
