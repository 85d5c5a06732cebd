"""Chapter 12 is graded from its table (servelab_autograder/judge/checks/ch12.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch12_queueing_and_overload/*.diff) still applies to the
  solution, loses exactly the cells it lists, and names its pitfall on the first line of each;
- the cases reach what the pitfalls get wrong: variance and none, a target of one prefill, spikes under capacity and
  a base load that fills the server, peaks under the dead line, a request exactly on its deadline, delays past the
  cap, with and without a generator; a Retry-After below the line, on a whole second, between two, with the server's
  jitter and without;
- the drills name their known-wrong answers; the notebook tags each of its questions on a graded cell.
"""

from __future__ import annotations

import math

import matplotlib
from grading_harness import Notebook, Proof

matplotlib.use("Agg")

from servelab.analytic import queueing  # noqa: E402
from servelab_autograder.exercises import ch12
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch12 as table  # noqa: E402

A = "ch12_queueing_and_overload"
CHAPTER = table.CHAPTER


NB = Notebook(A, skip=CHAPTER.demos)
P = Proof(A, NB)
solution, grade = P.solution, P.grade


def test_the_table_grades_every_test_cell_and_names_real_cells():
    cells = ["utilization_limit", "drain_time", "dead_requests", "admit_by_deadline", "retry_delay",
             "retry_after", "drills"]
    P.assert_table_names_real_cells(cells, "servelab.analytic.queueing")


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions(solution_outputs=False)   # the drills cell prints its answers (servelab.claims)
    pngs = [png for _, png in NB.saved_outputs()]
    assert sum(pngs) == 3                         # the TTFT curves, the spike's queue, the retry storm


def test_each_run_draws_its_own_random_cases():
    P.assert_runs_draw_their_own_random_cases("test_utilization_limit")


def _ref(name, args):
    return ch12.SPECS[name].expected(tuple(args))


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    limits = CHAPTER.cells["test_utilization_limit"].fixed()
    assert any(c[2] == 0 for c in limits) and any(c[2] > 0 for c in limits)
    assert any(_ref("utilization_limit", c) == 0 for c in limits)
    assert any(math.isclose(_ref("utilization_limit", c), 1 - c[3], abs_tol=1e-6) for c in limits)  # target = S
    drains = [_ref("drain_time", c) for c in CHAPTER.cells["test_drain_time"].fixed()]
    assert 0.0 in drains and math.inf in drains and any(0 < d < math.inf for d in drains)
    dead = [_ref("dead_requests", c) for c in CHAPTER.cells["test_dead_requests"].fixed()]
    assert 0.0 in dead and any(d > 0 for d in dead)
    admits = CHAPTER.cells["test_admit_by_deadline"].fixed()
    assert {_ref("admit_by_deadline", c) for c in admits} == {True, False}
    assert any((b + p) / r == d for b, p, r, d in admits)                 # exactly on the deadline
    retries = CHAPTER.cells["test_retry_delay"].fixed()
    assert any(c[3] is None and c[1] * 2 ** c[0] > c[2] for c in retries) and any(c[3] is not None for c in retries)
    after = CHAPTER.cells["test_retry_after"].fixed()
    drain = {c: max(0, c[0] - c[1]) / c[2] for c in after}
    plain = [c for c in after if c[4] in (None, ch12.DEFAULT)]
    assert any(drain[c] == 0 for c in plain) and any(0 < drain[c] < 1 for c in plain)       # the minimum, 1 s
    assert any(drain[c] > 1 and drain[c] == int(drain[c]) for c in plain)                    # a whole number of seconds
    assert any(drain[c] > 1 and drain[c] != int(drain[c]) for c in plain)                    # between two
    assert any(c[0] < c[1] for c in after) and any(c[1] == 0 for c in after)                 # below the line; no line
    jittered = [c for c in after if c[4] not in (None, ch12.DEFAULT) and c[3] not in (0.0, ch12.DEFAULT)]
    assert any(drain[c] == 0 for c in jittered) and any(drain[c] > 0 for c in jittered)
    assert any(c[3] == ch12.DEFAULT for c in after) and any(c[4] == ch12.DEFAULT for c in after)


def test_the_retry_after_is_whole_seconds_never_before_the_drain_and_within_the_jitter():
    for c in verdicts.cases(CHAPTER.cells["test_retry_after"], 5):
        got = _ref("retry_after", c)
        drain = max(0, c[0] - c[1]) / c[2]
        jitter = 0.0 if c[4] in (None, ch12.DEFAULT) or c[3] == ch12.DEFAULT else c[3]
        assert isinstance(got, int) and got >= 1 and drain <= got <= max(1, math.ceil(drain + jitter))


def test_the_reference_limit_meets_its_target_and_the_next_step_misses_it():
    for c in verdicts.cases(CHAPTER.cells["test_utilization_limit"], 3)[:40]:
        rho = _ref("utilization_limit", c)
        target, service, cv2, q = (d if v == ch12.DEFAULT else v for v, d in zip(c, (None, None, 0.0, 0.99)))
        if 0 < rho < 1 - 1e-6:
            assert queueing.ttft_quantile(q, rho, service, cv2) <= target < \
                queueing.ttft_quantile(q, rho + 1e-6, service, cv2)


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_1": queueing.utilization_limit(1.0, 0.15, 0.0)}         # equal prompts
    assert "prompt-length variance lengthens the queue" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_1": queueing.utilization_limit(1.0, 0.15, 0.8 ** 2)}
    assert "a log-normal's cv2 is exp(sigma^2) - 1" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": 2400 / 40}
    assert "the drain runs at capacity minus the base load" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_6": math.ceil(90_000 / 16_000)}
    assert "drain to the admission line, not to empty" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in P.patches] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower() or "question" in m.lower()]
