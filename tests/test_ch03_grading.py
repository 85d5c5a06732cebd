"""Chapter 03 is graded from its table (servelab_autograder/judge/checks/ch03.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch03_token_budget/*.diff) still applies to the solution, loses
  exactly the cells it lists, and names its pitfall on the first line of each; the notebook lists every pitfall;
- ``schedule`` is graded one step at a time, state in and state out, through the chapter's driver; the reference
  goes through the same driver;
- the test cells hold no hidden tests (the table is the hidden test), and their messages (``_grade.diagnose``)
  show input, got and expected, naming the pitfall through the atlas, which is what a fresh build of it gives;
- with the chapter's references blocked (the grading library), the cells that run while grading still run, the
  solution still passes, and the library calls that stay reachable do not pass an exercise alone.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from grading_harness import Notebook, Proof, is_test, python_source

from servelab import simulator
from servelab.analytic import costmodel, ordering
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B
from servelab.schedulers import vllm_scheduler
from servelab.simulator import MixedBudget, Requests, simulate
from servelab_autograder import paths
from servelab_autograder.exercises import ch03, plain, probe
from servelab_autograder.judge import known_wrong, verdicts
from servelab_autograder.judge.checks import ch03 as table

ROOT = paths.repo_root()
A = "ch03_token_budget"
CHAPTER = table.CHAPTER
EXERCISES = ("kv_bytes_per_token", "step_time", "schedule", "v1_schedule", "max_chunk", "max_backlog", "mlfq_level")


NB = Notebook(A, skip=CHAPTER.demos)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing


def _graded_names(graded) -> list[str]:
    if isinstance(graded, verdicts.Drills):
        return [d.name for d in graded.drills]
    return [graded.spec.name, *(r.other.name for r in graded.relations)]


def _same(a, b) -> bool:
    code = getattr(a, "__code__", None)
    return code == getattr(b, "__code__", None) if code is not None else a == b


def changed_cells(ns: dict) -> set[str]:
    """The graded cells whose names ``ns`` binds differently from the solution: grading is a function of those names
    and the seed, so every other cell's verdict is the solution's."""
    base = solution()
    return {cell for cell, graded in CHAPTER.cells.items()
            if not all(_same(ns.get(n), base.get(n)) for n in _graded_names(graded))}


# ------------------------------------------------------------------------------------------------
# the table and the notebook


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    assert NB.solution_ids() == [*EXERCISES, "drills"]
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & tests
    modules = {"servelab.analytic.costmodel": costmodel, "servelab.simulator.policies": simulator.policies,
               "servelab.schedulers.vllm_scheduler": vllm_scheduler, "servelab.analytic.ordering": ordering}
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        obj = modules[module]
        for part in name.split("."):
            obj = getattr(obj, part)
        assert callable(obj), ref


def test_the_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    assert {g: m["points"] for g, m in NB.test_cells().items()} == {
        "test_kv_bytes_per_token": 1, "test_step_time": 3, "test_schedule": 3, "test_v1_schedule": 3,
        "test_max_chunk": 2, "test_max_backlog": 2, "test_mlfq_level": 2, "test_drills": 5}
    for c, meta, source in NB.conventional_code_cells():
        tags = c.get("metadata", {}).get("tags", [])
        if meta.get("solution"):
            # only the drills run code at top level, so only their release stub raises at once
            assert tags == (["raises-exception"] if meta["grade_id"] == "drills" else [])
            if meta["grade_id"] != "drills":
                assert c["outputs"] == [], meta["grade_id"]
        elif meta.get("grade"):
            assert "HIDDEN TESTS" not in source, f"{meta['grade_id']}: the table is its hidden test"
            name = meta["grade_id"].removeprefix("test_")
            line = "drills: answered" if name == "drills" else f"{name}: visible tests pass"
            assert source.rstrip().endswith(f'print("{line}")'), meta["grade_id"]
            assert ["".join(o.get("text", "")) for o in c["outputs"]] == [line + "\n"], meta["grade_id"]


def test_setup_cells_that_run_learner_code_may_raise():
    """A setup cell that calls an exercise's function raises at once in the release (the stub): it is tagged
    raises-exception, and the others are not."""
    for cell in NB.cells:
        if cell.kind != "code" or cell.meta.get("solution") or is_test(cell.meta):
            continue
        loads = {n.id for n in ast.walk(ast.parse(python_source(cell.source))) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load)}
        runs_learner_code = bool(loads & {*EXERCISES, "YourMixedBudget"})
        assert ("raises-exception" in cell.tags) == runs_learner_code, cell.meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    figures = 0
    for text, png in NB.saved_outputs():
        figures += png
        assert "wall" not in text, "no wall-clock timings in saved outputs"
    assert figures == 4     # why it matters, the batch sweep, the 128K timeline, the CDFs


def test_the_assumptions_are_stated():
    text = " ".join(c.source for c in NB.cells if c.kind == "markdown")
    for needle in ("LLaMA-2-7B", "Llama-3-8B", "Llama-3.1-8B", "H100 SXM", "H200", "989 TFLOP/s", "3.35 TB/s",
                   "4.8 TB/s", "0.5 ms", "lower bound", "integer **steps**", "float seconds"):
        assert needle in text, needle


def test_a_target_of_a_whole_number_of_steps_is_graded_and_ceil_minus_one_is_caught():
    whole = [c for c in table.BACKLOG_FIXED if abs(c[3] / c[2] - round(c[3] / c[2])) < 1e-9]
    assert (100, 0, 0.25, 1.0) in whole
    assert any(c[3] / c[2] != round(c[3] / c[2]) for c in whole), "a whole-step target floating point rounds down"
    message = failing(solution("backlog_ceil_minus_one"), cells=["test_max_backlog"])["test_max_backlog"]
    assert message.startswith("Pitfall: a target of exactly k steps leaves k whole steps")
    assert "max_backlog(budget=100, num_decodes=0, step_s=0.25, ttft_target_s=1.0) returned 200 tokens; " \
           "expected 300 tokens" in message
    # a plain floor, which 0.3 / 0.1 = 2.9999999999999996 trips, gets the same pitfall
    ns = {**solution(), "max_backlog": lambda b, d, s, t: max(0, (b - d) * (math.floor(t / s) - 1))}
    assert failing(ns, cells=["test_max_backlog"])["test_max_backlog"].startswith(
        "Pitfall: a target of exactly k steps")


ADMIT_AFTER_PREEMPT = """\
Pitfall: a request was admitted in a step that preempted.
fails: test_schedule
says: admitted in a step that preempted
--- schedule
+++ schedule
@@
-    if not state.preempted_this_step:                 # 3. admissions, first come first served
+    if True:                                          # 3. admissions, first come first served
"""


def test_admitting_after_a_preemption_alone_changes_no_step(tmp_path):
    """Why that rule has no patch: after a preemption the head of waiting is the sequence just preempted, and the
    slots it freed went to the decodes (fewer than it holds), so it cannot be admitted anyway."""
    path = tmp_path / "admit_after_preempt.diff"
    path.write_text(ADMIT_AFTER_PREEMPT)
    cells = known_wrong.load(path).apply(PITFALLS.solution)
    ns: dict = {}
    exec(CHAPTER.prelude, ns)
    exec(cells["schedule"], ns)
    states = [args[1] for args in verdicts.cases(CHAPTER.cells["test_schedule"], 0)]
    assert sum(table._preempts(s) for s in states) >= 20, "the cases hold steps that preempt"
    assert failing({**solution(), "schedule": ns["schedule"]}, cells=["test_schedule"]) == {}


# ------------------------------------------------------------------------------------------------
# messages


def test_messages_show_input_got_and_expected():
    text = failing(solution("step_no_kv_read"), cells=["test_step_time"])["test_step_time"]
    assert "step_time(model=LLaMA-2-7B, gpu=H100 SXM, chunks=[], decodes=[1000], overhead_s=0.5 ms)" in text
    assert "returned 4.52309 ms; expected 4.6796 ms" in text and "memory-bound" in text
    text = failing(solution("schedule_budget_overrun"), cells=["test_schedule"])["test_schedule"]
    assert "at step 4 of 'three decoders and a long prompt'" in text and "waiting [3 (40 tokens)]" in text
    assert "returned 0:1 1:1 2:1 3:16 (19 tokens)" in text and "expected 0:1 1:1 2:1 3:13 (16 tokens)" in text
    text = failing(solution("schedule_no_reserve"), cells=["test_schedule"])["test_schedule"]
    assert "the batch is right but the state afterwards differs" in text and "request 0: reserved 6 (reference 7)" \
        in text
    text = failing(solution("chunk_off_by_one"), cells=["test_max_chunk"])["test_max_chunk"]
    assert "returned 1981 tokens; expected 1980 tokens" in text and "with a chunk of 1980 the step takes" in text
    text = failing(solution("kv_weight_bytes"), cells=["test_kv_bytes_per_token"])["test_kv_bytes_per_token"]
    assert "bytes_per_kv_element=1>) returned 524,288 bytes; expected 262,144 bytes" in text


def test_visible_messages_name_the_pitfall_through_the_atlas():
    wrong = solution("kv_query_heads")["kv_bytes_per_token"]
    text = ch03.diagnose(wrong, LLAMA3_8B)
    assert text.startswith("Pitfall: the cache holds num_kv_heads heads, not num_heads")
    assert "returned 524,288 bytes; expected 131,072 bytes" in text
    fp8 = dataclasses.replace(LLAMA3_8B, name="Llama-3-8B, fp8 KV", bytes_per_kv_element=1)
    assert ch03.diagnose(solution("kv_weight_bytes")["kv_bytes_per_token"], fp8).startswith(
        "Pitfall: the KV element size is bytes_per_kv_element")
    text = ch03.diagnose(solution("schedule_prefill_before_decodes")["schedule"])   # the visible scenarios
    assert text.startswith("Pitfall: prefill was scheduled before the decodes") and "returned 3:16 (16 tokens)" in text
    text = ch03.diagnose(solution("chunk_ignores_prefix")["max_chunk"], LLAMA3_8B, H100_SXM, 0.030, [1024] * 32,
                         prefix=30_000)
    assert text.startswith("Pitfall: the chunk bound ignored the prefix") and "expected 957 tokens" in text
    assert ch03.diagnose(solution("backlog_ceil_minus_one")["max_backlog"], 2048, 48, 0.1, 0.3).startswith(
        "Pitfall: a target of exactly k steps")
    right = solution()
    assert ch03.diagnose(right["max_backlog"], 2048, 48, 0.1, 0.3).endswith("is correct on this input")
    assert ch03.diagnose(right["step_time"], LLAMA2_7B, H100_SXM, (), [0]).endswith("is correct on this input")
    assert ch03.diagnose(right["schedule"]).startswith("schedule agrees with MixedBudget on every step")


def _graded(source: str, cell: str) -> verdicts.Verdict:
    ns = solution()
    exec(textwrap.dedent(source), ns)
    return grade(ns, cells=[cell])[cell]


def test_results_are_converted_not_trusted():
    base = solution()
    ns = {**base, "max_backlog": lambda *a: np.int64(base["max_backlog"](*a)),
          "max_chunk": lambda *a, **k: np.int64(base["max_chunk"](*a, **k)),
          "kv_bytes_per_token": lambda m: np.float64(base["kv_bytes_per_token"](m))}
    assert failing(ns, cells=["test_max_backlog", "test_max_chunk", "test_kv_bytes_per_token"]) == {}
    # the two contracts that return an int say so: a whole float is a type error, named as one
    ns = {**base, "max_backlog": lambda *a: float(base["max_backlog"](*a)),
          "max_chunk": lambda *a, **k: float(base["max_chunk"](*a, **k))}
    got = failing(ns, cells=["test_max_backlog", "test_max_chunk"])
    assert "the result is 64000.0, a float; return it as an int" in got["test_max_backlog"]
    assert "the result is 1980.0, a float; return it as an int" in got["test_max_chunk"]
    ns = {**base, "max_chunk": lambda *a, **k: str(base["max_chunk"](*a, **k))}
    assert "returned '1980': the result is '1980'; expected a whole number of tokens" in failing(
        ns, cells=["test_max_chunk"])["test_max_chunk"]
    ns = {**base, "max_backlog": lambda *a: base["max_backlog"](*a) + 0.5}
    assert "returned 64000.5 tokens; expected 64000 tokens" in failing(ns, cells=["test_max_backlog"])[
        "test_max_backlog"]
    v = _graded("""
        _right = schedule
        def schedule(self, state):
            ids, tokens = _right(self, state)
            return list(ids) + list(ids[:1]), list(tokens) + list(tokens[:1])
    """, "test_schedule")
    assert not v.passed and "put request 0 in the step twice" in v.message
    v = _graded("""
        class Yes:  # equal to everything
            def __eq__(self, other):
                return True
        def schedule(self, state):
            return Yes(), Yes()
    """, "test_schedule")
    assert not v.passed and "expected a list or an int array" in v.message


def test_learner_exceptions_and_stubs_are_reported():
    def stub(*args, **kwargs):
        raise NotImplementedError()

    got = failing({**solution(), **{name: stub for name in EXERCISES}})
    assert set(got) == {f"test_{name}" for name in EXERCISES}
    for cell, message in got.items():
        assert "raised NotImplementedError: fill in the function first" in message, cell
    v = _graded("def schedule(self, state):\n    return state.nonexistent\n", "test_schedule")
    assert "raised AttributeError" in v.message and "nonexistent" in v.message
    assert "schedule() at step 0 of 'requests A/B/C (0, 1, 2), budget 8'" in v.message
    v = _graded("def kv_bytes_per_token(model):\n    return model.kv_bytes_per_token\n", "test_kv_bytes_per_token")
    assert "kv_bytes_per_token is what you are computing" in v.message


# ------------------------------------------------------------------------------------------------
# the drills


def test_drills_are_computed_by_the_library_and_wrong_answers_get_hints():
    ns = solution()
    drills = CHAPTER.drills.drills
    assert [ns[d.name] for d in drills] == pytest.approx([d.expected() for d in drills], rel=1e-12)
    walkthrough_batch = costmodel.max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, 2048)   # the first claim's
    assert ns["drill_1"] == costmodel.max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, table.Q1_CONTEXT) < walkthrough_batch
    assert ns["drill_5"] == table.q4_plan()["limit"]
    assert [d.rel_tol for d in drills] == [0.0, 0.05, 0.03, 0.05, 0.02, 0.0, 0.0, 0.001]
    assert ns["drill_7"] == costmodel.max_decode_batch(LLAMA2_7B, H200, 0.012, 2048) > walkthrough_batch

    def drills_message(**answers):
        return grade({**ns, **answers}, cells=["test_drills"])["test_drills"]

    plan = table.q4_plan()
    assert "Pitfall: the decodes' tokens are not prefill throughput" in \
        drills_message(drill_5=plan["budget"] * (plan["steps"] - 1)).message
    assert "Pitfall: a new request first waits for the step in flight" in \
        drills_message(drill_5=plan["chunk"] * plan["steps"]).message
    no_prefix = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16384, decode_context_lens=[2048] * 64)
    assert "Pitfall: each chunk of a long prompt attends to the prompt before it" in \
        drills_message(drill_3=no_prefix * 1.01).message
    chunks = table.Q3_PROMPT // 16384
    assert "Pitfall: each chunk of a long prompt attends to the prompt before it" in \
        drills_message(drill_4=chunks * costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=16384)).message
    assert "largest B with step_time" in drills_message(drill_1=32).message
    assert "That is the batch at 2048 tokens of context" in drills_message(drill_1=walkthrough_batch).message
    assert "drill_3 is not defined" in grade({k: v for k, v in ns.items() if k != "drill_3"},
                                             cells=["test_drills"])["test_drills"].message
    assert "drill_2 is True" in drills_message(drill_2=True).message
    assert "FLOPs per byte, not of tokens" in drills_message(drill_6=295).message
    assert "That is the batch on the H100" in drills_message(drill_7=walkthrough_batch).message
    assert "A newcomer is not at priority 0" in drills_message(drill_8=65536 / 4).message
    assert drills_message(drill_8=16256.0).passed and not drills_message(drill_8=16256.0 * 1.005).passed
    assert drills_message(drill_2=ns["drill_2"] * 1.04, drill_3=ns["drill_3"] * 0.98,
                          drill_4=ns["drill_4"] * 1.04).passed
    # drill_5 is a count of tokens: graded exactly, so one token off is not yet
    assert not drills_message(drill_5=ns["drill_5"] + 1).passed


def test_drills_1_to_4_are_not_the_walkthroughs_printed_answers():
    """The walkthrough prints its claims' answers (the batch at 2048 tokens of context, the wait behind a
    32,768-token prompt, the last step and lockout of a 131,072-token one); the drills ask for variants, and a
    learner who copies the printed number, exact or as shown, is told why it is not yet right."""
    ns = solution()
    copied = {"drill_1": (costmodel.max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, 2048),),
              "drill_2": (table.q2_short_ttft_s(32768),), "drill_3": (table.q3_worst_gap_s(131072),),
              "drill_4": (table.q3_lockout_s(131072),)}
    digits = {"drill_2": 3, "drill_3": 3, "drill_4": 2}   # as the walkthrough prints them
    for name, digit in digits.items():
        copied[name] += (round(copied[name][0], digit),)
    drills = {d.name: d for d in CHAPTER.drills.drills}
    for name, values in copied.items():
        d = drills[name]
        for value in values:
            assert not math.isclose(value, d.expected(), rel_tol=d.rel_tol, abs_tol=d.abs_tol), (name, value)
            v = grade({**ns, name: value}, cells=["test_drills"])["test_drills"]
            hint = v.message.splitlines()[0]
            assert not v.passed and hint.startswith("That is the "), (name, value, v.message)
            for number in re.findall(r"\d[\d,]*(?:\.\d+)?", hint):    # a hint never gives the number
                assert not math.isclose(float(number.replace(",", "")), d.expected(), rel_tol=max(d.rel_tol, 0.05)), \
                    (name, hint)


def test_drill_derivations_agree_with_the_simulator():
    """Each drill's step-model answer is what the simulator measures on the drill's workload."""
    reqs = Requests(np.array([0.0] + [0.001] * 10), np.array([table.Q2_PROMPT] + [256] * 10), np.array([64] * 11))
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=table.Q2_BUDGET), LLAMA31_8B, H100_SXM)
    assert res.ttft[1:].mean() == pytest.approx(table.q2_short_ttft_s(), rel=0.02)
    chunks = table.Q3_PROMPT // table.Q3_CHUNK
    res = simulate(Requests([0.0], [table.Q3_PROMPT], [2]), MixedBudget(max_num_batched_tokens=table.Q3_CHUNK),
                   LLAMA31_8B, H100_SXM)
    last = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=table.Q3_CHUNK,
                               prefill_context=table.Q3_PROMPT - table.Q3_CHUNK)
    assert res.step_duration_s[:chunks].max() == pytest.approx(last, rel=1e-9)
    assert res.ttft[0] == pytest.approx(table.q3_lockout_s(), rel=1e-9)
    # one wave of B requests whose context averages Q1_CONTEXT over their 2048 decode steps
    batch = costmodel.max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, table.Q1_CONTEXT)
    for B, meets in ((batch, True), (batch + 1, False)):
        res = simulate(Requests(np.zeros(B), np.full(B, table.Q1_CONTEXT - 1024), np.full(B, 2048)),
                       MixedBudget(max_num_batched_tokens=65536, max_num_seqs=B), LLAMA2_7B, H100_SXM)
        assert bool(np.nanmax(res.tpot) <= 0.012) == meets


# ------------------------------------------------------------------------------------------------
# the grading library: the references blocked, what stays, and the cells that run against it


def test_each_run_draws_its_own_random_cases():
    for name in ("test_schedule", "test_max_backlog"):
        ex = CHAPTER.cells[name]
        first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
        fixed = len(ex.fixed())
        assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]
        assert verdicts.cases(ex, 1) == first


def test_the_library_alone_does_not_pass_an_exercise():
    base = solution()
    passes_prefixes_as_one = {**base, "step_time": lambda model, gpu, chunks=(), decodes=(), overhead_s=0.5e-3:
                              costmodel.step_time(model, gpu, [c for c, _ in chunks], decodes,
                                                  chunks[0][1] if chunks else 0, overhead_s)}
    passes_through = {**base, "step_time": lambda model, gpu, chunks=(), decodes=(), overhead_s=0.5e-3:
                      costmodel.step_time(model, gpu, chunks, decodes, overhead_s=overhead_s)}
    chapter_two = {**base, "schedule": simulator.PrefillFirst.schedule}
    for ns, cell in ((passes_prefixes_as_one, "test_step_time"), (passes_through, "test_step_time"),
                     (chapter_two, "test_schedule")):
        assert cell in failing(ns, cells=[cell]), cell


def test_the_probe_answers_schedule_with_plain_data():
    req = verdicts.request(CHAPTER, "test_schedule", 5)
    assert req["calls"][0]["driver"] == "servelab_autograder.exercises.ch03:drive_schedule"
    policy, state = plain.decode(req["calls"][0]["cases"][0])
    assert policy == {"max_num_batched_tokens": 8, "max_num_seqs": 8} and state["waiting"] == [0, 1, 2]
    reply = probe.answer({"calls": [{**req["calls"][0], "cases": req["calls"][0]["cases"][:2]}]}, solution())
    json.dumps(reply)
    step, after = plain.decode(reply["calls"][0]["results"][1]["ok"])
    assert ch03.SPECS["schedule"].norm((step, after), (policy, state))[0] == ((0, 1), (1, 3), (2, 3))


def test_verdicts_need_no_asserts():
    script = textwrap.dedent(f"""
        from servelab_autograder.judge import verdicts
        from servelab_autograder.judge.checks import ch03 as table
        P = verdicts.Pitfalls(table.CHAPTER, {str(ROOT)!r})
        v = verdicts.grade_namespace(table.CHAPTER, dict(P.namespace("backlog_counts_decodes")), 3, pitfalls=P)
        print(sorted(c for c, x in v.items() if not x.passed))
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['test_max_backlog']", out.stdout + out.stderr


