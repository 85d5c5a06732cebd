"""Unit-level proof that chapter 01's grading works.

The reference solutions (the solution cells of the source notebook) pass every check and every test cell;
each known-wrong submission in autograder/known_wrong/ch01_continuous_batching/ fails its check with the
pitfall's message, and, run cell by cell like nbgrader would, loses exactly the test cells it lists.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from grading_harness import Notebook, load_module, python_source

from servelab import batching
from servelab_autograder import ch01

NB = Notebook("ch01_continuous_batching")
KNOWN_WRONG = NB.known_wrong_dir

# test cell grade_id -> how its hidden block grades a namespace
HELPERS = {
    "test_simulate_static": lambda ns: ch01.check_simulate_static(ns["simulate_static"]),
    "test_simulate_continuous": lambda ns: ch01.check_simulate_continuous(ns["simulate_continuous"]),
    "test_utilization": lambda ns: ch01.check_utilization(ns["utilization"]),
    "test_lower_bound": lambda ns: ch01.check_lower_bound(ns["lower_bound"]),
    "test_simulate_continuous_arrivals": lambda ns: ch01.check_simulate_continuous_arrivals(
        ns["simulate_continuous_arrivals"]),
    "test_expected_max": lambda ns: ch01.check_expected_max(ns["expected_max"]),
    "test_drills": lambda ns: ch01.check_drills(ns),
}

LESSON_ASSERTS = [
    "assert simulate_static(lens, 2) == (250, [20, 200, 250, 230])",
    "assert simulate_continuous(lens, 2) == (200, [20, 200, 70, 100])",
    "assert sum(lens) / (2 * 250) == 0.6 and sum(lens) / (2 * 200) == 0.75",
    "assert simulate_static([5, 1, 1, 1], 2) == (6, [5, 1, 6, 6])",
    "assert simulate_continuous([5, 1, 1, 1], 2) == (5, [5, 1, 2, 3])",
    "rng = random.Random(0)",
    "for _ in range(300):",
    "lens = [rng.randint(1, 30) for _ in range(rng.randint(1, 15))]",
    "B = rng.randint(1, 6)",
    "got = simulate_continuous(lens, B)",
    "assert got == naive_continuous(lens, B)",
    "assert max(max(lens), -(-sum(lens) // B)) <= got[0] <= simulate_static(lens, B)[0]",
]


def _solution_ids() -> list[str]:
    return [c.meta.get("grade_id") for c in NB.cells if c.meta.get("solution")]


def _test_cells() -> list:
    return [c for c in NB.cells if c.meta.get("grade")]


def _visible(source: str) -> str:
    return source.split("### BEGIN HIDDEN TESTS")[0]


def _hidden(source: str) -> str:
    match = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, re.S)
    assert match, "a test cell without a hidden block"
    return match.group(1)


def _namespace(replace: dict[str, str] | None = None) -> dict:
    """The notebook's imports (setup_1) plus every solution cell, with ``replace`` applied by grade_id."""
    replace = replace or {}
    ns: dict = {"__name__": "__ch01_notebook__"}
    setup = [c for c in NB.cells if c.meta.get("grade_id") == "setup_1"]
    assert setup, "the notebook lost its setup_1 cell"
    exec(compile(python_source(setup[0].source), "setup_1", "exec"), ns)
    for cell in NB.cells:
        if cell.meta.get("solution"):
            gid = cell.meta.get("grade_id")
            exec(compile(replace.get(gid, cell.source), gid, "exec"), ns)
    return ns


def _run_test_cells(ns: dict) -> dict[str, str]:
    """Run every test cell in order like an autograder would; grade_id -> failure text for the failures."""
    failures = {}
    for cell in _test_cells():
        gid = cell.meta.get("grade_id")
        try:
            exec(compile(cell.source, gid, "exec"), ns)
        except Exception as e:  # noqa: BLE001 - any exception loses the cell's points
            failures[gid] = f"{type(e).__name__}: {e}"
    return failures


