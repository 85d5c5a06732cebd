"""Chapter 01 is graded from its table (servelab_autograder/judge/checks/ch01.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on several seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch01_continuous_batching/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the test cells hold no hidden tests (the table is the hidden test) and every lesson assert is visible;
- the visible asserts' messages (``_grade.diagnose``) show input, got and expected, and name the pitfall on the
  fixed cases through the pitfall atlas, which is what a fresh build of it gives.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap

import pytest
from grading_harness import Notebook, Proof

from servelab.analytic import batching
from servelab_autograder import paths
from servelab_autograder.exercises import ch01, plain
from servelab_autograder.judge import verdicts
from servelab_autograder.judge.checks import ch01 as table

ROOT = paths.repo_root()
A = "ch01_continuous_batching"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    assert [c.meta["grade_id"] for c in NB.cells if c.meta.get("solution")] == [
        "simulate_static", "simulate_continuous", "utilization", "lower_bound", "simulate_continuous_arrivals",
        "expected_max", "drills"]
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & tests
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        assert module == "servelab.analytic.batching" and callable(getattr(batching, name)), ref


def test_messages_show_input_got_and_expected():
    text = failing(solution("static_no_wait"))["test_simulate_static"]
    assert "simulate_static(out_lens=[20, 200, 50, 30], B=2)" in text
    assert "returned (230, [20, 200, 250, 230])" in text
    assert "expected (250, [20, 200, 250, 230])" in text
    relation = failing(solution("static_no_wait"))["test_simulate_continuous"]
    assert "continuous batching is never slower than static batching" in relation


def test_visible_messages_name_the_pitfall_through_the_atlas():
    wrong = solution("static_no_wait")["simulate_static"]
    text = ch01.diagnose(wrong, [20, 200, 50, 30], 2)
    assert text.splitlines()[0].startswith("Pitfall: static batch does not wait for its longest request")
    assert "expected (250, [20, 200, 250, 230])" in text
    right = solution()["simulate_static"]
    assert ch01.diagnose(right, [5, 1, 1, 1], 2).endswith("is correct on this input")
    assert "expected (5, [5, 1, 2, 3])" in ch01.diagnose(right, [5, 1, 1, 1], 2, name="simulate_continuous")
    mean = solution("expected_max_mean")["expected_max"]
    assert ch01.diagnose(mean, [0.5, 0.5], 2).startswith("Pitfall: that is E[L] of one draw")


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_simulate_static"]
    first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]
    assert verdicts.cases(ex, 1) == first


def _graded(source: str, cell: str, extra: dict | None = None) -> verdicts.Verdict:
    ns = {**solution(), **(extra or {})}
    exec(textwrap.dedent(source), ns)
    return grade(ns)[cell]


def test_results_are_converted_not_trusted():
    v = _graded("""
        class Sneaky:  # equal to everything
            def __eq__(self, other):
                return True
        def simulate_static(out_lens, B):
            return Sneaky()
    """, "test_simulate_static")
    assert not v.passed and "expected a tuple" in v.message
    v = _graded("def lower_bound(out_lens, B):\n    return max(max(out_lens), sum(out_lens) / B)\n", "test_lower_bound")
    assert not v.passed and "whole number" in v.message


def test_learner_exceptions_stubs_and_changed_inputs_are_reported():
    v = _graded("def utilization(out_lens, B, total_steps):\n    raise NotImplementedError()\n", "test_utilization")
    assert "raised NotImplementedError: fill in the function first" in v.message
    v = _graded("def lower_bound(out_lens, B):\n    out_lens.sort()\n    return max(out_lens)\n", "test_lower_bound")
    assert "changed its input lists" in v.message
    ns = solution()
    del ns["expected_max"]
    v = grade(ns)["test_expected_max"]
    assert (v.ename, v.message) == ("NameError", "name 'expected_max' is not defined")


def test_drills_name_a_missing_or_malformed_answer():
    ns = solution()
    del ns["drill_3"]
    assert "drill_3 is not defined: assign your answer to drill_3" in grade(ns)["test_drills"].message
    ns = {**solution(), "drill_1": "300"}
    assert "expected a number" in grade(ns)["test_drills"].message


def test_a_malformed_answer_from_the_kernel_scores_zero():
    v = verdicts.judge(CHAPTER, "test_simulate_static", 0, {"calls": [{"results": [{"ok": {"$": "nope"}}]}]},
                       PITFALLS)
    assert not v.passed and "scores 0" in v.message
    v = verdicts.judge(CHAPTER, "test_lower_bound", 0, {"calls": "junk"}, PITFALLS)
    assert not v.passed


def test_the_grading_library_has_no_references_of_this_chapter(tmp_path):
    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path, CHAPTER.references)
    script = textwrap.dedent("""
        import importlib, json
        from servelab.analytic import batching
        out = {}
        calls = {"simulate_static": ([5, 1], 2), "naive_continuous": ([5, 1], 2), "expected_max": ([0.5, 0.5], 2),
                 "pmf_mean": ([0.5, 0.5],), "geometric_pmf": (10,)}
        for name, args in calls.items():
            fn = getattr(importlib.import_module("servelab.analytic.batching"), name)
            try:
                fn(*args)
                out[name] = "ran"
            except RuntimeError as e:
                out[name] = str(e)
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(lib.parent)!r})\n"
                           + script], capture_output=True, text=True, check=True)
    import json

    got = json.loads(done.stdout)
    assert got["simulate_static"] == ("servelab.analytic.batching.simulate_static is not available while grading: "
                                      "the grader compares your code with it")
    assert "not available" in got["naive_continuous"] and "not available" in got["expected_max"]
    assert got["pmf_mean"] == "ran" and got["geometric_pmf"] == "ran"  # helpers the exercises may use