KERNEL_SIDE = """
import contextlib, io, json, sys
sys.path.insert(0, {lib!r})
import numpy as np
import servelab
assert servelab.__file__.startswith({lib!r}), servelab.__file__
from servelab.analytic import costmodel, ordering
from servelab import simulator
from servelab_autograder.exercises import probe
from servelab_autograder import paths

out = {{}}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ran"
    except RuntimeError as e:
        out[name] = str(e)
state = simulator.ServingState(np.array([3]), np.array([2]), 10)
state.waiting.append(0)
attempt("MixedBudget.schedule", lambda: simulator.MixedBudget(8).schedule(state))
attempt("max_prefill_chunk", lambda: costmodel.max_prefill_chunk(costmodel.LLAMA3_8B, costmodel.H100_SXM, 0.03))
attempt("max_backlog_tokens", lambda: costmodel.max_backlog_tokens(2048, 48, 0.03, 1.0))
attempt("step_time", lambda: costmodel.step_time(costmodel.LLAMA3_8B, costmodel.H100_SXM, 512))
attempt("max_decode_batch", lambda: costmodel.max_decode_batch(costmodel.LLAMA2_7B, costmodel.H100_SXM, 0.012, 2048))
attempt("PrefillFirst.schedule", lambda: simulator.PrefillFirst(8).schedule(state))

ns = {{"__name__": "__main__"}}
with contextlib.redirect_stdout(io.StringIO()):
    for gid, source in json.load(open({cells!r})):
        exec(compile(source, gid, "exec"), ns)
replies = {{cell: probe.answer(req, ns) for cell, req in json.load(open({requests!r})).items()}}
print(json.dumps({{"library": out, "replies": replies}}))
"""


