"""Chapter 03's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast, on the solution notebook run cell by cell (tests/grading_harness.py; matplotlib on Agg): only
the cells grading needs, figures not displayed (see _Notebook). nbgrader grades the same cells as whole submissions
in the slower autograde tests.
"""

from __future__ import annotations

import ast
import functools
import math

import matplotlib
import numpy as np
import pytest
from grading_harness import Notebook, caught_under_python_O, is_test, pitfall_phrase, python_source

matplotlib.use("Agg")

from servelab import costmodel  # noqa: E402
from servelab.costmodel import H100_SXM, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B  # noqa: E402
from servelab.simulator import MixedBudget, Requests, simulate  # noqa: E402
from servelab_autograder import ch03  # noqa: E402

EXERCISES = ("kv_bytes_per_token", "step_time", "schedule", "max_chunk", "max_backlog")

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_kv_bytes_per_token": lambda ns: ch03.check_kv_bytes_per_token(ns["kv_bytes_per_token"]),
    "test_step_time": lambda ns: ch03.check_step_time(ns["step_time"]),
    "test_schedule": lambda ns: ch03.check_schedule(ns["schedule"]),
    "test_max_chunk": lambda ns: ch03.check_max_chunk(ns["max_chunk"]),
    "test_max_backlog": lambda ns: ch03.check_max_backlog(ns["max_backlog"]),
    "test_drills": lambda ns: ch03.check_drills([ns[f"drill_{k}"] for k in range(1, 6)]),
}


# --------------------------------------------------------------------------------------------------------
# the notebook, cell by cell


class _Notebook(Notebook):
    """Chapter 03's notebook, run for grading: only the cells the test cells read (the walkthrough's simulations
    and figures cannot change a grade; the notebook itself runs them all: nbval, execute). A cell that raises (a
    setup cell running a wrong submission) stops nothing, as in nbgrader; figures are drawn, not displayed. Name
    flow by the strict rules, and each known-wrong namespace built once."""

    def __init__(self):
        super().__init__("ch03_token_budget", strict_names=True)
        self._wrong_namespaces: dict[str, dict] = {}

    @functools.cached_property
    def cells_the_tests_read(self) -> frozenset[str]:
        """grade_ids of the non-test cells whose names the test cells read, directly or through other cells."""
        needed = set().union(*(self.names(src)[1] for meta, src in self.code_cells() if is_test(meta)))
        keep = set()
        for meta, src in reversed(self.code_cells()):
            bound, used = self.names(src)
            if not is_test(meta) and (bound & needed or meta.get("solution")):
                keep.add(meta["grade_id"])
                needed |= used
        return frozenset(keep)

    def runs(self, meta: dict) -> bool:
        return meta.get("grade_id") in self.cells_the_tests_read

    def exec_cell(self, meta: dict, src: str, ns: dict, replacing: bool) -> None:
        try:
            super().exec_cell(meta, src, ns, replacing)
        except Exception:  # noqa: BLE001 - only the solution must run cleanly, checked separately
            if not replacing:
                raise
        if "show" in ns:           # figures: drawn, not displayed
            ns["show"] = lambda fig: matplotlib.pyplot.close(fig)

    def wrong_namespace(self, name: str) -> dict:
        if name not in self._wrong_namespaces:
            self._wrong_namespaces[name] = super().wrong_namespace(name)
        return dict(self._wrong_namespaces[name])


NB = _Notebook()


# --------------------------------------------------------------------------------------------------------
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    solutions = NB.solution_ids()
    tests = NB.test_cells()
    assert solutions == [*EXERCISES, "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_kv_bytes_per_token": 1, "test_step_time": 3, "test_schedule": 3, "test_max_chunk": 2,
        "test_max_backlog": 2, "test_drills": 5}
    for c, meta, source in NB.conventional_code_cells():
        tags = c.get("metadata", {}).get("tags", [])
        if meta.get("solution"):
            # only the drills run code at top level, so only their release stub raises at once
            assert tags == (["raises-exception"] if meta["grade_id"] == "drills" else [])
            if meta["grade_id"] != "drills":
                assert c["outputs"] == [], meta["grade_id"]
        elif meta.get("grade"):
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
            assert c["outputs"] == [], f"{meta['grade_id']} prints nothing when it passes"


