"""Chapter 02's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast: the solution notebook's JSON is parsed and its code cells other than the test cells are
executed in order into one namespace, as the kernel would (IPython magics dropped, matplotlib on Agg), with a
known-wrong module's REPLACE sources swapped in for the solution cells they name. Then the autograder's check
helpers and the notebook's test cells (visible asserts and hidden block) run on that namespace. nbgrader grades
the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from servelab_autograder import ch02  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "ch02_nanovllm_scheduler"
NOTEBOOK = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
KNOWN_WRONG = ROOT / "autograder" / "known_wrong" / ASSIGNMENT
KNOWN_WRONG_NAMES = sorted(p.stem for p in KNOWN_WRONG.glob("*.py") if not p.stem.startswith("_"))

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_needs_new_block": lambda ns: ch02.check_needs_new_block(ns["needs_new_block"]),
    "test_preempt": lambda ns: ch02.check_preempt(ns["preempt"]),
    "test_schedule": lambda ns: ch02.check_schedule(ns["schedule"]),
    "test_postprocess": lambda ns: ch02.check_postprocess(ns["postprocess"]),
    "test_lesson_step2": lambda ns: ch02.check_lesson_step2(ns["Scheduler"]),
    "test_can_allocate": lambda ns: ch02.check_can_allocate(ns["can_allocate"]),
    "test_drills": lambda ns: ch02.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"]]),
}


# --------------------------------------------------------------------------------------------------------
# the notebook, cell by cell


@cache
def _cells() -> tuple[tuple[str, dict, str], ...]:
    """(cell_type, nbgrader metadata, source) for every cell, in order."""
    nb = json.loads(NOTEBOOK.read_text())
    return tuple((c["cell_type"], c.get("metadata", {}).get("nbgrader", {}), "".join(c["source"]))
                 for c in nb["cells"])


def _code_cells():
    return [(meta, src) for kind, meta, src in _cells() if kind == "code"]


def _python(src: str) -> str:
    """A cell's source without IPython magics (the only ones here are line magics like %matplotlib)."""
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade"))


def _namespace(replace: dict[str, str] | None = None) -> dict:
    """Execute every code cell except the test cells, in order, with solution cells replaced."""
    replace = replace or {}
    unknown = set(replace) - {meta.get("grade_id") for meta, _ in _code_cells() if meta.get("solution")}
    assert not unknown, f"REPLACE names cells that are not solution cells: {sorted(unknown)}"
    ns: dict = {"__name__": "__main__"}
    for meta, src in _code_cells():
        if _is_test(meta):
            continue
        src = replace.get(meta.get("grade_id"), src)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(_python(src), f"<cell {meta.get('grade_id')}>", "exec"), ns)
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
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
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
    assert solutions == ["needs_new_block", "preempt", "schedule", "postprocess", "can_allocate", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_needs_new_block": 1, "test_preempt": 1, "test_schedule": 3, "test_postprocess": 2,
        "test_lesson_step2": 2, "test_can_allocate": 2, "test_drills": 3}
    for c in nb["cells"]:
        meta = c.get("metadata", {}).get("nbgrader")
        if c["cell_type"] == "markdown":
            assert meta is None
            continue
        assert meta is not None and meta["schema_version"] == 3
        source = "".join(c["source"])
        if meta.get("solution"):
            assert meta == {"grade": False, "solution": True, "locked": False, "grade_id": meta["grade_id"],
                            "schema_version": 3}
            assert "### BEGIN SOLUTION" in source and "### END SOLUTION" in source
        elif meta.get("grade"):
            assert c["metadata"].get("tags") == ["raises-exception"]
            assert meta["locked"] and not meta["solution"]
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            # every test cell ends with its hidden block, which calls the matching helper
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
        else:
            assert meta["locked"] and re.fullmatch(r"setup_\d+", meta["grade_id"])
        if meta.get("grade") or meta.get("solution"):
            # executed cells carry no output (a test cell prints nothing when it passes)
            assert c.get("outputs") == [], meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    nb = json.loads(NOTEBOOK.read_text())
    for c in nb["cells"]:
        for out in c.get("outputs", []):
            assert out["output_type"] in ("stream", "execute_result", "display_data"), out["output_type"]
            if out["output_type"] == "stream":
                assert out["name"] == "stdout"
                text = "".join(out["text"])
            else:
                text = "".join("".join(v) for k, v in out["data"].items() if k != "image/png")
            assert "<Figure" not in text and not re.search(r"0x[0-9a-f]{6,}", text)
            assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"


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
    assert len(KNOWN_WRONG_NAMES) >= 7
    pitfalls_md = next(src for kind, _, src in _cells() if kind == "markdown" and "## Common pitfalls" in src)
    plain_md = pitfalls_md.replace("`", "").replace("*", "").lower()
    messages = []
    for name in KNOWN_WRONG_NAMES:
        module = _known_wrong(name)
        assert module.__doc__ and module.REPLACE and module.FAILS and module.MESSAGE, name
        assert set(module.FAILS) <= set(HELPERS), name
        # each MESSAGE is the head of one of the autograder's pitfall texts, named in "Common pitfalls"
        assert any(text.startswith(module.MESSAGE) for text in ch02.PITFALLS.values()), name
        phrase = module.MESSAGE.removeprefix("Pitfall: ").rstrip(".").lower()
        assert phrase in plain_md, f"{name}: '{phrase}' is not in the Common pitfalls list"
        messages.append(module.MESSAGE)
    assert len(set(messages)) == len(messages), "two known-wrong submissions test the same pitfall"


