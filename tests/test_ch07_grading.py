"""Chapter 07 is graded from its table (servelab_autograder/judge/checks/ch07.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch07_mini_engine/*.diff) still applies to the solution, loses
  exactly the cells it lists, and names its pitfall on the first line of each;
- the cases exercise what the pitfalls get wrong: cached prefixes, chunks, both sides of a block boundary, one-slot
  pages, preemption in the recorded runs;
- what the drivers hand back shows the mistakes no visible assert would: a sequence changed by a prepare step, a
  field that is not a tensor of ints, a key read from a slot no token owns (NaN in the output);
- the notebook's engine is the chapter's: the same model, engine settings and workload as the cases' runs.
"""

from __future__ import annotations

import random
import textwrap

import matplotlib
from grading_harness import Notebook, Proof, python_source

matplotlib.use("Agg")

import torch  # noqa: E402

from servelab.engine import llm  # noqa: E402
from servelab_autograder import paths
from servelab_autograder.exercises import ch07
from servelab_autograder.judge import verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch07 as table  # noqa: E402

ROOT = paths.repo_root()
A = "ch07_mini_engine"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing
SEEDS = (0, 20261201)


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    assert NB.solution_ids() == ["prepare_prefill", "prepare_decode", "paged_attention", "drills"]
    assert {g: m["points"] for g, m in NB.test_cells().items()} == {
        "test_prepare_prefill": 3, "test_prepare_decode": 2, "test_paged_attention": 3, "test_drills": 2}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & tests
    import importlib

    for ref in CHAPTER.references:
        module, name = ref.split(":")
        assert module == "servelab.engine.llm" or module.startswith("servelab.kernels."), ref
        assert callable(getattr(importlib.import_module(module), name)), ref


def test_notebook_follows_the_authoring_conventions():
    NB.assert_authoring_conventions()


def test_each_run_draws_its_own_random_cases():
    ex = CHAPTER.cells["test_prepare_prefill"]
    first, second = verdicts.cases(ex, SEEDS[0]), verdicts.cases(ex, SEEDS[1])   # the solution proofs' runs
    fixed = len(ex.fixed())
    assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]
    assert verdicts.cases(ex, SEEDS[0]) == first


def test_the_cases_reach_every_situation_a_pitfall_gets_wrong():
    prefill = [s for states, _ in CHAPTER.cells["test_prepare_prefill"].fixed() for s in states]
    assert any(s["num_cached_tokens"] and s["num_cached_tokens"] % 4 for s in prefill)       # a chunk mid-block
    assert any(s["num_cached_tokens"] + s["num_scheduled_tokens"] < len(s["token_ids"]) for s in prefill)  # mid
    decode = CHAPTER.cells["test_prepare_decode"].fixed()
    sides = {len(s["token_ids"]) % bs for states, bs in decode if bs > 1 for s in states}
    assert {0, 1} <= sides                                    # the new token fills a block, or opens one
    assert {bs for _, bs in decode} >= {1, 4, 16}


def test_the_recorded_runs_preempt_hit_the_prefix_cache_and_chunk():
    engine = llm.LLM(ch07.model(), **ch07.ENGINE)
    llm.serve(engine, ch07.requests(0))
    assert engine.preemptions > 0
    states = [s for states, _ in ch07.recorded_cases("prefill", 0) for s in states]
    first_chunks = [s for s in states if s["num_cached_tokens"] and s["num_cached_tokens"] % 4 == 0]
    assert first_chunks and any(s["num_cached_tokens"] + s["num_scheduled_tokens"] < len(s["token_ids"])
                                for s in states)
    radix = ch07.recorded_cases("prefill", 0, "radix")
    assert radix and {bs for _, bs in radix} == {1}


def _graded(source: str, cell: str) -> verdicts.Verdict:
    ns = solution()
    exec(textwrap.dedent(source), ns)
    return grade(ns, cells=[cell])[cell]


