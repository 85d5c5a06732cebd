"""Chapter 02 is graded from its table (servelab_autograder/judge/checks/ch02.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch02_nanovllm_scheduler/*.diff) still applies to the solution,
  loses exactly the cells it lists, and names its pitfall on the first line of each;
- the methods are driven on states taken from the reference's runs; the calls schedule makes of the two other
  exercises (preempt, can_allocate) are answered from the reference run's replay, and a schedule that makes
  other calls is told so; with the chapter's references removed from the library (as in the sandbox), the
  drivers still run a learner's code and its answers still pass;
- the visible asserts' messages name the step, the state and the pitfall (through the atlas, which is fresh).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest
from grading_harness import Notebook, Proof

from servelab.schedulers.scheduler import BlockManager, Scheduler
from servelab_autograder import paths
from servelab_autograder.exercises import ch02, plain
from servelab_autograder.exercises.variants import Numbers as ch02_numbers
from servelab_autograder.judge import verdicts
from servelab_autograder.judge.checks import ch02 as table

ROOT = paths.repo_root()
A = "ch02_nanovllm_scheduler"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing

# one seed: each seed's cases are reference runs of the chapter's workloads


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and set(CHAPTER.setup) <= ids and not set(CHAPTER.demos) & tests
    for ref in CHAPTER.references:
        module, name = ref.split(":")
        cls, method = name.split(".")
        assert module == "servelab.schedulers.scheduler" and callable(getattr({"Scheduler": Scheduler,
                                                                    "BlockManager": BlockManager}[cls], method))


def test_a_schedule_message_names_the_step_the_state_and_the_difference():
    text = failing(solution("preempt_head"), cells=["test_schedule"])["test_schedule"]
    lines = text.splitlines()
    assert lines[0].startswith("Pitfall: preempted the head of running instead of the tail")
    assert lines[1].startswith("schedule() at step 1 of 'memory runs out with four sequences decoding'")
    assert "it called preempt(B) in a state nano-vllm's schedule never calls it in" in lines[1]
    assert "expected decode A:1 B:1" in lines[1]
    assert "Before the call: waiting [E], running [A, B, C, D], free blocks []" in text


def test_a_postprocess_message_shows_the_first_difference():
    text = failing(solution("append_after_mid_chunk"), cells=["test_postprocess"])["test_postprocess"]
    assert "mid-chunk" in text.splitlines()[0]
    sampled = fake_model_token(list(range(6)))   # sampled after the first chunk, 6 of its 12 prompt tokens
    assert f"First difference: 0.token_ids is {list(range(12)) + [sampled]}" in text
    assert "Before the call: waiting [0, 1, 2, 3, 4]" in text


def test_the_hash_collision_case_catches_a_lookup_by_hash_alone():
    collisions = table._collisions()
    assert collisions, "the cache scenarios give collision cases"
    wrong = solution("can_allocate_no_token_check")["can_allocate"]
    spec = ch02.SPECS["can_allocate"]
    caught = [args for args in collisions if spec.judge(args, _call(spec, wrong, args)) is not None]
    assert caught
    # and only those: on every other fixed case the hash alone gives nano-vllm's answer
    assert all(spec.judge(a, _call(spec, wrong, a)) is None for a in ch02.cases_of("can_allocate",
                                                                                 ch02.visible_scenarios()))
    text = failing(solution("can_allocate_no_token_check"), cells=["test_can_allocate"])["test_can_allocate"]
    assert "a hash collision: not a hit" in text


def fake_model_token(prompt: list[int]) -> int:
    """What the fake model samples after ``prompt`` (servelab.engine.driver.expected)."""
    from servelab.engine.driver import expected

    return expected(prompt, 1)[0]


def _call(spec, fn, args):
    from servelab_autograder.exercises.spec import call

    return call(fn, spec, args)


def test_the_replay_answers_only_the_reference_runs_calls():
    where, state, replay = ch02.cases_of("schedule", [ch02.pitfall_scenarios()[3]])[1]
    sch, seqs = ch02.build(state)
    ch02._with_replay(sch, seqs, replay)
    with pytest.raises(ch02.Diverged, match=r"preempt\(A\)"):
        sch.preempt(seqs["A"])       # nano-vllm's schedule preempts D here, then C
    assert sch.block_manager.can_allocate(seqs["E"]) == -1  # asked, as nano-vllm's asks: E does not fit
    with pytest.raises(ch02.Diverged, match=r"can_allocate\(A\)"):
        sch.block_manager.can_allocate(seqs["A"])  # never asked: A is running
    # what a learner might try: preempt through the replay of a state it was never recorded in
    where, state, name = ch02.cases_of("preempt", [ch02.pitfall_scenarios()[3]])[0]
    sch, seqs = ch02.build(state)
    ch02._with_replay(sch, seqs, replay)
    sch.block_manager.blocks[0].ref_count += 1
    with pytest.raises(ch02.Diverged):
        sch.preempt(seqs[name])


def test_drivers_leave_their_arguments_and_build_the_same_state():
    for name in ("schedule", "postprocess", "preempt"):
        args = ch02.cases_of(name, [ch02.abc_run()])[0]
        before = json.dumps(plain.encode(list(args)))
        ch02.SPECS[name].expected(args)
        assert json.dumps(plain.encode(list(args))) == before, name
        state = args[1]
        sch, seqs = ch02.build(state)
        assert ch02.snapshot(sch, seqs) == state


def test_visible_messages_name_the_pitfall_through_the_atlas():
    wrong = solution("preempt_to_back_of_waiting")["preempt"]
    text = ch02.diagnose("preempt", wrong)
    assert text.splitlines()[0].startswith("Pitfall: a preempted sequence went to the back of waiting")
    assert ch02.diagnose("preempt", solution()["preempt"]).startswith("preempt agrees with nano-vllm's")
    cls = solution("preempt_head")["Scheduler"]
    with pytest.raises(AssertionError, match="Your Scheduler differs from nano-vllm's at step 1"):
        ch02.compare_scheduler(cls)
    ch02.compare_scheduler(solution()["Scheduler"])


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_schedule"]
    first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]


def test_drills_name_a_wrong_count_and_want_whole_numbers():
    ns = {**solution(), "drill_1": 7 * 8 + 1}       # the workbook's blocks of 8: the prompts alone
    assert "count those second prefills too" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_1": 49}              # the run "Why it matters" prints, at blocks of 4
    assert "scales every length with the block" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_2": 992.0}
    assert "must be a whole number" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_4": 37}
    assert "recompute covers them too" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_the_traced_drills_keep_their_premise_and_shape_over_every_draw():
    """Drills 1 and 4 are runs read step by step: over each whole draw range nano-vllm's scheduler keeps the run's
    shape (three preemptions; B preempted once, when A's 9th token needs a block), so one hand trace generalises:
    12bs + 1 tokens prefilled, and b + 9 - a for B's second prefill. Just outside the ranges, the premise breaks."""
    drills = {d.name: d for d in CHAPTER.drills.drills}
    draws = [d.variant.draw(random.Random(s)) for d in (drills["drill_1"], drills["drill_4"]) for s in range(600)]
    assert {n["bs"] for n in draws if "bs" in n} == set(range(3, 33)) - {4}
    assert {(n["a"], n["b"]) for n in draws if "a" in n} == \
        {(a, b) for a in range(2, 8) for b in range(25 + a, min(32 + a, 39) + 1)}
    for bs in range(3, 33):
        assert table._drill_tight_prefilled(ch02_numbers(bs=bs)) == 12 * bs + 1
    for a in range(2, 8):
        for b in range(25 + a, min(32 + a, 39) + 1):
            assert table._drill_second_prefill(ch02_numbers(a=a, b=b)) == b + 9 - a
        with pytest.raises(RuntimeError, match="must preempt B once, when A's 9th token"):
            table._drill_second_prefill(ch02_numbers(a=a, b=24 + a))   # B would preempt itself


def test_the_visible_drill_cell_names_the_drills_not_answered_yet():
    ns = solution()
    for name in ("drill_2", "drill_5"):
        del ns[name]
    with pytest.raises(AssertionError, match=r"not answered yet: drill_2, drill_5 \(assign a whole number"):
        exec(NB.source("test_drills"), ns)
    ns = {**solution(), "drill_1": 97.0}
    with pytest.raises(AssertionError, match="drill_1 must be a whole number"):
        exec(NB.source("test_drills"), ns)


def test_visible_test_cells_say_when_they_pass():
    for gid in NB.test_cells():
        last = NB.source(gid).rstrip().splitlines()[-1]
        assert last.startswith("print(") and ("pass" in last or "answered" in last), gid


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    nb = NB.read()
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    assert "lesson" not in text.lower()
    messages = [p.message for p in PATCHES] + [d.question for d in CHAPTER.drills.drills]
    messages += [h for d in CHAPTER.drills.drills for _, h in d.hint_pairs()]
    assert not [m for m in messages if "lesson" in m.lower()]
    assert "lesson" not in ch02.diagnose("preempt", solution()["preempt"])


def test_in_a_library_without_the_references_the_drivers_still_grade(tmp_path):
    """What the sandbox shows: servelab without this chapter's references. The solution's methods, driven there
    on the grader's requests, come back with answers the trusted side accepts; the references raise."""
    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path, CHAPTER.references)
    cells = ["test_preempt", "test_schedule", "test_postprocess", "test_lesson_step2", "test_can_allocate"]
    requests = {c: verdicts.request(CHAPTER, c, 7) for c in cells}
    (tmp_path / "requests.json").write_text(json.dumps(requests))
    sources = [PITFALLS.solution[g] if g in PITFALLS.solution else PITFALLS.setup[g] for g in PITFALLS.order]
    (tmp_path / "solution.json").write_text(json.dumps(sources))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(lib.parent)!r}, {str(ROOT / "autograder")!r}]
        import servelab.schedulers.scheduler as s
        try:
            s.Scheduler.schedule(None)
        except RuntimeError as e:
            blocked = str(e)
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
    assert "not available while grading" in out["blocked"]
    for cell in cells:
        v = verdicts.judge(CHAPTER, cell, 7, out["replies"][cell], PITFALLS)
        assert v.passed, (cell, v.message)