def test_setup_cells_that_run_learner_code_may_raise():
    """A setup cell that calls an exercise's function raises at once in the release (the stub): it must be
    tagged raises-exception, and the others must not be."""
    for kind, meta, src, tags in NB.cells:
        if kind != "code" or meta.get("solution") or is_test(meta):
            continue
        loads = {n.id for n in ast.walk(ast.parse(python_source(src))) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load)}
        runs_learner_code = bool(loads & {*EXERCISES, "YourMixedBudget"})
        assert ("raises-exception" in tags) == runs_learner_code, meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    figures = 0
    for text, png in NB.saved_outputs():
        figures += png
        assert "wall" not in text, "no wall-clock timings in saved outputs"
    assert figures == 4     # why it matters, the batch sweep, the 128K timeline, the CDFs


def test_the_assumptions_are_stated():
    text = " ".join(src for kind, _, src, _ in NB.cells if kind == "markdown")
    for needle in ("LLaMA-2-7B", "Llama-3-8B", "Llama-3.1-8B", "H100 SXM", "H200", "989 TFLOP/s", "3.35 TB/s",
                   "4.8 TB/s", "0.5 ms", "lower bound", "integer **steps**", "float seconds"):
        assert needle in text, needle


# --------------------------------------------------------------------------------------------------------
# the solution passes


@pytest.mark.parametrize("test_cell", sorted(HELPERS))
def test_solution_passes_every_check(test_cell):
    HELPERS[test_cell](NB.solution_namespace())


def test_solution_passes_every_test_cell():
    NB.assert_solution_passes_every_test_cell(HELPERS)


# --------------------------------------------------------------------------------------------------------
# every known-wrong submission fails, with its pitfall's name


def test_there_is_a_known_wrong_for_every_pitfall_the_chapter_names():
    messages = NB.assert_a_known_wrong_per_pitfall(HELPERS, ch03.PITFALLS, at_least=6)
    phrases = [pitfall_phrase(m) for m in messages]     # unique too, as the list names them
    assert len(set(phrases)) == len(phrases), "two known-wrong submissions test the same pitfall"
    # and the other way round: every bullet of the list has its known-wrong submission
    for bullet in NB.pitfalls_text().split("\n- ")[1:]:
        assert any(m in bullet for m in phrases), f"no known-wrong submission for: {bullet[:80]}"


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_fails_its_checks_with_its_message(name):
    NB.assert_known_wrong_fails_its_checks(name, HELPERS)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    NB.assert_known_wrong_loses_exactly_the_points_of_fails(name)


def test_the_unit_tests_run_the_cells_grading_needs():
    assert NB.cells_the_tests_read == {"setup_1", *EXERCISES, "drills"}


def test_each_exercise_only_affects_its_own_test_cell():
    for exercise in EXERCISES:
        assert NB.affected_tests({exercise}) == [f"test_{exercise}"], exercise
    assert NB.affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks refuse the reference, explain mistakes in the learner's terms, and need no assert statement


