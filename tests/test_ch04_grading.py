"""Chapter 04's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast, on the solution notebook run cell by cell (tests/grading_harness.py; matplotlib on Agg);
nbgrader grades the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import re
import textwrap

import matplotlib
import pytest
from grading_harness import Notebook, caught_under_python_O

matplotlib.use("Agg")

from servelab.radix_cache import RadixCache  # noqa: E402
from servelab_autograder import ch04  # noqa: E402

NB = Notebook("ch04_radix_cache")

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_child_key": lambda ns: ch04.check_child_key(ns["child_key"]),
    "test_match_len": lambda ns: ch04.check_match_len(ns["_match_len"]),
    "test_split_node": lambda ns: ch04.check_split_node(ns["_split_node"]),
    "test_match_prefix": lambda ns: ch04.check_match_prefix(ns["match_prefix"]),
    "test_insert": lambda ns: ch04.check_insert(ns["insert"]),
    "test_radix_cache": lambda ns: ch04.check_radix_cache(ns["RadixCache"]),
    "test_drills": lambda ns: ch04.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"]]),
}
# the pitfalls the issue requires among this chapter's known-wrong submissions
REQUIRED = ("no split when a match ends mid-edge", "lock_ref not copied on a split", "sizes double-counted",
            "page-size keys compared by first token only")


# --------------------------------------------------------------------------------------------------------
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    solutions = NB.solution_ids()
    tests = NB.test_cells()
    assert solutions == ["child_key", "match_len", "split_node", "match_prefix", "insert", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_child_key": 1, "test_match_len": 1, "test_split_node": 2, "test_match_prefix": 3, "test_insert": 3,
        "test_radix_cache": 2, "test_drills": 3}
    for c, meta, source in NB.conventional_code_cells():
        if meta.get("solution"):
            assert c["metadata"].get("tags", []) == (["raises-exception"] if meta["grade_id"] == "drills" else [])
        elif meta.get("grade"):
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert "### END HIDDEN TESTS" in hidden
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
        if meta.get("grade") or meta.get("solution"):
            assert c.get("outputs") == [], meta["grade_id"]


def test_saved_outputs_are_deterministic_text_and_png_only():
    pngs = 0
    for text, png in NB.saved_outputs():
        pngs += png
        assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"
    assert pngs >= 1


def test_the_lesson_figures_are_in_the_saved_outputs():
    nb = NB.read()
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "198,000 from the cache" in text and "177,408 from the cache" in text
    assert "KV of one copy of the 2000-token prompt: 1,000 MiB" in text


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
    NB.assert_a_known_wrong_per_pitfall(HELPERS, ch04.PITFALLS, at_least=5, required=REQUIRED)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_fails_its_checks_with_its_message(name):
    NB.assert_known_wrong_fails_its_checks(name, HELPERS)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    NB.assert_known_wrong_loses_exactly_the_points_of_fails(name)


def test_dependencies_between_cells_are_what_the_chapter_says():
    for grade_id, test in [("child_key", "test_child_key"), ("match_len", "test_match_len"),
                           ("split_node", "test_split_node"), ("match_prefix", "test_match_prefix"),
                           ("insert", "test_insert")]:
        assert NB.affected_tests({grade_id}) == [test, "test_radix_cache"]
    assert NB.affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks: the replay itself, the reference refused, learner errors, drills


def test_every_scenario_and_random_sequence_is_reproducible_and_exercises_every_operation():
    cases = ch04._cases(12)
    assert cases == ch04._cases(12)
    kinds = {op.kind for case in cases for op in case.ops}
    assert kinds == set(ch04._OPS)
    assert {c.page_size for c in cases} == {1, 2, 4}
    assert sum(len(c.ops) for c in cases) > 2000


def test_random_replays_split_edges_lock_and_evict_a_lot():
    """The random sequences are hard enough: many splits, locks held across splits, cascading evictions."""
    match_splits = locked_splits = insert_splits = cascades = 0
    for case in ch04.random_cases(ch04._RANDOM_SEED, 12, 200):
        side = ch04.Side(RadixCache, case)
        for op in case.ops:
            before = len(side.cache.snapshot())
            locked_before = sum(v.lock_ref > 0 for v in side.cache.snapshot())
            side.apply(op)
            after = side.cache.snapshot()
            if op.kind in ("match", "lock") and len(after) > before:
                match_splits += 1
                locked_splits += sum(v.lock_ref > 0 for v in after) > locked_before   # a locked edge was split
            if op.kind == "insert" and len(after) > before + 1:
                insert_splits += 1
            if op.kind == "evict" and len(side.alloc.freed) >= 2:
                cascades += 1
    assert match_splits > 50 and locked_splits > 20 and insert_splits > 40 and cascades > 50


def test_the_replay_compares_results_sizes_and_the_tree_after_every_operation():
    case = ch04._script("demo", 1, [("insert", [1, 2, 3]), ("lock", [1, 2]), ("evict", 10**6)])
    observed = ch04.replay(case, RadixCache)
    assert [o.result[0] for o in observed] == ["insert", "match", "evict"]
    assert observed[1].sizes == (1, 2, 3) and observed[2].sizes == (0, 2, 2)
    assert observed[2].result[2] == (12,) and observed[2].result[3] == ((12,),)
    assert [r[:4] for r in observed[1].rows] == [((1, 2), (1, 2), (10, 11), 1), ((1, 2, 3), (3,), (12,), 0)]


def test_calling_the_reference_is_refused():
    with pytest.raises(AssertionError, match="is servelab.radix_cache.RadixCache.match_prefix itself"):
        ch04.check_match_prefix(RadixCache.match_prefix)
    ns = {}
    exec(textwrap.dedent("""
        import servelab.radix_cache
        from servelab.radix_cache import RadixCache

        def via_module(self, key, value):
            return servelab.radix_cache.RadixCache.insert(self, key, value)

        def via_class(self, key):
            return RadixCache.match_prefix(self, key)
    """), ns)
    with pytest.raises(AssertionError, match="your insert calls servelab.radix_cache.RadixCache.insert"):
        ch04.check_insert(ns["via_module"])
    with pytest.raises(AssertionError, match="your match_prefix calls servelab.radix_cache.RadixCache.match_prefix"):
        ch04.check_match_prefix(ns["via_class"])


def test_learner_errors_and_stubs_are_reported_in_their_terms():
    def insert(self, key, value):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="raised NotImplementedError: fill in the function first"):
        ch04.check_insert(insert)

    def match_prefix(self, key):
        return [], None

    with pytest.raises(AssertionError, match="return the TreeNode where the match ends"):
        ch04.check_match_prefix(match_prefix)

    def child_key(self, key, offset=0):
        return list(key[offset:offset + self.page_size]) if self.page_size > 1 else key[offset]

    with pytest.raises(AssertionError, match="a tuple: a dict key must be hashable"):
        ch04.check_child_key(child_key)


def test_an_endless_loop_is_stopped_and_reported(monkeypatch):
    monkeypatch.setattr(ch04, "_CASE_SECONDS", 1)

    def insert(self, key, value):
        while True:
            pass

    with pytest.raises(AssertionError, match="did not finish within 1 s: an endless loop"):
        ch04.check_insert(insert)


def test_a_split_that_leaves_an_empty_edge_is_refused_before_it_loops():
    cache = ch04.guarded(RadixCache)()
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    child = cache.root_node.children[1]
    for bad in (0, 4):
        with pytest.raises(ch04.SplitGuard, match="a split must leave tokens on both sides"):
            cache._split_node(child, bad)
    assert cache._split_node(child, 2).key == (1, 2)

    def match_prefix(self, key):       # splits even when the whole edge matched
        key = tuple(key)
        child = self.root_node.children.get(self.child_key(key))
        if child is None:
            return [], self.root_node
        node = self._split_node(child, self._match_len(child.key, key, 0))
        return list(node.value), node

    with pytest.raises(AssertionError, match="split_len=4 on an edge of 4 tokens"):
        ch04.check_match_prefix(match_prefix)


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = NB.solution_namespace()
    answers = [ns["drill_1"], ns["drill_2"], ns["drill_3"]]
    assert answers == [int(q[1]()) for q in ch04.DRILLS.values()] == [298_500, 750, 232]
    with pytest.raises(AssertionError, match="only the other 199 skip it"):
        ch04.check_drills([300_000, answers[1], answers[2]])
    with pytest.raises(AssertionError, match="That is KiB"):
        ch04.check_drills([answers[0], 768_000, answers[2]])
    with pytest.raises(AssertionError, match="whole number"):
        ch04.check_drills({"drill_1": 1.5, "drill_2": answers[1], "drill_3": answers[2]})


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    wrong = NB.known_wrong("split_no_lock_copy").REPLACE["split_node"]
    out = caught_under_python_O("ch04", "check_split_node", "_split_node", NB.source("split_node"), wrong)
    assert "caught: Pitfall: lock_ref not copied on a split" in out
