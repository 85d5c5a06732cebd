"""Chapter 03's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast: the solution notebook's JSON is parsed and its code cells other than the test cells are
executed in order into one namespace, as the kernel would (IPython magics dropped, matplotlib on Agg, figures
not displayed), with a known-wrong module's REPLACE sources swapped in for the solution cells they name. Then the
autograder's check helpers and the notebook's test cells (visible asserts and hidden block) run on that
namespace. nbgrader grades the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import math
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from servelab import costmodel  # noqa: E402
from servelab.costmodel import H100_SXM, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B  # noqa: E402
from servelab.simulator import MixedBudget, Requests, simulate  # noqa: E402
from servelab_autograder import ch03  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "ch03_token_budget"
NOTEBOOK = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
KNOWN_WRONG = ROOT / "autograder" / "known_wrong" / ASSIGNMENT
KNOWN_WRONG_NAMES = sorted(p.stem for p in KNOWN_WRONG.glob("*.py") if not p.stem.startswith("_"))
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


@cache
def _cells() -> tuple[tuple[str, dict, str, tuple], ...]:
    """(cell_type, nbgrader metadata, source, tags) for every cell, in order."""
    nb = json.loads(NOTEBOOK.read_text())
    return tuple((c["cell_type"], c.get("metadata", {}).get("nbgrader", {}), "".join(c["source"]),
                  tuple(c.get("metadata", {}).get("tags", ()))) for c in nb["cells"])


def _code_cells():
    return [(meta, src) for kind, meta, src, _ in _cells() if kind == "code"]


def _python(src: str) -> str:
    """A cell's source without IPython magics (the only ones here are line magics like %matplotlib)."""
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade"))


@cache
def _cells_the_tests_read() -> frozenset[str]:
    """grade_ids of the non-test cells whose names the test cells read, directly or through other cells.
    The rest (the simulations and figures of the walkthrough) cannot change a grade, so the unit tests
    skip them; the notebook itself runs them all (nbval, execute)."""
    needed = set().union(*(_names(src)[1] for meta, src in _code_cells() if _is_test(meta)))
    keep = set()
    for meta, src in reversed(_code_cells()):
        bound, used = _names(src)
        if not _is_test(meta) and (bound & needed or meta.get("solution")):
            keep.add(meta["grade_id"])
            needed |= used
    return frozenset(keep)


def _namespace(replace: dict[str, str] | None = None) -> dict:
    """Execute the code cells the test cells depend on, in order, with solution cells replaced. A cell that
    raises (a setup cell running a wrong submission) stops nothing, as in nbgrader."""
    replace = replace or {}
    unknown = set(replace) - {meta.get("grade_id") for meta, _ in _code_cells() if meta.get("solution")}
    assert not unknown, f"REPLACE names cells that are not solution cells: {sorted(unknown)}"
    ns: dict = {"__name__": "__main__"}
    for meta, src in _code_cells():
        if _is_test(meta) or meta.get("grade_id") not in _cells_the_tests_read():
            continue
        src = replace.get(meta.get("grade_id"), src)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(_python(src), f"<cell {meta.get('grade_id')}>", "exec"), ns)
            except Exception:  # noqa: BLE001 - only the solution must run cleanly, checked separately
                if not replace:
                    raise
        if "show" in ns:           # figures: drawn, not displayed
            ns["show"] = lambda fig: matplotlib.pyplot.close(fig)
    return ns


def _run_test_cell(grade_id: str, ns: dict) -> str | None:
    """Run a test cell (visible asserts and hidden block) in ns; None if it passes, else its message."""
    src = next(src for meta, src in _code_cells() if meta.get("grade_id") == grade_id)
    try:
        exec(compile(_python(src), f"<cell {grade_id}>", "exec"), ns)
    except AssertionError as e:
        return f"AssertionError: {e}"
    except Exception as e:  # noqa: BLE001 - any other error also fails the cell, but without a pitfall
        return f"{type(e).__name__} (not an AssertionError): {e}"
    return None


def _names(src: str) -> tuple[set[str], set[str]]:
    """Top-level names a cell binds, and every name it reads."""
    tree = ast.parse(_python(src))
    bound = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.For):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    # names read but never stored anywhere in the cell (loop and comprehension variables, arguments and local
    # helpers do not come from other cells)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    stored |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    stored |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - stored
    return bound, used


def _affected_tests(replaced: set[str]) -> list[str]:
    """Test cells whose outcome can change when the given solution cells are replaced (by name flow)."""
    changed: set[str] = set()
    tests = []
    for meta, src in _code_cells():
        bound, used = _names(src)
        if _is_test(meta):
            if used & changed:
                tests.append(meta["grade_id"])
        elif meta.get("grade_id") in replaced or used & changed:
            changed |= bound
    return tests