def test_calling_the_reference_is_refused():
    with pytest.raises(AssertionError, match="is servelab.costmodel.max_backlog_tokens itself"):
        ch03.check_max_backlog(costmodel.max_backlog_tokens)
    with pytest.raises(AssertionError, match="is servelab.simulator.MixedBudget.schedule itself"):
        ch03.check_schedule(MixedBudget.schedule)

    def via_reference(model, gpu, chunks=(), decodes=(), overhead_s=0.5e-3):
        return costmodel.step_time(model, gpu, [c for c, _ in chunks], list(decodes), [p for _, p in chunks],
                                   overhead_s)

    with pytest.raises(AssertionError, match="calls servelab.costmodel.step_time"):
        ch03.check_step_time(via_reference)

    def via_super(self, state):
        return super(type(self), self).schedule(state)

    with pytest.raises(AssertionError, match="calls servelab.simulator.MixedBudget.schedule"):
        ch03.check_schedule(via_super)

    def chunk_by_reference(model, gpu, target, decodes, prefix=0, overhead_s=0.5e-3):
        return costmodel.max_prefill_chunk(model, gpu, target, decodes, prefix, overhead_s)

    with pytest.raises(AssertionError, match="calls servelab.costmodel.max_prefill_chunk"):
        ch03.check_max_chunk(chunk_by_reference)

    def kv_by_reference(model):
        return model.kv_bytes_per_token

    with pytest.raises(AssertionError, match="kv_bytes_per_token is what you are computing"):
        ch03.check_kv_bytes_per_token(kv_by_reference)


def test_messages_show_the_input_what_came_back_and_what_was_expected():
    ns = NB.solution_namespace()
    msg = ch03.diagnose("max_chunk", lambda *a, **k: 7, LLAMA3_8B, H100_SXM, 0.030, [1024] * 32)
    assert "max_chunk(Llama-3-8B, H100 SXM, tpot_target_s=0.03, decodes=[1024] * 32" in msg
    assert "returned 7; expected 1980" in msg and "with a chunk of 1980 the step takes" in msg
    msg = ch03.diagnose("step_time", lambda *a, **k: 1.0, LLAMA2_7B, H100_SXM, (), [0])
    assert "returned 1000 ms; expected 4.52" in msg and "memory-bound" in msg
    assert "agrees with the reference" in ch03.diagnose("max_backlog", ns["max_backlog"], 2048, 48, 0.03, 1.0)
    assert ch03.diagnose("nope", ns["max_backlog"]) == "no check named 'nope'"


def test_schedule_failures_name_the_step_and_the_state():
    wrong = NB.known_wrong("schedule_budget_overrun").REPLACE["schedule"]
    ns = dict(NB.solution_namespace())
    exec(wrong, ns)
    with pytest.raises(AssertionError) as info:
        ch03.check_schedule(ns["schedule"])
    msg = str(info.value)
    assert msg.startswith("Pitfall: the step overran the token budget")
    assert "At step" in msg and "three decoders and a long prompt" in msg
    assert "you scheduled:" in msg and "MixedBudget scheduled:" in msg and "(19 tokens)" in msg


def test_results_are_converted_not_trusted():
    ns = NB.solution_namespace()
    # numpy numbers and whole floats are fine
    ch03.check_max_backlog(lambda *a: np.int64(ns["max_backlog"](*a)))
    ch03.check_max_chunk(lambda *a, **k: float(ns["max_chunk"](*a, **k)))
    ch03.check_kv_bytes_per_token(lambda m: np.float64(ns["kv_bytes_per_token"](m)))
    with pytest.raises(AssertionError, match="returned something else: the result is '1980'"):
        ch03.check_max_chunk(lambda *a, **k: str(ns["max_chunk"](*a, **k)))
    with pytest.raises(AssertionError, match=r"expected 64000 tokens"):
        ch03.check_max_backlog(lambda *a: ns["max_backlog"](*a) + 0.5)

    def two_entries(self, state):
        ids, tokens = ns["schedule"](self, state)
        return list(ids) + list(ids[:1]), list(tokens) + list(tokens[:1])

    with pytest.raises(AssertionError, match="put request 0 in the step twice"):
        ch03.check_schedule(two_entries)