KNOWN_WRONG_FILES = sorted(KNOWN_WRONG.glob("*.py"))


def test_notebook_layout():
    ids = _solution_ids()
    assert ids == ["simulate_static", "simulate_continuous", "utilization", "lower_bound",
                   "simulate_continuous_arrivals", "expected_max", "drills"]
    assert [c.meta.get("grade_id") for c in _test_cells()] == [f"test_{i}" for i in ids]
    assert set(HELPERS) == {c.meta.get("grade_id") for c in _test_cells()}


def test_every_lesson_assert_is_visible_in_a_test_cell():
    visible = "\n".join(_visible(c.source) for c in _test_cells())
    for line in LESSON_ASSERTS:
        assert line in visible, f"lesson line missing from the visible tests: {line}"


def test_reference_solutions_pass_every_check():
    ns = _namespace()
    for helper in HELPERS.values():
        helper(ns)  # raises AssertionError on failure


def test_reference_solutions_pass_every_test_cell():
    assert _run_test_cells(_namespace()) == {}


def test_hidden_blocks_call_the_helpers():
    ns = _namespace()
    for cell in _test_cells():
        hidden = _hidden(cell.source)
        assert "from servelab_autograder import ch01 as _grade" in hidden
        exec(compile(hidden, cell.meta.get("grade_id"), "exec"), ns)


def test_there_are_enough_known_wrong_submissions():
    assert len(KNOWN_WRONG_FILES) >= 6
    covered = {gid for path in KNOWN_WRONG_FILES for gid in load_module(path).REPLACE}
    assert covered == set(_solution_ids()), "every exercise has at least one known-wrong submission"


@pytest.mark.parametrize("path", KNOWN_WRONG_FILES, ids=lambda p: p.stem)
def test_known_wrong_format(path):
    module = load_module(path)
    doc = (module.__doc__ or "").strip()
    assert doc and "\n" not in doc, "the docstring is one line naming the pitfall"
    assert module.REPLACE and set(module.REPLACE) <= set(_solution_ids())
    assert module.FAILS and set(module.FAILS) <= set(HELPERS)
    assert isinstance(module.MESSAGE, str) and module.MESSAGE
    pitfalls = [c.source for c in NB.cells if c.kind == "markdown" and "Common pitfalls" in c.source]
    assert len(pitfalls) == 1
    assert module.MESSAGE.lower() in pitfalls[0].replace("`", "").lower(), "the chapter names the pitfall"
    assert any(module.MESSAGE in text for text in ch01.PITFALLS.values()), "the helpers name the pitfall"


@pytest.mark.parametrize("path", KNOWN_WRONG_FILES, ids=lambda p: p.stem)
def test_known_wrong_is_caught_by_its_helper(path):
    module = load_module(path)
    ns = _namespace(module.REPLACE)
    for gid in module.REPLACE:
        with pytest.raises(AssertionError) as info:
            HELPERS[f"test_{gid}"](ns)
        assert module.MESSAGE in str(info.value).splitlines()[0], str(info.value)


@pytest.mark.parametrize("path", KNOWN_WRONG_FILES, ids=lambda p: p.stem)
def test_known_wrong_loses_exactly_its_test_cells(path):
    module = load_module(path)
    failures = _run_test_cells(_namespace(module.REPLACE))
    assert sorted(failures) == sorted(module.FAILS), failures
    for gid, text in failures.items():
        assert text.startswith("AssertionError"), (gid, text)
        assert module.MESSAGE in text.splitlines()[0], (gid, text)  # the grader reports the first line


def test_messages_show_input_got_and_expected():
    ns = _namespace(load_module(KNOWN_WRONG / "static_no_wait.py").REPLACE)
    with pytest.raises(AssertionError) as info:
        ch01.check_simulate_static(ns["simulate_static"])
    text = str(info.value)
    assert "simulate_static(out_lens=[20, 200, 50, 30], B=2)" in text
    assert "returned (230, [20, 200, 250, 230])" in text
    assert "expected (250, [20, 200, 250, 230])" in text
    assert "Pitfall: static batch does not wait for its longest request" in text