def test_the_cells_that_run_while_grading_pass_against_the_grading_library(tmp_path):
    """The kernel's side of a grading, with the chapter's references blocked: the cells that are not demos run
    (setup cells, solution cells), the drivers answer every graded cell, and the verdicts made here all pass."""
    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path / "lib", CHAPTER.references)
    cells = [(c.meta["grade_id"], python_source(c.source)) for c in NB.cells
             if c.kind == "code" and not is_test(c.meta) and c.meta["grade_id"] not in CHAPTER.demos]
    assert [g for g, _ in cells] == ["setup_1", "setup_3", "setup_4", *EXERCISES, "setup_drills", "drills"]
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "requests.json").write_text(json.dumps({c: verdicts.request(CHAPTER, c, 7) for c in CHAPTER.cells}))
    script = KERNEL_SIDE.format(lib=str(lib.parent), cells=str(tmp_path / "cells.json"),
                                requests=str(tmp_path / "requests.json"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    library = got["library"]
    for name in ("MixedBudget.schedule", "max_prefill_chunk", "max_backlog_tokens"):
        assert "not available while grading" in library[name], name
    assert all(library[name] == "ran" for name in ("step_time", "max_decode_batch", "PrefillFirst.schedule"))
    for cell, reply in got["replies"].items():
        v = verdicts.judge(CHAPTER, cell, 7, reply, PITFALLS)
        assert v.passed, (cell, v.message)