@pytest.mark.parametrize("name", KNOWN_WRONG_NAMES)
def test_known_wrong_fails_its_checks_with_its_message(name):
    module = _known_wrong(name)
    ns = _namespace(module.REPLACE)
    for test_cell in module.FAILS:
        with pytest.raises(AssertionError) as info:
            HELPERS[test_cell](ns)
        assert module.MESSAGE in str(info.value), f"{test_cell}:\n{info.value}"


@pytest.mark.parametrize("name", KNOWN_WRONG_NAMES)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    module = _known_wrong(name)
    affected = _affected_tests(set(module.REPLACE))
    assert set(module.FAILS) <= set(affected), f"FAILS names cells that cannot depend on {sorted(module.REPLACE)}"
    ns = _namespace(module.REPLACE)
    for test_cell in affected:
        msg = _run_test_cell(test_cell, ns)
        if test_cell in module.FAILS:
            assert msg is not None, f"{test_cell} passed"
            # the grader reports a failed cell by the first line of its error, cut to 160 characters
            first_line = msg.splitlines()[0][:160]
            assert msg.startswith("AssertionError") and module.MESSAGE in first_line, f"{test_cell}:\n{msg}"
        else:
            assert msg is None, f"{test_cell} should pass:\n{msg}"


def test_dependencies_between_cells_are_what_the_chapter_says():
    assert _affected_tests({"schedule"}) == ["test_schedule", "test_lesson_step2"]
    assert _affected_tests({"preempt"}) == ["test_preempt", "test_lesson_step2"]
    assert _affected_tests({"can_allocate"}) == ["test_can_allocate"]
    assert _affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks refuse the reference and explain the drills


def _solution_source(grade_id: str) -> str:
    return next(src for meta, src in _code_cells() if meta.get("grade_id") == grade_id)


def test_calling_the_reference_is_refused():
    import servelab.scheduler as ref

    with pytest.raises(AssertionError, match="is servelab.scheduler.Scheduler.schedule itself"):
        ch02.check_schedule(ref.Scheduler.schedule)
    ns = dict(_solution_namespace())
    exec(textwrap.dedent("""
        def via_super(self):
            return super(type(self), self).schedule()

        def via_module(self, seq):
            servelab.scheduler.Scheduler.preempt(self, seq)

        def via_helper(self, seq):
            hits = len(list(self._cached_prefix(seq)))
            return hits
    """), ns)
    with pytest.raises(AssertionError, match="calls servelab.scheduler.Scheduler.schedule"):
        ch02.check_schedule(ns["via_super"])
    with pytest.raises(AssertionError, match="calls servelab.scheduler.Scheduler.preempt"):
        ch02.check_preempt(ns["via_module"])
    with pytest.raises(AssertionError, match="calls servelab.scheduler.BlockManager._cached_prefix"):
        ch02.check_can_allocate(ns["via_helper"])
    with pytest.raises(AssertionError, match="Scheduler.postprocess itself"):
        ch02.check_lesson_step2(type("S", (ns["Scheduler"],), {"postprocess": ref.Scheduler.postprocess}))


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = _solution_namespace()
    assert [ns["drill_1"], ns["drill_2"], ns["drill_3"]] == [int(q[1]()) for q in ch02.DRILLS.values()]
    with pytest.raises(AssertionError, match="prefilled again, generated tokens included"):
        ch02.check_drills([14, ns["drill_2"], ns["drill_3"]])
    with pytest.raises(AssertionError, match="Hits are whole blocks"):
        ch02.check_drills([ns["drill_1"], 1000, ns["drill_3"]])
    with pytest.raises(AssertionError, match="R2 cannot hit them"):
        ch02.check_drills({"drill_1": ns["drill_1"], "drill_2": ns["drill_2"], "drill_3": 56})
    with pytest.raises(AssertionError, match="whole number"):
        ch02.check_drills([19.5, ns["drill_2"], ns["drill_3"]])


def test_learner_errors_are_reported_in_their_terms():
    def schedule(self):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="schedule\\(\\) raised NotImplementedError: fill in the function"):
        ch02.check_schedule(schedule)

    def postprocess(self, seqs, token_ids, is_prefill):
        _solution_namespace()["postprocess"](self, seqs, token_ids, is_prefill)   # forgets to return

    with pytest.raises(AssertionError, match="must return the list of sequences that finished"):
        ch02.check_postprocess(postprocess)


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    wrong = _known_wrong("preempt_head").REPLACE["schedule"]
    script = textwrap.dedent(f"""
        from servelab.scheduler import SequenceStatus
        from servelab_autograder import ch02
        ns = {{"SequenceStatus": SequenceStatus}}
        exec({_solution_source("schedule")!r}, ns)
        ch02.check_schedule(ns["schedule"])
        exec({wrong!r}, ns)
        try:
            ch02.check_schedule(ns["schedule"])
        except AssertionError as e:
            print("caught:", str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "caught: Pitfall: preempted the head of running instead of the tail" in out.stdout