def test_diagnose_says_correct_when_correct():
    ns = _namespace()
    assert ch01.diagnose(ns["simulate_static"], [5, 1, 1, 1], 2).endswith("is correct on this input")
    assert "expected (5, [5, 1, 2, 3])" in ch01.diagnose(ns["simulate_static"], [5, 1, 1, 1], 2,
                                                         name="simulate_continuous")


def test_the_reference_itself_is_rejected():
    with pytest.raises(AssertionError, match="itself"):
        ch01.check_simulate_static(batching.simulate_static)
    ns = {"batching": batching}
    exec("def simulate_continuous(out_lens, B):\n    return batching.simulate_continuous(out_lens, B)\n", ns)
    with pytest.raises(AssertionError, match="calls the reference"):
        ch01.check_simulate_continuous(ns["simulate_continuous"])
    ns = {"ref": batching.naive_continuous}
    exec("def simulate_continuous(out_lens, B):\n    return ref(out_lens, B)\n", ns)
    with pytest.raises(AssertionError, match="calls the reference"):
        ch01.check_simulate_continuous(ns["simulate_continuous"])
    ns = {"servelab": sys.modules["servelab"]}
    exec("def lower_bound(out_lens, B):\n    return servelab.batching.lower_bound(out_lens, B)\n", ns)
    with pytest.raises(AssertionError, match="calls the reference"):
        ch01.check_lower_bound(ns["lower_bound"])


def test_small_reference_helpers_are_allowed():
    ns = {"batching": batching}
    exec("def expected_max(pmf, B):\n"
         "    mean = batching.pmf_mean(pmf)  # allowed, if pointless\n"
         "    cdfs = [sum(pmf[:k]) for k in range(len(pmf))]\n"
         "    return sum(1 - F**B for F in cdfs) + 0 * mean\n", ns)
    ch01.check_expected_max(ns["expected_max"])


def test_results_are_converted_not_trusted():
    class Sneaky:  # equal to everything
        def __eq__(self, other):
            return True

    ns: dict = {"Sneaky": Sneaky}
    exec("def simulate_static(out_lens, B):\n    return Sneaky()\n", ns)
    with pytest.raises(AssertionError, match="expected a tuple"):
        ch01.check_simulate_static(ns["simulate_static"])
    exec("def lower_bound(out_lens, B):\n    return max(max(out_lens), sum(out_lens) / B)\n", ns)
    with pytest.raises(AssertionError, match="whole number"):
        ch01.check_lower_bound(ns["lower_bound"])


def test_learner_exceptions_and_stubs_are_reported():
    ns: dict = {}
    exec("def utilization(out_lens, B, total_steps):\n    raise NotImplementedError()\n", ns)
    with pytest.raises(AssertionError, match="NotImplementedError"):
        ch01.check_utilization(ns["utilization"])
    exec("def lower_bound(out_lens, B):\n    out_lens.sort()\n    return max(out_lens)\n", ns)
    with pytest.raises(AssertionError, match="changed its input"):
        ch01.check_lower_bound(ns["lower_bound"])


def test_drills_accept_a_sequence_and_name_missing_answers():
    ns = _namespace()
    ch01.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"]])
    with pytest.raises(AssertionError, match="drill_3 is not defined"):
        ch01.check_drills({"drill_1": ns["drill_1"], "drill_2": ns["drill_2"]})
    with pytest.raises(AssertionError, match="expected a number"):
        ch01.check_drills({"drill_1": "300", "drill_2": ns["drill_2"], "drill_3": ns["drill_3"]})


def test_checks_work_under_python_O():
    script = textwrap.dedent("""
        from servelab_autograder import ch01
        def simulate_static(out_lens, B):
            return sum(out_lens), list(out_lens)
        try:
            ch01.check_simulate_static(simulate_static)
        except AssertionError as e:
            print("caught:", e)
        else:
            print("not caught")
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("caught:"), out.stdout + out.stderr