def test_the_grading_library_holds_no_reference_code_to_read_and_run(tmp_path):
    import ast

    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path, CHAPTER.references)
    original = (ROOT / "lib" / "servelab" / "analytic" / "batching.py").read_text()
    copy = (lib / "analytic" / "batching.py").read_text()
    defs = {n.name: n for n in ast.parse(original).body if isinstance(n, ast.FunctionDef)}
    for ref in CHAPTER.references:
        body = defs[ref.split(":")[1]].body
        code = "".join(ast.get_source_segment(original, stmt) for stmt in body[1:] or body)  # past the docstring
        assert code not in copy, ref
    # the route a learner would take: run the library's source text in a namespace of their own
    ns: dict = {"__name__": "mine"}
    exec(compile(copy, "batching.py", "exec"), ns)
    with pytest.raises(RuntimeError, match="not available while grading"):
        ns["simulate_static"]([5, 1], 2)
    assert ns["pmf_mean"]([0.5, 0.5]) == 1.5


def test_verdicts_need_no_asserts():
    script = textwrap.dedent(f"""
        from servelab_autograder.judge import verdicts
        from servelab_autograder.judge.checks import ch01 as table
        P = verdicts.Pitfalls(table.CHAPTER, {str(ROOT)!r})
        v = verdicts.grade_namespace(table.CHAPTER, dict(P.namespace("static_sum_of_lengths")), 3, pitfalls=P)
        print(sorted(c for c, x in v.items() if not x.passed))
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['test_simulate_static']", out.stdout + out.stderr


def test_probe_answers_are_plain_data_only():
    rng = random.Random(5)
    ns = solution()
    req = verdicts.request(CHAPTER, "test_simulate_continuous", rng.randrange(10**6))
    assert [c["name"] for c in req["calls"]] == ["simulate_continuous", "simulate_static"]
    from servelab_autograder.exercises import probe

    reply = probe.answer(req, ns)
    first = reply["calls"][0]["results"][0]
    assert set(first) == {"ok", "after"} and plain.decode(first["ok"]) == (200, [20, 200, 70, 100])


def test_the_visible_drill_cell_names_the_drills_not_answered_yet():
    ns = solution()
    for name in ("drill_1", "drill_4"):
        del ns[name]
    with pytest.raises(AssertionError, match=r"not answered yet: drill_1, drill_4 \(assign a number"):
        exec(NB.source("test_drills"), ns)


def test_the_new_drills_name_a_known_wrong_answer():
    n = table.V["drill_5"].numbers("")                 # the workbook's own numbers
    ns = {**solution(), "drill_5": batching.simulate_static(table._uniform(n), n.batch)[0]}
    assert "sort the lengths first" in grade(ns)["test_drills"].message
    inverted = solution("drills_gain_inverted")["drill_4"]
    assert "not its inverse" in grade({**solution(), "drill_4": inverted})["test_drills"].message


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question 5" not in text
    messages = [p.message for p in PATCHES] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower()]


def test_visible_edge_cases_name_the_case_when_the_function_raises():
    """An answer that raises on an empty list (max([])) fails the visible test with the message make check gives,
    which names the case and what was expected, not with a bare ValueError traceback."""
    ns = solution()
    exec("def lower_bound(out_lens, B):\n    return max(max(out_lens), -(-sum(out_lens) // B))\n", ns)
    with pytest.raises(AssertionError) as info:
        exec(NB.source("test_lower_bound"), ns)
    assert "lower_bound(out_lens=[], B=3)" in str(info.value) and "ValueError" in str(info.value)
    for cell in ("test_simulate_static", "test_utilization", "test_lower_bound"):
        assert "_grade.call(" in NB.source(cell), cell


def test_the_visible_lower_bound_test_states_cases_not_the_formula():
    source = NB.source("test_lower_bound")
    assert "sum(" not in source and "//" not in source and "max(max(" not in source