@cache
def _wrong_namespace(name: str) -> dict:
    return _namespace(_known_wrong(name).REPLACE)


def _known_wrong(name: str):
    spec = importlib.util.spec_from_file_location(f"known_wrong_{name}", KNOWN_WRONG / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------------
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["metadata"]["kernelspec"] == {"name": "servelab", "display_name": "Python (servelab)",
                                            "language": "python"}
    solutions = [meta["grade_id"] for meta, _ in _code_cells() if meta.get("solution")]
    tests = {meta["grade_id"]: meta for meta, _ in _code_cells() if _is_test(meta)}
    assert solutions == [*EXERCISES, "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_kv_bytes_per_token": 1, "test_step_time": 3, "test_schedule": 3, "test_max_chunk": 2,
        "test_max_backlog": 2, "test_drills": 5}
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader")
        tags = c.get("metadata", {}).get("tags", [])
        if c["cell_type"] == "markdown":
            assert meta is None
            continue
        assert meta is not None and meta["schema_version"] == 3
        source = "".join(c["source"])
        if meta.get("solution"):
            assert meta == {"grade": False, "solution": True, "locked": False, "grade_id": meta["grade_id"],
                            "schema_version": 3}
            assert "### BEGIN SOLUTION" in source and "### END SOLUTION" in source
            # only the drills run code at top level, so only their release stub raises at once
            assert tags == (["raises-exception"] if meta["grade_id"] == "drills" else [])
            if meta["grade_id"] != "drills":
                assert c["outputs"] == [], meta["grade_id"]
        elif meta.get("grade"):
            assert tags == ["raises-exception"]
            assert meta["locked"] and not meta["solution"]
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
            assert c["outputs"] == [], f"{meta['grade_id']} prints nothing when it passes"
        else:
            assert meta["locked"] and re.fullmatch(r"setup_\d+", meta["grade_id"])


def test_setup_cells_that_run_learner_code_may_raise():
    """A setup cell that calls an exercise's function raises at once in the release (the stub): it must be
    tagged raises-exception, and the others must not be."""
    for kind, meta, src, tags in _cells():
        if kind != "code" or meta.get("solution") or _is_test(meta):
            continue
        loads = {n.id for n in ast.walk(ast.parse(_python(src))) if isinstance(n, ast.Name)
                 and isinstance(n.ctx, ast.Load)}
        runs_learner_code = bool(loads & {*EXERCISES, "YourMixedBudget"})
        assert ("raises-exception" in tags) == runs_learner_code, meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    nb = json.loads(NOTEBOOK.read_text())
    figures = 0
    for c in nb["cells"]:
        for out in c.get("outputs", []):
            assert out["output_type"] in ("stream", "execute_result", "display_data"), out["output_type"]
            if out["output_type"] == "stream":
                assert out["name"] == "stdout"
                text = "".join(out["text"])
            else:
                figures += "image/png" in out["data"]
                text = "".join("".join(v) for k, v in out["data"].items() if k != "image/png")
            assert "<Figure" not in text and not re.search(r"0x[0-9a-f]{6,}", text)
            assert "wall" not in text, "no wall-clock timings in saved outputs"
    assert figures == 4     # why it matters, the batch sweep, the 128K timeline, the CDFs


def test_the_assumptions_are_stated():
    text = " ".join(src for kind, _, src, _ in _cells() if kind == "markdown")
    for needle in ("LLaMA-2-7B", "Llama-3-8B", "Llama-3.1-8B", "H100 SXM", "H200", "989 TFLOP/s", "3.35 TB/s",
                   "4.8 TB/s", "0.5 ms", "lower bound", "integer **steps**", "float seconds"):
        assert needle in text, needle


# --------------------------------------------------------------------------------------------------------
# the solution passes


@cache
def _solution_namespace() -> dict:
    return _namespace()


@pytest.mark.parametrize("test_cell", sorted(HELPERS))
def test_solution_passes_every_check(test_cell):
    HELPERS[test_cell](_solution_namespace())


def test_solution_passes_every_test_cell():
    ns = dict(_solution_namespace())
    failures = {g: msg for g in HELPERS if (msg := _run_test_cell(g, ns))}
    assert not failures, failures


# --------------------------------------------------------------------------------------------------------
# every known-wrong submission fails, with its pitfall's name


def test_there_is_a_known_wrong_for_every_pitfall_the_chapter_names():
    assert len(KNOWN_WRONG_NAMES) >= 6
    pitfalls_md = next(src for kind, _, src, _ in _cells() if kind == "markdown" and "## Common pitfalls" in src)
    plain_md = pitfalls_md.replace("`", "").replace("*", "").lower()
    bullets = [b for b in plain_md.split("\n- ")[1:]]
    messages = []
    for name in KNOWN_WRONG_NAMES:
        module = _known_wrong(name)
        assert module.__doc__ and module.REPLACE and module.FAILS and module.MESSAGE, name
        assert set(module.FAILS) <= set(HELPERS), name
        # each MESSAGE is the head of one of the autograder's pitfall texts, named in "Common pitfalls"
        assert any(text.startswith(module.MESSAGE) for text in ch03.PITFALLS.values()), name
        phrase = module.MESSAGE.removeprefix("Pitfall: ").rstrip(".").lower()
        assert phrase in plain_md, f"{name}: '{phrase}' is not in the Common pitfalls list"
        messages.append(phrase)
    assert len(set(messages)) == len(messages), "two known-wrong submissions test the same pitfall"
    # and the other way round: every bullet of the list has its known-wrong submission
    for bullet in bullets:
        assert any(m in bullet for m in messages), f"no known-wrong submission for: {bullet[:80]}"


@pytest.mark.parametrize("name", KNOWN_WRONG_NAMES)
def test_known_wrong_fails_its_checks_with_its_message(name):
    module = _known_wrong(name)
    ns = dict(_wrong_namespace(name))
    for test_cell in module.FAILS:
        with pytest.raises(AssertionError) as info:
            HELPERS[test_cell](ns)
        assert str(info.value).startswith(module.MESSAGE), f"{test_cell}:\n{info.value}"


@pytest.mark.parametrize("name", KNOWN_WRONG_NAMES)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    module = _known_wrong(name)
    affected = _affected_tests(set(module.REPLACE))
    assert set(module.FAILS) <= set(affected), f"FAILS names cells that cannot depend on {sorted(module.REPLACE)}"
    ns = dict(_wrong_namespace(name))
    for test_cell in affected:
        msg = _run_test_cell(test_cell, ns)
        if test_cell in module.FAILS:
            assert msg is not None, f"{test_cell} passed"
            # the grader reports a failed cell by the first line of its error, cut to 160 characters
            first_line = msg.splitlines()[0][:160]
            assert msg.startswith("AssertionError") and module.MESSAGE in first_line, f"{test_cell}:\n{msg}"
        else:
            assert msg is None, f"{test_cell} should pass:\n{msg}"


def test_the_unit_tests_run_the_cells_grading_needs():
    assert _cells_the_tests_read() == {"setup_1", *EXERCISES, "drills"}


def test_each_exercise_only_affects_its_own_test_cell():
    for exercise in EXERCISES:
        assert _affected_tests({exercise}) == [f"test_{exercise}"], exercise
    assert _affected_tests({"drills"}) == ["test_drills"]


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
    ns = _solution_namespace()
    msg = ch03.diagnose("max_chunk", lambda *a, **k: 7, LLAMA3_8B, H100_SXM, 0.030, [1024] * 32)
    assert "max_chunk(Llama-3-8B, H100 SXM, tpot_target_s=0.03, decodes=[1024] * 32" in msg
    assert "returned 7; expected 1980" in msg and "with a chunk of 1980 the step takes" in msg
    msg = ch03.diagnose("step_time", lambda *a, **k: 1.0, LLAMA2_7B, H100_SXM, (), [0])
    assert "returned 1000 ms; expected 4.52" in msg and "memory-bound" in msg
    assert "agrees with the reference" in ch03.diagnose("max_backlog", ns["max_backlog"], 2048, 48, 0.03, 1.0)
    assert ch03.diagnose("nope", ns["max_backlog"]) == "no check named 'nope'"


def test_schedule_failures_name_the_step_and_the_state():
    wrong = _known_wrong("schedule_budget_overrun").REPLACE["schedule"]
    ns = dict(_solution_namespace())
    exec(wrong, ns)
    with pytest.raises(AssertionError) as info:
        ch03.check_schedule(ns["schedule"])
    msg = str(info.value)
    assert msg.startswith("Pitfall: the step overran the token budget")
    assert "At step" in msg and "three decoders and a long prompt" in msg
    assert "you scheduled:" in msg and "MixedBudget scheduled:" in msg and "(19 tokens)" in msg


def test_results_are_converted_not_trusted():
    ns = _solution_namespace()
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
    ns = _solution_namespace()
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
    wrong = _known_wrong("backlog_counts_decodes").REPLACE["max_backlog"]
    right = next(src for meta, src in _code_cells() if meta.get("grade_id") == "max_backlog")
    script = textwrap.dedent(f"""
        import math
        from servelab_autograder import ch03
        ns = {{"math": math}}
        exec({right!r}, ns)
        ch03.check_max_backlog(ns["max_backlog"])
        exec({wrong!r}, ns)
        try:
            ch03.check_max_backlog(ns["max_backlog"])
        except AssertionError as e:
            print("caught:", str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "caught: Pitfall: the decodes' tokens are not prefill throughput" in out.stdout