def test_learner_exceptions_and_stubs_are_reported():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    for check in (ch03.check_kv_bytes_per_token, ch03.check_step_time, ch03.check_schedule, ch03.check_max_chunk,
                  ch03.check_max_backlog):
        with pytest.raises(AssertionError, match="raised NotImplementedError: fill in the function first"):
            check(stub)

    def broken(self, state):
        return state.nonexistent

    with pytest.raises(AssertionError, match="raised AttributeError: .*nonexistent") as info:
        ch03.check_schedule(broken)
    assert "step 0 of the scenario 'the lesson's A/B/C" in str(info.value)


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = NB.solution_namespace()
    answers = [ns[f"drill_{k}"] for k in range(1, 6)]
    assert answers == [expected() for _, expected, _ in ch03.DRILLS.values()]
    assert answers[0] == 23 and answers[4] == ch03.q4_plan()["limit"]
    ch03.check_drills(dict(zip(ch03.DRILLS, answers)))
    plan = ch03.q4_plan()
    steps = math.floor(1.0 / plan["step_s"])
    with pytest.raises(AssertionError, match="^Pitfall: the decodes' tokens are not prefill throughput"):
        ch03.check_drills(answers[:4] + [plan["budget"] * (steps - 1)])
    with pytest.raises(AssertionError, match="^Pitfall: a new request first waits for the step in flight"):
        ch03.check_drills(answers[:4] + [plan["chunk"] * steps])
    no_prefix = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16384, decode_context_lens=[2048] * 64)
    with pytest.raises(AssertionError, match="^Pitfall: the chunk bound ignored the prefix"):
        ch03.check_drills(answers[:2] + [no_prefix] + answers[3:])
    with pytest.raises(AssertionError, match="largest B with step_time"):
        ch03.check_drills([32] + answers[1:])
    with pytest.raises(AssertionError, match="drill_3 is not defined"):
        ch03.check_drills({"drill_1": 23, "drill_2": 0.8})
    with pytest.raises(AssertionError, match="drill_2 is True"):
        ch03.check_drills([23, True, *answers[2:]])
    # within tolerance is accepted
    ch03.check_drills([answers[0], answers[1] * 1.04, answers[2] * 0.98, answers[3] * 1.04, answers[4] * 1.01])


def test_drill_derivations_agree_with_the_simulator():
    """Each drill's step-model answer is what the simulator measures on the question's workload (the notebook
    runs the same workloads; this pins the agreement)."""
    # Q2: ten 256-token prompts behind a 32K one, FCFS
    reqs = Requests(np.array([0.0] + [0.001] * 10), np.array([32768] + [256] * 10), np.array([64] * 11))
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=2048), LLAMA31_8B, H100_SXM)
    assert res.ttft[1:].mean() == pytest.approx(ch03.q2_short_ttft_s(), rel=0.02)
    # Q3 without background load: the last chunk's step and the whole prefill
    res = simulate(Requests([0.0], [131072], [2]), MixedBudget(max_num_batched_tokens=16384), LLAMA31_8B, H100_SXM)
    assert res.step_duration_s[:8].max() == pytest.approx(
        costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16384, prefill_context=131072 - 16384), rel=1e-9)
    assert res.ttft[0] == pytest.approx(ch03.q3_lockout_s(), rel=1e-9)
    # Q1: the largest batch within 12 ms is the simulator's too
    for B, meets in ((23, True), (24, False)):
        res = simulate(Requests(np.zeros(B), np.full(B, 1024), np.full(B, 2048)),
                       MixedBudget(max_num_batched_tokens=65536, max_num_seqs=B), LLAMA2_7B, H100_SXM)
        assert bool(np.nanmax(res.tpot) <= 0.012) == meets


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    wrong = NB.known_wrong("backlog_counts_decodes").REPLACE["max_backlog"]
    out = caught_under_python_O("ch03", "check_max_backlog", "max_backlog", NB.source("max_backlog"), wrong,
                                imports={"math": "import math"})
    assert "caught: Pitfall: the decodes' tokens are not prefill throughput" in out
