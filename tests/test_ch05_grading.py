"""Chapter 05 is graded from its table (servelab_autograder/judge/checks/ch05.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch05_lock_ref_eviction/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the tree's methods are driven on states taken from the reference tree's runs, cache_finished_req on scheduler
  states taken where the reference scheduler finishes or preempts a request; its call of dec_lock_ref is answered
  from the reference run's replay, and a call in another state is told so; with the chapter's references removed
  from the library (as in the sandbox), the drivers still run a learner's code and its answers still pass;
- what stays reachable (cache_unfinished_req) does not make a cache_finished_req that passes;
- the visible asserts' messages name the call, the state and the pitfall (through the atlas, which is fresh).
"""

from __future__ import annotations

import heapq
import json
import subprocess
import sys
import textwrap

import pytest
from grading_harness import Notebook, Proof

from servelab.schedulers.radix_cache import RadixCache
from servelab.schedulers.radix_scheduler import RadixScheduler
from servelab_autograder import paths
from servelab_autograder.exercises import ch04, ch05, plain
from servelab_autograder.judge import verdicts
from servelab_autograder.judge.checks import ch05 as table

ROOT = paths.repo_root()
A = "ch05_lock_ref_eviction"
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
    assert NB.solution_ids() == ["inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req", "drills"]
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_inc_lock_ref": 1, "test_dec_lock_ref": 1, "test_evict": 3, "test_cache_finished_req": 2,
        "test_scheduler": 2, "test_drills": 5}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and set(CHAPTER.setup) <= ids and not set(CHAPTER.demos) & set(tests)
    classes = {"servelab.schedulers.radix_cache": RadixCache, "servelab.schedulers.radix_scheduler": RadixScheduler}
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        cls, method = name.split(".")
        assert classes[module].__name__ == cls and callable(getattr(classes[module], method)), ref


def test_the_saved_outputs_show_the_numbers_the_markdown_quotes():
    nb = NB.read()
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "512 tokens 39.8%" in text and "1024 tokens 82.7%" in text
    assert "evict(4) -> [12, 70, 71, 72]" in text
    assert "fcfs: admission order H0 L H1" in text and "lpm: admission order H0 H1 H2 H3 H4 L" in text
    assert "none (room = free + evictable)      91          13                  481            16" in text
    assert "new_token_ratio = 0.7              125           1                   58             7" in text


# ------------------------------------------------------------------------------------------------
# the solution passes, the stubs fail, every patch loses exactly its cells


# ------------------------------------------------------------------------------------------------
# the messages


def test_a_tree_method_message_names_the_call_the_tree_and_the_difference():
    text = failing(solution("lock_only_node"), cells=["test_inc_lock_ref"])["test_inc_lock_ref"]
    lines = text.splitlines()
    assert lines[0].startswith("Pitfall: the lock did not walk up to the root")
    assert lines[1] == ("inc_lock_ref(the node [1, 2, 4, 5]) at operation 3 of 'the walk-through's locks and eviction' "
                        "(page_size 1) returned -2; expected -4.")
    assert "The tree before the call:\n    root r=1 t=" in text and "[4, 5] kv=[15, 16] r=0" in text


def test_a_cache_finished_req_message_shows_the_pool_and_the_request():
    text = failing(solution("finish_no_dup_free"), cells=["test_cache_finished_req"])["test_cache_finished_req"]
    assert text.splitlines()[1].startswith("cache_finished_req(B) at step ")
    assert "First difference: the pool has " in text and "Free in the reference's pool but not in yours: [" in text
    assert "Before the call: B has 12 prompt tokens and 4 generated, kv_indices [" in text
    # a counter left as it was is read from the state the driver returns
    text = failing(solution("finish_keeps_counters"), cells=["test_cache_finished_req"])["test_cache_finished_req"]
    assert "First difference: afterwards req.num_cached_tokens is " in text and "the reference's is 0" in text


def test_a_scheduler_message_names_the_step_the_workload_and_the_difference():
    ns = solution()
    exec(textwrap.dedent("""
        class RadixScheduler(servelab.schedulers.radix_scheduler.RadixScheduler):
            cache_class = RadixCache
            cache_finished_req = cache_finished_req
            def cache_finished_req(self, req):      # frees nothing and unlocks: the pool runs dry
                self.tree_cache.dec_lock_ref(req.last_node)
    """), ns)
    text = failing(ns, cells=["test_scheduler"])["test_scheduler"]
    assert "Your RadixScheduler (your locks, eviction and cache_finished_req) differs from the reference at " \
           "step" in text
    assert "RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=64, max_num_seqs=3, page_size=1" in text
    assert "First difference: " in text


def test_an_eviction_of_a_locked_node_is_shown_even_when_the_code_differs():
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

    text = ch05.diagnose("evict", evict)
    assert "which is locked (lock_ref 1): evict takes only nodes with lock_ref == 0" in text


def test_visible_messages_name_the_pitfall_through_the_atlas():
    for name, exercise in [("unlock_no_check", "dec_lock_ref"), ("evict_order", "evict"),
                           ("finish_prompt_only", "cache_finished_req")]:
        fn = solution(name)[exercise]
        patch = next(p for p in PATCHES if p.name == name)
        assert ch05.diagnose(exercise, fn).splitlines()[0] == patch.message
        assert ch05.diagnose(exercise, solution()[exercise]).startswith(f"{exercise} agrees with the reference")
    text = ch05.diagnose("scheduler", solution("finish_no_unlock")["RadixScheduler"])
    assert text.startswith("Pitfall: forgot to unlock on finish or preemption")
    assert ch05.diagnose("scheduler", solution()["RadixScheduler"]).startswith("scheduler agrees")