def test_a_prepare_step_that_changes_its_sequences_or_returns_lists_is_told_so():
    v = _graded("""
        _right = prepare_decode
        def prepare_decode(seqs, block_size):
            batch = _right(seqs, block_size)
            seqs[0].num_cached_tokens += 1   # postprocess's job
            return batch
    """, "test_prepare_decode")
    assert not v.passed and "sequence 0 was changed" in v.message and "postprocess" in v.message
    v = _graded("""
        _right = prepare_prefill
        def prepare_prefill(seqs, block_size):
            b = _right(seqs, block_size)
            b.positions = b.positions.tolist()
            return b
    """, "test_prepare_prefill")
    assert not v.passed and "Batch.positions is" in v.message and "not a tensor" in v.message
    v = _graded("def prepare_prefill(seqs, block_size):\n    return {'input_ids': []}\n", "test_prepare_prefill")
    assert not v.passed and "not a Batch" in v.message


def test_reads_from_the_wrong_slots_or_before_the_store_show_in_the_output():
    """The cache is NaN in every slot no sequence owns: reading a block id as a slot reaches the output as NaN.
    The slots this step writes hold stale values until then: attending before the store gives finite wrong rows."""
    case = ch07.attention_case(*ch07.walk_case(), "prefill", 0)
    block_id = solution("attention_block_id_as_slot")["paged_attention"]
    assert torch.isnan(ch07.drive_attention(block_id, *case)["out"]).any()
    text = ch07.diagnose(block_id, *case)
    assert text.splitlines()[0].startswith("Pitfall: the block table's entry was used as a slot") and "NaN in" in text
    early = solution("attention_before_store")["paged_attention"]
    out = ch07.drive_attention(early, *case)["out"]
    assert torch.isfinite(out).all()
    text = ch07.diagnose(early, *case)
    assert text.splitlines()[0].startswith("Pitfall: attention ran before the store")
    assert "First wrong output: out[0, 0] (sequence 0, position 4, query head 0)" in text


def test_visible_messages_name_the_pitfall_and_the_first_wrong_field():
    wrong = solution("decode_slot_off_by_one")["prepare_decode"]
    text = ch07.diagnose(wrong, *ch07.decode_walk_case())
    assert text.splitlines()[0].startswith("Pitfall: the decode slot is off by one at a block boundary")
    assert "First difference: slot_mapping[1] is -1, expected 3 (row 1: sequence 1, position 7)." in text
    right = solution()["prepare_prefill"]
    assert ch07.diagnose(right, *ch07.walk_case()).endswith("is correct on this input")


def test_the_drills_name_a_known_wrong_answer():
    ns = {**solution(), "drill_3": 6 * 16 + 48 % 16 - 1}           # the workbook's own numbers: 48 tokens, [3, 11, 6]
    assert "row 15 of that block" in grade(ns, cells=["test_drills"])["test_drills"].message
    ns = {**solution(), "drill_5": 1000 * 200}
    assert "grows by one token a step" in grade(ns, cells=["test_drills"])["test_drills"].message


def test_the_notebook_serves_the_trained_model_on_text_and_grades_on_the_small_random_one():
    """The notebook's demos serve the shipped checkpoint (`make model`) on text prompts, through the same loading
    path a real checkpoint takes; the grading cases record the scheduler's states on the small random model's
    token workload (cheap, and the states a scheduler reaches do not depend on the weights)."""
    from servelab.engine.model import TINY_CHECKPOINT, load_checkpoint
    from servelab.engine.prompts import text_requests

    ns: dict = {}
    source = next(src for meta, src in NB.code_cells() if meta.get("grade_id") == "setup_1")
    exec(compile(python_source(source), "<setup_1>", "exec"), ns)
    assert ns["CHECKPOINT"] == TINY_CHECKPOINT
    mine, shipped = ns["MODEL"].state_dict(), load_checkpoint(TINY_CHECKPOINT).state_dict()
    assert mine.keys() == shipped.keys() and all(torch.equal(mine[k], shipped[k]) for k in mine)
    texts = text_requests(10, seed=0)
    assert [(a, ns["TOKENIZER"].decode(p), sp.max_tokens) for a, p, sp in ns["REQUESTS"]] == texts
    assert all(sp.temperature == 0 and sp.ignore_eos for _, _, sp in ns["REQUESTS"])
    # the grading side's workload stays the small random model's
    assert ch07.model().config.vocab_size == 128 and ch07.requests(0)[0][1] != ns["REQUESTS"][0][1]


