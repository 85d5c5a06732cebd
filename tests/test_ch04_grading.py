"""Chapter 04 is graded from its table (servelab_autograder/judge/checks/ch04.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch04_radix_cache/*.diff) still applies to the solution, loses
  exactly the cells it lists, and names its pitfall on the first line of each;
- the methods are driven on tree states taken from the reference's runs; the calls match_prefix, insert and
  _split_node make of the other exercises are answered from the reference run's replay, and a method that makes
  other calls is told so; with the chapter's references removed from the library (as in the sandbox), the
  drivers still run a learner's code and its answers still pass;
- the visible asserts' messages name the call, the tree and the pitfall (through the atlas, which is fresh).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import textwrap

import pytest
from grading_harness import Notebook, Proof

from servelab.schedulers.radix_cache import RadixCache
from servelab_autograder import paths
from servelab_autograder.exercises import ch04, plain
from servelab_autograder.exercises.spec import call
from servelab_autograder.judge import verdicts
from servelab_autograder.judge.checks import ch04 as table

ROOT = paths.repo_root()
A = "ch04_radix_cache"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing

# one seed: each seed's cases are reference runs of the chapter's workloads


# ------------------------------------------------------------------------------------------------
# the notebook and the table


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = NB.test_cells()
    assert set(CHAPTER.cells) == set(tests)
    assert NB.solution_ids() == ["child_key", "match_len", "split_node", "match_prefix", "insert", "drills"]
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_child_key": 1, "test_match_len": 1, "test_split_node": 2, "test_match_prefix": 3, "test_insert": 3,
        "test_radix_cache": 2, "test_drills": 5}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and set(CHAPTER.setup) <= ids and not set(CHAPTER.demos) & set(tests)
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        assert module.startswith("servelab.schedulers.radix_") and callable(obj), ref
    # every path that computes an exercise's answer is hidden: the array-key walks do match_prefix's and insert's
    hidden = {ref.split(":")[1] for ref in CHAPTER.references}
    assert {f"RadixCache.{m}" for m in ch04.EXERCISES} <= hidden
    assert {f"PackedKeys.{m}" for m in ("_match_bulk", "_insert_bulk", "_split_packed")} <= hidden
    assert {"_common_len", "_cut_edge"} <= hidden
    assert all(callable(getattr(RadixCache, m)) for m in ("_match_bulk", "_insert_bulk", "_split_packed"))


def test_the_figures_the_markdown_quotes_are_in_the_saved_outputs():
    nb = NB.read()
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "198,000 from the cache" in text and "177,408 from the cache" in text
    assert "KV of one copy of the 2000-token prompt: 1,000 MiB" in text
    assert "read by one decode step of the 100 requests: 100,000 MiB with a plain paged kernel" in text
    assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"


# ------------------------------------------------------------------------------------------------
# the solution passes, the stubs fail, every patch loses exactly its cells


# ------------------------------------------------------------------------------------------------
# the messages


def test_a_method_message_names_the_call_the_tree_and_the_difference():
    text = failing(solution("split_no_lock_copy"), cells=["test_split_node"])["test_split_node"]
    lines = text.splitlines()
    assert lines[0].startswith("Pitfall: lock_ref not copied on a split")
    assert lines[1].startswith("_split_node(the node [1, 2, 3, 4], split_len=2) at operation 2 of 'a locked "
                               "handle whose edge is split' (page_size 1), inside match_prefix([1, 2, 9])")
    assert "returned a new node ending at [1, 2]; child now ends at [1, 2, 3, 4]; expected a new node" in lines[1]
    assert "First difference: the node ending at [1, 2] has lock_ref 0; the reference's has 1" in text
    assert "The tree before the call:\n    root r=1 t=4\n      [1, 2, 3, 4] kv=[10, 11, 12, 13] r=1 t=4" in text


def test_a_wrong_call_of_another_exercise_is_shown_against_the_references_call():
    text = failing(solution("match_not_touched"), cells=["test_match_prefix"])["test_match_prefix"]
    assert "[7, 7] < [1, 2] = [3, 4] < [9] < [5, 6]; the reference's [7, 7] < [9] < [1, 2] = [3, 4] = [5, 6]" in text
    # on a split, the learner's state when it called _split_node against the reference's when it did
    wrong = solution("match_not_touched")["match_prefix"]
    spec = ch04.SPECS["match_prefix"]
    args = next(a for a in ch04.cases_of("match_prefix", ch04.chapter_workloads()) if a[3]["_split_node"])
    text = spec.judge(args, call(wrong, spec, args))
    assert "in a state the reference never calls it in" in text
    assert "First difference: the reference calls _split_node(the node" in text and "when yours called, " in text


def test_a_whole_class_message_names_the_operation_and_what_came_before():
    text = failing(solution("insert_overwrites"), cells=["test_radix_cache"])["test_radix_cache"]
    assert text.splitlines()[0].startswith("Pitfall: insert overwrote KV that was already cached")
    assert "differs from the reference at operation 1 of the workload 'a deep match refreshes" in text
    assert "0  insert([1, 2], [10, 11]) -> returned 0" in text
    assert "First difference: the node ending at [1, 2] has KV indices [12, 13]; the reference's has [10, 11]" in text


def test_pure_helpers_say_what_they_returned_and_why_it_must_be_a_tuple():
    spec = ch04.SPECS["child_key"]

    def as_list(self, key, offset=0):
        return list(key[offset:offset + self.page_size]) if self.page_size > 1 else key[offset]

    msg = spec.judge((4, [1, 2, 3, 4, 5, 6, 7, 8], 4), call(as_list, spec, (4, [1, 2, 3, 4, 5, 6, 7, 8], 4)))
    assert msg == ("child_key(key=(1, 2, 3, 4, 5, 6, 7, 8), offset=4) with page_size 4 returned [5, 6, 7, 8]; "
                   "expected (5, 6, 7, 8). (A tuple: a dict key must be hashable.)")


def test_a_pure_helpers_visible_message_is_about_the_assert_that_failed():
    def first_page_wrong(self, key, offset=0):          # right at offset 0, wrong further on
        return key[offset] if self.page_size == 1 else tuple(key[:self.page_size])

    four, key = RadixCache(page_size=4), (1, 2, 3, 4, 5, 6, 7, 8)
    msg = ch04.diagnose("child_key", first_page_wrong, four, key, 4)
    assert msg == ("child_key(key=(1, 2, 3, 4, 5, 6, 7, 8), offset=4) with page_size 4 returned (1, 2, 3, 4); "
                   "expected (5, 6, 7, 8).")
    assert ch04.diagnose("child_key", first_page_wrong, four, key).endswith("is correct on this input")
    msg = ch04.diagnose("_match_len", solution("match_len_not_rounded")["_match_len"], RadixCache(page_size=2),
                        (1, 2, 3, 4), (1, 2, 3, 9), 0)
    lines = msg.splitlines()
    assert lines[0] == next(p for p in PATCHES if p.name == "match_len_not_rounded").message
    assert lines[1] == ("_match_len(edge=(1, 2, 3, 4), key=(1, 2, 3, 9), offset=0) with page_size 2 returned 3; "
                        "expected 2.")
    # without the assert's arguments, the first of the notebook's cases it gets wrong
    assert ch04.diagnose("child_key", first_page_wrong).startswith("child_key(key=(5, 6, 7, 8), offset=2)")


def test_visible_messages_name_the_pitfall_through_the_atlas():
    for name, exercise in [("match_len_not_rounded", "_match_len"), ("split_new_node_lower", "_split_node"),
                           ("insert_double_count", "insert")]:
        fn = solution(name)[exercise]
        patch = next(p for p in PATCHES if p.name == name)
        assert ch04.diagnose(exercise, fn).splitlines()[0] == patch.message
        assert ch04.diagnose(exercise, solution()[exercise]).startswith(f"{exercise} agrees with the reference")
    text = ch04.diagnose("radix_cache", solution("match_no_split")["RadixCache"])
    assert text.startswith("Pitfall: no split when a match ends mid-edge")
    assert ch04.diagnose("radix_cache", solution()["RadixCache"]).startswith("radix_cache agrees")


# ------------------------------------------------------------------------------------------------
# the state, the replay, the drivers


def test_a_tree_state_builds_back_to_itself_and_drivers_leave_their_arguments():
    for name in ("_split_node", "match_prefix", "insert"):
        for args in ch04.cases_of(name, ch04.chapter_workloads())[:5]:
            before = json.dumps(plain.encode(list(args)))
            ch04.SPECS[name].expected(args)
            assert json.dumps(plain.encode(list(args))) == before, name
            assert ch04.snapshot(ch04.build(args[1])) == args[1]


def test_the_replay_answers_only_the_reference_runs_calls():
    where, state, key, replay = next(a for a in ch04.cases_of("match_prefix", ch04.chapter_workloads())
                                     if a[3]["_split_node"])

    def replaying():
        cache = ch04.build(state)
        ch04.with_replay(cache, replay)
        return cache

    cache = replaying()
    assert cache.child_key(tuple(key)) == key[0]      # asked, as the reference asks
    with pytest.raises(ch04.Diverged, match=r"child_key\(key=\[99"):
        cache.child_key((99, 1, 2))                     # a page the reference never looked up
    cache = replaying()
    with pytest.raises(ch04.Diverged, match=r"_split_node"):
        cache._split_node(cache.root_node.children[key[0]], 1)   # not in this state: the reference stamps it first
    # what a learner might try: split through the replay in a state it was never recorded in
    entry = next(iter(replay["_split_node"].values()))
    cache = ch04.build(entry["before"])
    ch04.with_replay(cache, replay)
    handle = ch04.node_by_id(cache, entry["child"])
    handle.lock_ref += 1
    with pytest.raises(ch04.Diverged):
        cache._split_node(handle, entry["split_len"])
    handle.lock_ref -= 1
    upper = cache._split_node(handle, entry["split_len"])   # the recorded state: answered, the tree as after it
    assert ch04.snapshot(cache) == entry["after"] and handle.parent is upper and upper is not handle


def test_random_workloads_split_lock_and_evict_a_lot():
    import random

    work = table.random_workloads(random.Random(5), 9, 150)
    splits = ch04.cases_of("_split_node", work)
    assert len(splits) > 80
    assert sum(any(row[ch04.LOCK] > 0 for row in s[1]["nodes"][1:]) for s in splits) > 20   # locked edges split
    assert sum("inside insert" in s[0] for s in splits) > 30 and sum("inside match" in s[0] for s in splits) > 30
    kinds = {op[0] for w in work for op in w["ops"]}
    assert kinds == set(ch04.OPS)
    evicts = [r for w in work for r in ch04.SPECS["RadixCache"].expected((w["label"], w))["trace"]
              if r[0][0] == "evict" and len(r[0][3]) >= 2]
    assert len(evicts) > 50   # evictions that free more than one node


def test_a_split_that_leaves_an_empty_edge_is_refused_before_it_loops():
    cache = ch04.guarded(RadixCache)()
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    child = cache.root_node.children[1]
    for bad in (0, 4):
        with pytest.raises(ch04.SplitGuard, match="a split must leave tokens on both sides"):
            cache._split_node(child, bad)
    assert cache._split_node(child, 2).key == (1, 2)
    # the first-token child key at page_size 4: the whole class's run ends with the guard, not in a loop
    ns = solution("child_key_first_token")
    pages = next(w for w in ch04.chapter_workloads() if w["label"] == "the pages walk (page_size 4)")
    run = ch04.drive_radix_cache(ns["RadixCache"], "", pages)
    assert any("SplitGuard" in str(step[0]) for step in run["trace"])


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_match_prefix"]
    first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]


def test_drills_name_a_wrong_count_and_want_whole_numbers():
    assert [d.expected() for d in CHAPTER.drills.drills] == [298_500, 750, 232, 150_000, 992]
    ns = {**solution(), "drill_1": 300_000}
    assert "only the other 199 skip it" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": 768_000}
    assert "That is KiB" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_4": 750}
    assert "each request's attention still reads" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_5": 1000}
    assert "rounded down to whole 16-token pages" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_3": 232.0}
    assert "must be a whole number" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_in_a_library_without_the_references_the_drivers_still_grade(tmp_path):
    """What the sandbox shows: servelab without this chapter's references. The solution's methods, driven there
    on the grader's requests, come back with answers the trusted side accepts; the references raise."""
    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path, CHAPTER.references)
    cells = [c for c in CHAPTER.cells if c != "test_drills"]
    requests = {c: verdicts.request(CHAPTER, c, 7) for c in cells}
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    sources = [PITFALLS.solution[g] if g in PITFALLS.solution else PITFALLS.setup[g] for g in PITFALLS.order]
    (tmp_path / "solution.json").write_text(json.dumps(sources))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(lib.parent)!r}, {str(ROOT / "autograder")!r}]
        import servelab.schedulers.radix_cache as r
        blocked = []
        for name in ("child_key", "_match_len", "_split_node", "match_prefix", "insert", "_match_bulk"):
            try:
                getattr(r.RadixCache, name)(r.RadixCache(), (1, 2), (3, 4))
            except RuntimeError as e:
                blocked.append(str(e))
        try:
            r._common_len((1, 2), (1, 2), 0)
        except RuntimeError as e:
            blocked.append(str(e))
        from servelab_autograder.exercises import probe
        ns = {{}}
        exec({CHAPTER.prelude!r}, ns)
        for source in json.load(open({str(tmp_path / "solution.json")!r})):
            exec(source, ns)
        requests = json.load(open({str(tmp_path / "requests.json")!r}))
        print(json.dumps({{"blocked": blocked, "replies": {{c: probe.answer(r, ns) for c, r in requests.items()}}}}))
    """)
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.splitlines()[-1])   # the last line: the setup cells print too (the drills)
    assert len(out["blocked"]) == 7 and all("not available while grading" in b for b in out["blocked"])
    for cell in cells:
        v = verdicts.judge(CHAPTER, cell, 7, out["replies"][cell], PITFALLS)
        assert v.passed, (cell, v.message)


def test_the_reachable_library_alone_does_not_pass():
    """What stays reachable while chapter 04 grades (the lock, unlock and eviction, the tree's small helpers)
    does not look up, split or insert: a RadixCache built from it alone fails every method's cell."""
    ns = solution()
    exec(textwrap.dedent("""
        def match_prefix(self, key):
            return [], self.root_node                    # the reachable route: nothing to walk the tree with

        def insert(self, key, value):
            return len(self._page_aligned(tuple(key))) and 0
    """), ns)
    got = failing(ns, cells=["test_match_prefix", "test_insert"])
    assert set(got) == {"test_match_prefix", "test_insert"}
