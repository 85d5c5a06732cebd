"""Chapter 11 is graded from its table (servelab_autograder/judge/checks/ch11.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch11_speculative_decoding/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the block-manager cases are consistent states of a verification step (before it for may_append, after it for
  rollback), and reach what the pitfalls get wrong: drafts over two new blocks, KV ending inside a block and on a
  boundary; the cost cases hold a crossover, none, and alpha 0 and 1;
- the drills name their known-wrong answers; the notebook tags its question on graded cells.
"""

from __future__ import annotations

import importlib

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab_autograder.exercises import ch11
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch11 as table  # noqa: E402

A = "ch11_speculative_decoding"
CHAPTER = table.CHAPTER


NB = Notebook(A, skip=CHAPTER.demos)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = NB.test_cells()
    assert set(CHAPTER.cells) == set(tests)
    assert NB.solution_ids() == ["fit_drafts", "may_append", "rollback", "expected_tokens_per_step",
                                 "speculative_speedup", "crossover_batch", "drills"]
    assert {g: m["points"] for g, m in tests.items()} == {f"test_{n}": 2 for n in (
        "fit_drafts", "may_append", "rollback", "expected_tokens_per_step", "speculative_speedup",
        "crossover_batch", "drills")}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & set(tests)
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        assert module in ("servelab.schedulers.spec_decode", "servelab.analytic.speculation") and callable(obj), ref


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions()
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 1                         # the speedup against the batch


def test_the_question_is_tagged_on_graded_cells():
    import json

    nb = json.loads(NB.path.read_text())
    graded = {q for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")
              for q in c["metadata"].get("servelab", {}).get("questions", [])}
    assert graded == {14}


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_rollback"]
    first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]


def _blocks(n, bs):
    return -(-n // bs)


def test_the_block_cases_are_states_of_a_verification_step():
    for where, bm, seq in [*CHAPTER.cells["test_may_append"].fixed(), *verdicts.cases(CHAPTER.cells["test_may_append"],
                                                                                      3)]:
        bs = bm["block_size"]
        assert seq["cached"] == seq["len"] - 1 and len(seq["blocks"]) == _blocks(seq["len"] - 1, bs), where
        assert len(bm["free"]) >= _blocks(seq["len"] + seq["drafts"], bs) - len(seq["blocks"]), where
    for where, bm, seq in [*CHAPTER.cells["test_rollback"].fixed(), *verdicts.cases(CHAPTER.cells["test_rollback"], 3)]:
        assert seq["drafts"] == 0 and seq["cached"] == seq["len"] - 1, where
        assert len(seq["blocks"]) >= _blocks(seq["cached"], bm["block_size"]), where


def _ref(name, args):
    return ch11.SPECS[name].expected(tuple(args))


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    appends = CHAPTER.cells["test_may_append"].fixed()
    taken = [len(_ref("may_append", c)["seq"]["blocks"]) - len(c[2]["blocks"]) for c in appends]
    assert 0 in taken and 1 in taken and 2 in taken
    rollbacks = CHAPTER.cells["test_rollback"].fixed()
    assert {_ref("rollback", c)["result"] for c in rollbacks} >= {0, 1, 2}
    assert any(c[2]["cached"] % c[1]["block_size"] for c in rollbacks)          # KV ends inside a block
    assert any(c[2]["cached"] % c[1]["block_size"] == 0 for c in rollbacks)     # and on a boundary
    assert {a for a, _ in CHAPTER.cells["test_expected_tokens_per_step"].fixed()} >= {0.0, 1.0}
    crossings = [_ref("crossover_batch", c) for c in CHAPTER.cells["test_crossover_batch"].fixed()]
    assert None in crossings and 1 in crossings and any(b and b > 1 for b in crossings)
    assert any(c[-1] is not None for c in CHAPTER.cells["test_speculative_speedup"].fixed())   # a draft model


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": 1 + 0.8 * 5}   # the workbook's own numbers: k = 5, alpha = 0.8
    assert "acceptance stops at the first rejection" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_4": 48 * 3}
    assert "own last token is computed too" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]
