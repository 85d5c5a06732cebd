"""Chapter 05's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast, on the solution notebook run cell by cell (tests/grading_harness.py; matplotlib on Agg);
nbgrader grades the same cells as whole submissions in the slower autograde tests.
"""

from __future__ import annotations

import heapq
import re
import textwrap

import matplotlib
import pytest
from grading_harness import Notebook, caught_under_python_O

matplotlib.use("Agg")

from servelab.radix_cache import RadixCache  # noqa: E402
from servelab.radix_scheduler import RadixScheduler  # noqa: E402
from servelab_autograder import ch04, ch05  # noqa: E402

NB = Notebook("ch05_lock_ref_eviction")

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
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    solutions = NB.solution_ids()
    tests = NB.test_cells()
    assert solutions == ["inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_inc_lock_ref": 1, "test_dec_lock_ref": 1, "test_evict": 3, "test_cache_finished_req": 2,
        "test_scheduler": 2, "test_drills": 3}
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


def test_the_saved_outputs_show_the_numbers_the_markdown_quotes():
    nb = NB.read()
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "512 tokens 40%" in text and "1024 tokens 83%" in text
    assert "evict(4) -> [12, 30, 31, 32]" in text
    assert "fcfs: admission order H0 L H1" in text and "lpm: admission order H0 H1 H2 H3 H4 L" in text


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
    NB.assert_a_known_wrong_per_pitfall(HELPERS, ch05.PITFALLS, at_least=5, required=REQUIRED)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_fails_its_checks_with_its_message(name):
    NB.assert_known_wrong_fails_its_checks(name, HELPERS)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass."""
    NB.assert_known_wrong_loses_exactly_the_points_of_fails(name)


def test_dependencies_between_cells_are_what_the_chapter_says():
    for grade_id in ("inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req"):
        assert NB.affected_tests({grade_id}) == [f"test_{grade_id}", "test_scheduler"]
    assert NB.affected_tests({"drills"}) == ["test_drills"]


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
    ns = NB.solution_namespace()
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
    wrong = NB.known_wrong("finish_no_unlock").REPLACE["cache_finished_req"]
    out = caught_under_python_O("ch05", "check_cache_finished_req", "cache_finished_req",
                                NB.source("cache_finished_req"), wrong)
    assert "caught: Pitfall: forgot to unlock on finish or preemption" in out