# ------------------------------------------------------------------------------------------------
# the state, the replay, the drivers


def test_states_build_back_to_themselves_and_drivers_leave_their_arguments():
    for name in ("inc_lock_ref", "dec_lock_ref", "evict", "cache_finished_req"):
        for args in ch05.visible_cases(name)[:6]:
            before = json.dumps(plain.encode(list(args)))
            ch05.SPECS[name].expected(args)
            assert json.dumps(plain.encode(list(args))) == before, name
            if name == "cache_finished_req":
                assert ch05.sched_state(*ch05.build_sched(args[1])) == args[1]
            else:
                assert ch04.snapshot(ch04.build(args[1])) == args[1]


def test_the_replay_answers_only_the_reference_runs_calls():
    where, state, replay = ch05.visible_cases("cache_finished_req")[0]

    def replaying():
        sch, req = ch05.build_sched(state)
        ch05.with_unlock_replay(sch.tree_cache, replay)
        return sch, req

    sch, req = replaying()
    with pytest.raises(ch04.Diverged, match=r"dec_lock_ref\(the node"):
        sch.tree_cache.dec_lock_ref(req.last_node)      # before the insert: a state the reference never unlocks in
    sch, req = replaying()
    kv = req.kv_indices
    aligned = len(kv) - len(kv) % sch.page_size
    sch.tree_cache.insert(req.token_ids[:len(kv)][:aligned], kv[:aligned])
    entry = next(iter(replay["dec_lock_ref"].values()))
    assert sch.tree_cache.dec_lock_ref(req.last_node) == entry["result"]    # as the reference: answered
    assert ch04.snapshot(sch.tree_cache) == entry["after"]


def test_what_stays_reachable_does_not_make_a_cache_finished_req():
    """cache_unfinished_req (not blocked: the scheduler calls it after every prefill) inserts, frees duplicates and
    moves a lock, but it re-matches the prompt first: built on it, the hook neither unlocks in the reference's
    state nor leaves the reference's tree."""
    ns = solution()
    exec(textwrap.dedent("""
        def cache_finished_req(self, req):
            self.cache_unfinished_req(req)
            self.tree_cache.dec_lock_ref(req.last_node)
            self.token_to_kv_pool_allocator.free(req.kv_indices[len(req.prefix_indices):])
            req.kv_indices, req.prefix_indices, req.last_node = [], [], None
            req.num_cached_tokens = req.num_scheduled_tokens = 0

        class RadixScheduler(servelab.schedulers.radix_scheduler.RadixScheduler):
            cache_class = RadixCache
            cache_finished_req = cache_finished_req
    """), ns)
    assert set(failing(ns, cells=["test_cache_finished_req", "test_scheduler"])) == {"test_cache_finished_req",
                                                                                     "test_scheduler"}


def test_the_workloads_evict_preempt_and_cover_every_operation():
    import random

    work = ch05.random_request_workloads(random.Random(3), 40)
    runs = [ch05.run_scheduler(RadixScheduler, w) for w in work]
    assert not [r["problem"] for r in runs if "problem" in r]
    preempted = sum(len(obs[0][3]) for r in runs for obs in r["trace"])
    evicted = sum(any(b[4][0] < a[4][0] and b[0][0] == "D" for a, b in zip(r["trace"], r["trace"][1:])) for r in runs)
    assert preempted >= 10 and evicted >= 10
    assert sum(w["config"]["policy"] == "lpm" for w in work) >= 10
    assert sum(w["config"]["page_size"] > 1 for w in work) >= 10
    finishing = ch05.cases_of("cache_finished_req", work)
    assert sum(", preempting " in c[0] for c in finishing) >= 10
    # the locks' and eviction's own: every operation but a bad insert (chapter 04's)
    assert {op[0] for w in ch05.lock_workloads() for op in w["ops"]} == set(ch04.OPS) - {"bad_insert"}


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_cache_finished_req"]
    first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]


def test_drills_name_a_wrong_count_and_want_whole_numbers():
    assert [d.expected() for d in CHAPTER.drills.drills] == [27, 370, 120, 1200, 392]
    ns = {**solution(), "drill_1": 3}
    assert "That is first come, first served" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": 170}
    assert "Unlocked tokens in the tree are room too" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_4": 4000}
    assert "future decode tokens are held back too" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_5": 560}
    assert "The floor is 0.14 times the starting ratio" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_3": 25.0}
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
        import servelab.schedulers.radix_scheduler as s
        blocked = []
        for fn in (r.RadixCache.inc_lock_ref, r.RadixCache.dec_lock_ref, r.RadixCache.evict,
                   s.RadixScheduler.cache_finished_req):
            try:
                fn(None, None)
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
    assert len(out["blocked"]) == 4 and all("not available while grading" in b for b in out["blocked"])
    for cell in cells:
        v = verdicts.judge(CHAPTER, cell, 7, out["replies"][cell], PITFALLS)
        assert v.passed, (cell, v.message)


def test_a_step_that_evicts_for_ever_is_stopped():
    """dec_lock_ref that double-counts leaves evictable_size() > 0 with nothing to evict: the scheduler's decode
    loop would evict for ever; the driver stops the step and says why."""
    cls = solution("unlock_double_count")["RadixScheduler"]
    runs = [ch05.run_scheduler(cls, w) for w in ch05.request_workloads()]
    assert any("evict was called 1000 times in one step" in r.get("problem", "") for r in runs)
