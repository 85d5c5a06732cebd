"""Chapter 05's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast: the solution notebook's JSON is parsed and its code cells other than the test cells are
executed in order into one namespace, as the kernel would (IPython magics dropped, matplotlib on Agg), with a
known-wrong module's REPLACE sources swapped in for the solution cells they name. Then the autograder's check
helpers and the notebook's test cells (visible asserts and hidden block) run on that namespace. nbgrader grades
the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import ast
import contextlib
import heapq
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

from servelab.radix_cache import RadixCache  # noqa: E402
from servelab.radix_scheduler import RadixScheduler  # noqa: E402
from servelab_autograder import ch04, ch05  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "ch05_lock_ref_eviction"
NOTEBOOK = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
KNOWN_WRONG = ROOT / "autograder" / "known_wrong" / ASSIGNMENT
KNOWN_WRONG_NAMES = sorted(p.stem for p in KNOWN_WRONG.glob("*.py") if not p.stem.startswith("_"))

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_inc_lock_ref": lambda ns: ch05.check_inc_lock_ref(ns["inc_lock_ref"]),
    "test_dec_lock_ref": lambda ns: ch05.check_dec_lock_ref(ns["dec_lock_ref"]),
    "test_evict": lambda ns: ch05.check_evict(ns["evict"]),
    "test_cache_finished_req": lambda ns: ch05.check_cache_finished_req(ns["cache_finished_req"]),
    "test_scheduler": lambda ns: ch05.check_scheduler(ns["RadixScheduler"]),
    "test_drills": lambda ns: ch05.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"]]),
}
# the pitfalls the issue requires among this chapter's known-wrong submissions
REQUIRED = ("emptied parents not evicted in the same call", "evicting a locked node",
            "forgot to unlock on finish or preemption", "sizes double-counted")


# --------------------------------------------------------------------------------------------------------
# the notebook, cell by cell


@cache
def _cells() -> tuple[tuple[str, dict, str], ...]:
    nb = json.loads(NOTEBOOK.read_text())
    return tuple((c["cell_type"], c.get("metadata", {}).get("nbgrader", {}), "".join(c["source"]))
                 for c in nb["cells"])


def _code_cells():
    return [(meta, src) for kind, meta, src in _cells() if kind == "code"]


def _python(src: str) -> str:
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
    src = next(src for meta, src in _code_cells() if meta.get("grade_id") == grade_id)
    try:
        exec(compile(_python(src), f"<cell {grade_id}>", "exec"), ns)
    except AssertionError as e:
        return f"AssertionError: {e}"
    except Exception as e:  # noqa: BLE001 - any other error also fails the cell, but without a pitfall
        return f"{type(e).__name__} (not an AssertionError): {e}"
    return None


def _names(src: str) -> tuple[set[str], set[str]]:
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
    assert solutions == ["inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_inc_lock_ref": 1, "test_dec_lock_ref": 1, "test_evict": 3, "test_cache_finished_req": 2,
        "test_scheduler": 2, "test_drills": 3}
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
            assert c["metadata"].get("tags", []) == (["raises-exception"] if meta["grade_id"] == "drills" else [])
        elif meta.get("grade"):
            assert c["metadata"].get("tags") == ["raises-exception"]
            assert meta["locked"] and not meta["solution"]
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert "### END HIDDEN TESTS" in hidden
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
        else:
            assert meta["locked"] and re.fullmatch(r"setup_\d+", meta["grade_id"])
        if meta.get("grade") or meta.get("solution"):
            assert c.get("outputs") == [], meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    nb = json.loads(NOTEBOOK.read_text())
    pngs = 0
    for c in nb["cells"]:
        for out in c.get("outputs", []):
            assert out["output_type"] in ("stream", "execute_result", "display_data"), out["output_type"]
            if out["output_type"] == "stream":
                assert out["name"] == "stdout"
                text = "".join(out["text"])
            else:
                pngs += "image/png" in out["data"]
                text = "".join("".join(v) for k, v in out["data"].items() if k != "image/png")
            assert "<Figure" not in text and not re.search(r"0x[0-9a-f]{6,}", text)
            assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"
    assert pngs >= 1


def test_the_saved_outputs_show_the_numbers_the_markdown_quotes():
    nb = json.loads(NOTEBOOK.read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "512 tokens 40%" in text and "1024 tokens 83%" in text
    assert "evict(4) -> [12, 30, 31, 32]" in text
    assert "fcfs: admission order H0 L H1" in text and "lpm: admission order H0 H1 H2 H3 H4 L" in text


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
    assert len(KNOWN_WRONG_NAMES) >= 5
    pitfalls_md = next(src for kind, _, src in _cells() if kind == "markdown" and "## Common pitfalls" in src)
    plain_md = pitfalls_md.replace("`", "").replace("*", "").lower()
    messages = []
    for name in KNOWN_WRONG_NAMES:
        module = _known_wrong(name)
        assert module.__doc__ and module.REPLACE and module.FAILS and module.MESSAGE, name
        assert set(module.FAILS) <= set(HELPERS), name
        assert any(text.startswith(module.MESSAGE) for text in ch05.PITFALLS.values()), name
        phrase = module.MESSAGE.removeprefix("Pitfall: ").rstrip(".").lower()
        assert phrase in plain_md, f"{name}: '{phrase}' is not in the Common pitfalls list"
        messages.append(module.MESSAGE)
    assert len(set(messages)) == len(messages), "two known-wrong submissions test the same pitfall"
    lowered = [m.lower() for m in messages]
    for required in REQUIRED:
        assert any(required in m for m in lowered), f"no known-wrong submission for '{required}'"


@pytest.mark.parametrize("name", KNOWN_WRONG_NAMES)
def test_known_wrong_fails_its_checks_with_its_message(name):
    module = _known_wrong(name)
    ns = _namespace(module.REPLACE)
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
    ns = _namespace(module.REPLACE)
    for test_cell in affected:
        msg = _run_test_cell(test_cell, ns)
        if test_cell in module.FAILS:
            assert msg is not None, f"{test_cell} passed"
            first_line = msg.splitlines()[0][:160]
            assert msg.startswith("AssertionError") and module.MESSAGE in first_line, f"{test_cell}:\n{msg}"
        else:
            assert msg is None, f"{test_cell} should pass:\n{msg}"


def test_dependencies_between_cells_are_what_the_chapter_says():
    for grade_id in ("inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req"):
        assert _affected_tests({grade_id}) == [f"test_{grade_id}", "test_scheduler"]
    assert _affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks: scenarios, the reference refused, learner errors, drills


def test_cache_scenarios_cover_every_operation_and_the_scheduler_workloads_evict_and_preempt():
    cases = ch05._cache_cases(12)
    assert {op.kind for case in cases for op in case.ops} == set(ch04._OPS)
    preempted = evicted = lpm = paged = 0
    for case in ch05._sched_cases(40):
        side = ch05._SchedSide(case, RadixScheduler)
        trace_tokens = 0
        while True:
            obs = ch05._sched_step(side)
            if obs == ("done",):
                break
            assert obs[0] != "raised", obs
            trace_tokens += 1
        preempted += sum(len(r.preempted) for r in side.engine.trace)
        evicted += any(r.evictable < p.evictable and not r.is_prefill
                       for p, r in zip(side.engine.trace, side.engine.trace[1:]))
        lpm += case.policy == "lpm"
        paged += case.page_size > 1
    assert preempted >= 10 and evicted >= 10 and lpm >= 10 and paged >= 10


def test_calling_the_reference_is_refused():
    with pytest.raises(AssertionError, match="is servelab.radix_cache.RadixCache.evict itself"):
        ch05.check_evict(RadixCache.evict)
    with pytest.raises(AssertionError, match="is servelab.radix_scheduler.RadixScheduler.cache_finished_req itself"):
        ch05.check_cache_finished_req(RadixScheduler.cache_finished_req)
    ns = {}
    exec(textwrap.dedent("""
        import servelab.radix_cache
        import servelab.radix_scheduler

        def via_module(self, node):
            return servelab.radix_cache.RadixCache.inc_lock_ref(self, node)

        def hook(self, req):
            servelab.radix_scheduler.RadixScheduler.cache_finished_req(self, req)
    """), ns)
    with pytest.raises(AssertionError, match="your inc_lock_ref calls servelab.radix_cache.RadixCache.inc_lock_ref"):
        ch05.check_inc_lock_ref(ns["via_module"])
    called = "your cache_finished_req calls servelab.radix_scheduler.RadixScheduler.cache_finished_req"
    with pytest.raises(AssertionError, match=called):
        ch05.check_cache_finished_req(ns["hook"])


def test_learner_errors_and_stubs_are_reported_in_their_terms():
    def evict(self, num_tokens):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="raised NotImplementedError: fill in the function first"):
        ch05.check_evict(evict)

    def cache_finished_req(self, req):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="raised NotImplementedError: fill in the function first"):
        ch05.check_cache_finished_req(cache_finished_req)

    def leaky(self, req):                 # frees nothing and unlocks: the pool runs dry
        self.tree_cache.dec_lock_ref(req.last_node)

    with pytest.raises(AssertionError, match="differs from the reference at step"):
        ch05.check_cache_finished_req(leaky)


def test_an_eviction_of_a_locked_node_is_named_even_when_the_code_differs():
    """Not the known-wrong's code: all leaves, locked or not, from a walk of the tree."""
    def evict(self, num_tokens):
        if num_tokens < 0:
            raise ValueError("negative")
        leaves, stack = [], [self.root_node]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if not node.children and node is not self.root_node:
                leaves.append(node)
        heap = [(n.last_access_time, n.id, n) for n in leaves]
        heapq.heapify(heap)
        freed = []
        while len(freed) < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            parent = x.parent
            self.token_to_kv_pool_allocator.free(list(x.value))
            freed.extend(x.value)
            self._delete_leaf(x)
            if not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access_time, parent.id, parent))
        return freed

    with pytest.raises(AssertionError) as info:
        ch05.check_evict(evict)
    assert str(info.value).startswith("Pitfall: evicting a locked node")


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = _solution_namespace()
    answers = [ns["drill_1"], ns["drill_2"], ns["drill_3"]]
    assert answers == [int(q[1]()) for q in ch05.DRILLS.values()] == [27, 370, 30]
    with pytest.raises(AssertionError, match="That is first come, first served"):
        ch05.check_drills([3, answers[1], answers[2]])
    with pytest.raises(AssertionError, match="Unlocked tokens in the tree are room too"):
        ch05.check_drills([answers[0], 170, answers[2]])
    with pytest.raises(AssertionError, match="evict frees whole nodes"):
        ch05.check_drills({"drill_1": answers[0], "drill_2": answers[1], "drill_3": 25})


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    solution = next(src for meta, src in _code_cells() if meta.get("grade_id") == "cache_finished_req")
    wrong = _known_wrong("finish_no_unlock").REPLACE["cache_finished_req"]
    script = textwrap.dedent(f"""
        from servelab_autograder import ch05
        ns = {{}}
        exec({solution!r}, ns)
        ch05.check_cache_finished_req(ns["cache_finished_req"])
        exec({wrong!r}, ns)
        try:
            ch05.check_cache_finished_req(ns["cache_finished_req"])
        except AssertionError as e:
            print("caught:", str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "caught: Pitfall: forgot to unlock on finish or preemption" in out.stdout