def test_the_notebook_shows_the_recorded_engine_against_transformers(tmp_path):
    assert llm.BENCH_RESULTS == ROOT / "bench" / "results.md"      # the repository's record, not a path beside lib/
    assert "run `make bench`" in llm.recorded_vs_transformers(tmp_path / "results.md")
    shown = llm.recorded_vs_transformers()
    assert "| engine: continuous batching" in shown and "- date: " in shown and not shown.startswith("#")


def test_the_grading_library_has_no_piece_of_the_engine_to_call(tmp_path):
    """In the sandbox the engine's reference pieces and the library's stores and paged attentions raise; what the
    notebook gives the learner still works."""
    import subprocess
    import sys

    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path, CHAPTER.references)
    script = textwrap.dedent("""
        import json
        import torch
        from servelab.engine import llm
        from servelab.schedulers import scheduler
        from servelab.kernels import reference
        from servelab.engine.model import causal_attention
        s = scheduler.Sequence([1, 2, 3], block_size=4)
        s.block_table, s.num_scheduled_tokens = [0], 3
        t = lambda *x: torch.tensor(x)  # noqa: E731 - one decode row at position 2 of block 0, built by hand
        batch = llm.Batch(t(3), t(2), t(2), t(0, 1), t(0, 3), t(3), t([0]), False, last_rows=t(0))
        attention_args = (torch.ones(1, 1, 2), torch.ones(1, 1, 2), torch.ones(1, 1, 2), torch.zeros(2, 1, 4, 1, 2),
                          batch)
        out = {}
        for name, call in {"prepare_prefill": lambda: llm.prepare_prefill([s], 4),
                           "runner": lambda: llm.ModelRunner.prepare_prefill([s], 4),
                           "gather_kv": lambda: reference.gather_kv(torch.zeros(1, 4, 1, 2), torch.tensor([0]), 3),
                           # the runner's own attention (the reference's arithmetic for every row at once) too
                           "batched": lambda: llm.paged_attention_batched(*attention_args).tolist(),
                           "runner_attention": lambda: llm.ModelRunner.paged_attention(*attention_args).tolist(),
                           "block_tables": lambda: llm.block_tables([s]).tolist(),
                           "causal": lambda: causal_attention(torch.ones(1, 1, 2), torch.ones(1, 1, 2),
                                                              torch.ones(1, 1, 2)).tolist()}.items():
            try:
                out[name] = call()
            except RuntimeError as e:
                out[name] = str(e)
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(lib.parent)!r})\n"
                           + script], capture_output=True, text=True, check=True)
    import json

    got = json.loads(done.stdout)
    for name in ("prepare_prefill", "runner", "gather_kv", "batched", "runner_attention"):
        assert "not available while grading" in got[name], (name, got[name])
    assert got["block_tables"] == [[0]] and got["causal"] == [[[1.0, 1.0]]]


def test_no_text_the_learner_sees_cites_a_source_they_do_not_have():
    text = "\n".join("".join(c["source"]) for c in NB.read()["cells"]).lower()
    assert "lesson" not in text and "question" not in text.replace("follow-up questions", "")
    messages = [p.message for p in PATCHES] + [d.question for d in CHAPTER.drills.drills]
    assert not [m for m in messages if "lesson" in m.lower()]


def test_probe_answers_are_plain_data_only():
    from servelab_autograder.exercises import plain, probe

    req = verdicts.request(CHAPTER, "test_paged_attention", random.Random(5).randrange(10**6))
    reply = probe.answer(req, solution())
    first = reply["calls"][0]["results"][0]
    assert set(first) == {"ok"} and isinstance(plain.decode(first["ok"])["out"], __import__("numpy").ndarray)
