"""Chapter 15 is graded from its table (servelab_autograder/judge/checks/ch15.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the table grades every test cell and names real cells; the released stubs fail every one (tests/test_tables.py);
- the cases reach what the pitfalls get wrong: a key past the last point and on a point, a cap that counts the
  request being placed, a load exactly at the cap, loads imbalanced by one threshold only, a match rate exactly at
  the cache threshold, ties, an empty request, a resize down as well as up;
- the drills name their known-wrong answers; no text the learner sees cites a source they do not have.
"""

from __future__ import annotations

import math

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import routing  # noqa: E402
from servelab_autograder.exercises import ch15  # noqa: E402
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch15 as table  # noqa: E402

A = "ch15_routing_across_replicas"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["ring_owner", "bounded_owner", "cache_aware_pick", "keys_kept", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.routing")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 2                         # the routers on the hot prefix, the keys a resize keeps


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_cache_aware_pick")


def _ref(name, args):
    return ch15.SPECS[name].expected(tuple(args))


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    owners = CHAPTER.cells["test_ring_owner"].fixed()
    assert any(c[1] > c[0][-1][0] for c in owners)                          # past the last point
    assert any(c[1] in [p for p, _ in c[0]] for c in owners)                # on a point
    bounded = CHAPTER.cells["test_bounded_owner"].fixed()
    caps = [(c, math.ceil(c[3] * (sum(c[2]) + 1) / len(c[2]))) for c in bounded]
    assert any(cap != math.ceil(c[3] * sum(c[2]) / len(c[2])) for c, cap in caps)        # counting the request
    assert any(cap in c[2] for c, cap in caps)                                             # a load at the cap
    d = ch15.spec.DEFAULT
    knobs = (routing.CACHE_THRESHOLD, routing.BALANCE_ABS_THRESHOLD, routing.BALANCE_REL_THRESHOLD)
    picks = [(*c[:4], *(k if v == d else v for v, k in zip(c[4:], knobs)))
             for c in CHAPTER.cells["test_cache_aware_pick"].fixed()]
    assert any(c[4:] == (d, d, d) for c in CHAPTER.cells["test_cache_aware_pick"].fixed())   # the defaults graded
    one = [c for c in picks if (max(c[0]) - min(c[0]) > c[5]) != (max(c[0]) > min(c[0]) * c[6])]
    assert one                                                              # one threshold only
    assert any(c[2] and max(c[1]) / c[2] == c[4] for c in picks)            # a rate exactly at the threshold
    assert any(c[2] == 0 for c in picks)
    kept = CHAPTER.cells["test_keys_kept"].fixed()
    assert any(c[0] > c[1] for c in kept) and any(c[0] < c[1] for c in kept)


def test_the_reference_keeps_the_contract_on_every_random_case():
    """bounded_owner never returns a worker at or above the cap, and always returns one (load factor >= 1)."""
    for args in verdicts.cases(CHAPTER.cells["test_bounded_owner"], 5):
        ring, key, loads, c = args
        w = _ref("bounded_owner", args)
        assert loads[w] < math.ceil(c * (sum(loads) + 1) / len(loads))


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": routing.keys_kept(8, 9, "consistent")}
    assert "hash mod n moves almost every key" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": 5}
    assert "count the request being placed" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]
