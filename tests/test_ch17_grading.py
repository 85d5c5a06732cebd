"""Chapter 17 is graded from its table (servelab_autograder/judge/checks/ch17.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell; the released stubs fail every one (tests/test_tables.py proves both, and
  each known-wrong patch, for every chapter);
- the cases reach what the pitfalls get wrong: a tied embedding, a MoE with dense first layers, fewer KV heads than
  GPUs, an MLA model under tensor parallelism, batches whose picks collide;
- the drills name their known-wrong answers; the notebook's text cites no source the learner lacks.
"""

from __future__ import annotations

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import moe_mla  # noqa: E402
from servelab.analytic.costmodel import ModelSpec  # noqa: E402
from servelab.analytic.specs import DEEPSEEK_V3, MIXTRAL_8X7B  # noqa: E402
from servelab_autograder.judge.checks import ch17 as table  # noqa: E402

A = "ch17_quantization_moe_mla"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["int4_weight_bytes", "experts_touched", "step_weight_bytes", "kv_bytes_per_gpu", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.moe_mla")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 2                         # the weights a step reads, KV a GPU by layout


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_experts_touched")


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    models = [ModelSpec(**c[0]) for c in CHAPTER.cells["test_step_weight_bytes"].fixed()]
    assert any(m.first_k_dense_layers for m in models) and any(not m.num_experts for m in models)
    kv = [(ModelSpec(**c[0]), c[1]) for c in CHAPTER.cells["test_kv_bytes_per_gpu"].fixed()]
    assert any(m.kv_lora_rank and tp > 1 for m, tp in kv)
    assert any(not m.kv_lora_rank and m.num_kv_heads < tp for m, tp in kv)
    assert any(not m.kv_lora_rank and m.num_kv_heads % tp for m, tp in kv)
    int4 = [ModelSpec(**c[0]) for c in CHAPTER.cells["test_int4_weight_bytes"].fixed()]
    assert any(m.tie_word_embeddings for m in int4) and any(m.num_experts for m in int4)
    touched = CHAPTER.cells["test_experts_touched"].fixed()
    assert any(1 < n and n * k < e for e, k, n in touched) and any(n * k > e for e, k, n in touched)


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": float(min(256, 24 * 8))}
    assert "tokens share experts" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": MIXTRAL_8X7B.active_params * 2 / 1e9}
    assert "per token, not per step" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_4": MIXTRAL_8X7B.param_count * 0.5 / 1e9}
    assert "plain figure" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]


def test_the_graded_cells_run_without_the_references(monkeypatch):
    """While grading, the sandbox's library lacks the references: the solution cells must not call one."""
    def gone(*args, **kwargs):
        raise RuntimeError("not available while grading")

    for ref in CHAPTER.references:
        monkeypatch.setattr(moe_mla, ref.split(":")[1], gone)
    ns = solution()
    assert round(ns["step_weight_bytes"](DEEPSEEK_V3, 64) / 1e9, 1) == 1170.6
    assert ns["kv_bytes_per_gpu"](DEEPSEEK_V3, 8) == 70272
    assert round(ns["int4_weight_bytes"](MIXTRAL_8X7B, 128) / 1e9, 2) == 24.65
