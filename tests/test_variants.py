"""Drill numbers drawn per learner (servelab_autograder.exercises.variants): two learners get different numbers,
each is graded right on their own and wrong on the other's; a self-learner gets the workbook's own; every draw of
every drawn drill runs on the serving model, and its known wrong answers stay outside the tolerance."""

import contextlib
import io
import math

import pytest

from servelab.analytic import serving
from servelab_autograder import paths
from servelab_autograder.exercises import variants
from servelab_autograder.judge import checks
from servelab_autograder.judge.verdicts import Pitfalls, grade_namespace
from servelab_autograder.runner.kernel_guard import learner_env

DRAWN = [c for c in checks.tables() if c.drills is not None and any(d.variant for d in c.drills.drills)]
LEARNERS = [f"learner{i:03d}" for i in range(60)]


def test_some_chapter_draws_its_drills():
    assert DRAWN, "no chapter has drawn drills"


@pytest.mark.parametrize("chapter", DRAWN, ids=lambda c: c.short)
def test_two_learners_differ_and_a_self_learner_reads_the_workbook(chapter):
    vs = [d.variant for d in chapter.drills.drills if d.variant]
    ana, ben = variants.numbers(vs, "ana"), variants.numbers(vs, "ben")
    assert ana != ben and ana == variants.numbers(vs, "ana")          # fixed for one learner, not for two
    assert variants.numbers(vs, "ana", "another-course") != ana        # and per course
    for who in variants.SELF:
        assert variants.numbers(vs, who) == {v.name: v.default for v in vs}


@pytest.mark.parametrize("chapter", DRAWN, ids=lambda c: c.short)
def test_each_is_right_on_their_own_numbers_and_wrong_on_the_other(chapter):
    pitfalls = Pitfalls(chapter, paths.repo_root())
    cell = chapter.drills.cell
    ns = {who: pitfalls.learner_namespace(None, who) for who in ("ana", "ben")}

    def grade(namespace, who):
        return grade_namespace(chapter, namespace, 0, pitfalls=pitfalls, cells=[cell], learner=who)[cell]

    assert grade(ns["ana"], "ana").passed and grade(ns["ben"], "ben").passed
    wrong = grade(ns["ana"], "ben")
    assert not wrong.passed and "not yet" in wrong.message
    # the workbook's own answers, handed in by a learner whose numbers are drawn: wrong, and told why
    told = grade(pitfalls.namespace(None), "ana")
    assert not told.passed and "the workbook's own numbers" in told.message


@pytest.mark.parametrize("chapter", DRAWN, ids=lambda c: c.short)
def test_every_draw_runs_and_keeps_its_wrong_answers_wrong(chapter):
    for drill in (d for d in chapter.drills.drills if d.variant):
        assert drill.points is not None, f"{drill.name} states no serving point for its draws"
        for who in LEARNERS:
            numbers = drill.numbers(who)
            for point in drill.points(numbers):
                serving.check(point)                  # raises Infeasible, naming the limit, if a draw cannot run
            want = drill.want(who)
            assert math.isfinite(want), (drill.name, numbers)
            for wrong, hint in drill.hint_pairs(who):
                assert not drill.accepts(wrong, who=who), f"{drill.name} on {dict(numbers)} accepts {hint!r}"
            if drill.whole(who):
                assert not drill.accepts(want + 1, who=who) and not drill.accepts(want - 1, who=who)


def test_whose_numbers():
    env = {"SERVELAB_LEARNER": "ana", "JUPYTERHUB_USER": "ben"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert variants.learner() == "ana"                     # the grader's word over the hub's
        mp.delenv("SERVELAB_LEARNER")
        assert variants.learner() == "ben"
        with variants.as_learner("cleo"):
            assert variants.learner() == "cleo"
        mp.delenv("JUPYTERHUB_USER")
        assert variants.learner() == ""
    plan = {"verdicts": {"assignment": "a", "seed": 1, "learner": "ana", "course": "c1"}}
    assert learner_env(plan) == {"SERVELAB_LEARNER": "ana", "SERVELAB_COURSE_ID": "c1"}
    assert learner_env({}) == {}


@pytest.mark.parametrize("chapter", DRAWN, ids=lambda c: c.short)
def test_the_numbers_cell_prints_this_learners_drills(chapter):
    vs = [d.variant for d in chapter.drills.drills if d.variant]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mine = variants.show(vs, "ana")
    text = out.getvalue()
    assert "drawn for ana" in text
    for v in vs:
        assert f"{v.name}: {v.question(mine[v.name])}" in text
    with pytest.raises(AttributeError, match="has no number"):
        _ = mine[vs[0].name].no_such_number


@pytest.mark.parametrize("chapter", DRAWN, ids=lambda c: c.short)
def test_every_known_wrong_submission_that_must_lose_the_drills_loses_them_whoever_hands_it_in(chapter):
    """A known-wrong patch whose ``fails:`` names the drills cell, re-run on other learners' numbers (the ids
    test_autograde grades it as among them): the drills cell fails for each, whatever the draw."""
    pitfalls = Pitfalls(chapter, paths.repo_root())
    cell = chapter.drills.cell
    for patch in (p for p in pitfalls.patches if cell in p.fails):
        for who in [*LEARNERS[:3], f"wrong-{patch.name}"]:
            ns = pitfalls.learner_namespace(patch.name, who)
            verdict = grade_namespace(chapter, ns, 0, pitfalls=pitfalls, cells=[cell], learner=who)[cell]
            numbers = {d.name: dict(d.numbers(who)) for d in chapter.drills.drills if d.variant}
            assert not verdict.passed, f"{patch.name} keeps the drills for {who} on {numbers}"
