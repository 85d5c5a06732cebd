"""Chapter 06 is graded from its table (servelab_autograder/judge/checks/ch06.py), outside the learner's kernel: proved
here in-process, through the same requests, plain-data answers and verdicts a sandboxed grading makes.

- the solution passes every graded cell on two seeds; the released stubs fail every one;
- each known-wrong patch (autograder/known_wrong/ch06_triton_paged_attention/*.diff) still applies to the
  solution, loses exactly the cells it lists, and names its pitfall on the first line of each; the two mistakes
  of a maximum that starts at 0 are caught by the cases whose scores are all -1e4 or below, and only there;
- what a kernel must not do shows in the data its driver hands back: a store outside the output lands in a NaN
  margin, a read past a sequence's blocks or of another head's partials is recorded, a wild address is dropped
  and counted, a key read past a sequence's end reaches the output as NaN;
- the test cells hold no hidden tests (the table is the hidden test); the visible asserts' messages
  (``_grade.diagnose``) show the case, what came back and what was expected, and name the pitfall on the fixed
  cases through the pitfall atlas, which is what a fresh build of it gives.

Without CUDA the kernels run in Triton's interpreter (``servelab.kernels`` chooses it before anything is
decorated). The per-patch proof runs on one seed and grades the cells whose function the patch changes (every
other cell's function is the solution's own code object, which passes on every seed).
"""

from __future__ import annotations

import functools
import json
import random
import re
import subprocess
import sys
import textwrap

import matplotlib
import pytest
from grading_harness import Notebook, Proof, python_source

matplotlib.use("Agg")

import torch  # noqa: E402

import servelab.kernels  # noqa: E402,F401  (the interpreter is chosen before any kernel is decorated)
from servelab.analytic import costmodel  # noqa: E402
from servelab.analytic.costmodel import H200  # noqa: E402
from servelab.kernels import exercises as ex  # noqa: E402
from servelab.kernels.reference import gather_kv  # noqa: E402
from servelab_autograder import paths
from servelab_autograder.exercises import ch06, plain, probe
from servelab_autograder.exercises import spec as spec_module  # noqa: E402
from servelab_autograder.exercises.spec import atlas_path  # noqa: E402
from servelab_autograder.judge import known_wrong, verdicts  # noqa: E402
from servelab_autograder.judge.checks import ch06 as table  # noqa: E402

ROOT = paths.repo_root()
A = "ch06_triton_paged_attention"
CHAPTER = table.CHAPTER
NB = Notebook(A)
P = Proof(A, NB)
PITFALLS, PATCHES = P.pitfalls, P.patches
solution, grade, failing = P.solution, P.grade, P.failing
KERNELS = ("store_kv_kernel", "decode_kernel", "merge_kernel")


@functools.cache
def notebook_namespace() -> dict:
    """Every code cell of the solution notebook but the test cells, run in order (as the kernel would)."""
    return NB.namespace()


def _kernel(src: str, name: str):
    ns = solution()
    exec(compile(textwrap.dedent(src), f"<{name}>", "exec"), ns)
    return ns[name]


# --------------------------------------------------------------------------------------------------------
# the notebook and the table


def test_the_table_grades_every_test_cell_and_names_real_cells():
    tests = set(NB.test_cells())
    assert set(CHAPTER.cells) == tests
    assert NB.solution_ids() == [*KERNELS, "decode_traffic", "drills"]
    assert {g: m["points"] for g, m in NB.test_cells().items()} == {
        "test_store_kv_kernel": 1, "test_decode_kernel": 4, "test_merge_kernel": 2, "test_decode_traffic": 2,
        "test_drills": 2}
    ids = {c.meta.get("grade_id") for c in NB.cells}
    assert set(CHAPTER.demos) <= ids and not set(CHAPTER.demos) & tests
    import importlib

    for ref in CHAPTER.references:
        module, name = ref.split(":")
        assert module.startswith("servelab.kernels.") or module == "servelab.analytic.costmodel", ref
        assert callable(getattr(importlib.import_module(module), name)), ref


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    for c, meta, source in NB.conventional_code_cells():
        tags = c.get("metadata", {}).get("tags", [])
        if meta.get("solution"):
            assert tags == (["raises-exception"] if meta["grade_id"] == "drills" else [])
        elif not meta.get("grade"):
            assert "requires-cuda" not in tags or "bench_kernels.py" in source   # only the GPU benchmark
        if meta.get("solution"):
            assert c.get("outputs") == [], meta["grade_id"]
        if meta.get("grade"):     # a test cell says so when its asserts pass
            name = meta["grade_id"].removeprefix("test_")
            line = "drills: answered" if name == "drills" else f"{name}: visible tests pass"
            assert source.rstrip().endswith(f'print("{line}")'), meta["grade_id"]
            assert ["".join(o.get("text", "")) for o in c["outputs"]] == [line + "\n"], meta["grade_id"]


def test_kernel_solution_cells_are_triton_kernels_whose_source_the_interpreter_can_rewrite():
    """Triton's interpreter finds a kernel's body from the last line starting with 'def ' in its source: a
    docstring line starting with 'def ' would break it."""
    for gid in KERNELS:
        src = NB.source(gid)
        assert src.startswith("@triton.jit\ndef " + gid + "(")
        assert sum(line.strip().startswith("def ") for line in src.splitlines()) == 1


def test_the_first_code_cell_arranges_the_interpreter_before_any_kernel():
    first = NB.code_cells()[0][1]
    imports = [ln for ln in python_source(first).splitlines() if re.match(r"(import|from) ", ln)]
    assert imports[0].startswith("import servelab.kernels"), imports[:2]
    assert "@triton.jit" not in first


def test_only_the_gpu_cell_needs_cuda_and_it_is_not_graded():
    tagged = [cell.meta for cell in NB.cells if "requires-cuda" in cell.tags]
    assert len(tagged) == 1 and not tagged[0].get("grade") and not tagged[0].get("solution")


def test_saved_outputs_are_deterministic_text_and_the_numbers_the_markdown_quotes():
    for text, _ in NB.saved_outputs():
        assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"
    nb = NB.read()
    outputs = {c["metadata"]["nbgrader"]["grade_id"]: "".join("".join(o.get("text", "")) for o in c["outputs"])
               for c in nb["cells"] if c["cell_type"] == "code"}
    why = next(cell.source for cell in NB.cells if cell.kind == "markdown" and "## Why it matters" in cell.source)
    for number in ("1.07 GB", "224 us", "4.3 us", "7.2 ms", "4.00 FLOP/byte", "4.3 GFLOP"):
        assert number in outputs["setup_2"], number
    for quoted in ("224 µs", "1.07 GB", "4.3 GFLOP", "4.3 µs", "7.2 ms", "4 FLOPs per byte", "50x"):
        assert quoted in why, quoted
    assert "recorded results" in outputs["setup_10"] or "no CUDA" in outputs["setup_10"]


# --------------------------------------------------------------------------------------------------------
# the solution, the stubs and each known mistake


def test_the_locked_launchers_match_the_library_launchers():
    """The drivers launch a kernel with servelab.kernels.exercises; the notebook with its locked cells."""
    ns = notebook_namespace()
    b = ex.make_paged_batch([5, 1, 21], block_size=4, num_q_heads=8, num_kv_heads=2, head_dim=32, seed=9)
    assert torch.equal(ns["paged_decode"](*b.args), ex.launch_decode(ns["decode_kernel"], *b.args))
    parts = ex.split_kv_partials(*b.args, 3)
    merged = ex.launch_merge(ns["merge_kernel"], *parts, torch.empty_like(b.q))
    assert torch.equal(ns["split_kv_decode"](*b.args, num_splits=3), merged)
    assert torch.allclose(ch06.stage_one(b, 3)[0], parts[0], atol=1e-5)    # the driver's stage 1, in float64
    key, value = torch.randn(4, 2, 16), torch.randn(4, 2, 16)
    slots = torch.tensor([6, -1, 0, 11], dtype=torch.int32)
    caches = [torch.full((3, 4, 2, 16), float("nan")) for _ in range(4)]
    ns["store_kv"](key, value, caches[0], caches[1], slots)
    ex.launch_store_kv(ns["store_kv_kernel"], key, value, caches[2], caches[3], slots)
    assert all(torch.equal(a.nan_to_num(7.0), b_.nan_to_num(7.0)) for a, b_ in zip(caches[:2], caches[2:]))


UNSEEN = [known_wrong.load(p) for p in sorted((known_wrong.folder(ROOT, A) / "unseen").glob("*.diff"))]


@functools.cache
def _unseen(name: str) -> dict:
    """The solution with an unseen/ patch applied, run as a learner's namespace."""
    cells = next(p for p in UNSEEN if p.name == name).apply(PITFALLS.solution)
    ns: dict = {"__name__": f"__unseen_{name}__"}
    exec(CHAPTER.prelude, ns)
    for gid in PITFALLS.order:
        exec(compile({**cells, **PITFALLS.setup}[gid], gid, "exec"), ns)
    return ns


def unseen(name: str) -> dict:
    return dict(_unseen(name))


@pytest.mark.parametrize("patch", UNSEEN, ids=lambda p: p.name)
def test_a_mistake_that_changes_no_output_is_shown_by_the_visible_checks_not_graded(patch):
    """The grader judges what a kernel writes; a read whose value is thrown away writes nothing different. Such a
    patch passes every graded cell, and the learner's visible check (the interpreter's watch) still stops it."""
    ns = unseen(patch.name)
    assert failing(ns, cells=verdicts.changed_cells(CHAPTER, ns, solution())) == {}
    kernel = next(iter(patch.cells))
    run = {"decode_kernel": ch06.run_decode, "merge_kernel": ch06.run_merge}[kernel]
    shown = []
    for case in next(e for e in CHAPTER.exercises if e.spec.name == kernel).fixed():
        try:
            run(ns[kernel], *case)
        except AssertionError as e:
            shown.append(str(e))
    assert shown, f"{patch.name}: no visible check shows it"
    assert all(text.splitlines()[0] == patch.message == ch06.UNSEEN[kernel] for text in shown), shown[0]
    assert "writes the right output" in shown[0]
    assert patch.says.lower() in NB.pitfalls_text(), "the notebook tells learners about it"


@pytest.mark.parametrize("name, kernel", [("decode_max_init_zero", "decode_kernel"),
                                          ("merge_max_init_zero", "merge_kernel")])
def test_a_maximum_that_starts_at_0_is_caught_where_every_score_is_very_negative(name, kernel):
    spec = ch06.SPECS[kernel]
    wrong = solution(name)[kernel]
    caught = []
    for case in next(e for e in CHAPTER.exercises if e.spec is spec).fixed():
        msg = spec.judge(tuple(case), spec_module.call(wrong, spec, case))
        if msg is not None:
            caught.append(case)
            assert "NaN or inf in" in msg, msg     # 0 / 0 in every row whose scores all underflow
    assert caught and all(c[6] == "negative" for c in caught), caught
    b = ch06.paged_batch(*caught[0][:8])
    group, head_dim = b.q.shape[1] // b.k_cache.shape[2], b.q.shape[2]
    for s, n in enumerate(b.seq_lens.tolist()):     # the case is what it says: every score -1e4 or below
        k = gather_kv(b.k_cache, b.block_tables[s], n).double().repeat_interleave(group, 1)
        assert float(torch.einsum("hd,nhd->hn", b.q[s].double(), k).max()) / head_dim ** 0.5 <= -1e4


# --------------------------------------------------------------------------------------------------------
# what a kernel must not do shows in the data


def _drive(kernel_name: str, kernel, case) -> dict:
    spec = ch06.SPECS[kernel_name]
    return spec.norm(spec.run(kernel, list(case)), tuple(case))


def test_reads_the_kernel_throws_away_are_recorded_and_stores_outside_land_in_the_margins():
    case = table.DECODE[0]
    right = _drive("decode_kernel", solution()["decode_kernel"], case)
    assert right["outside"] == [0, 0] and right["reads"] == [] and right["stray"] == 0
    past = _drive("decode_kernel", unseen("decode_table_past_end")["decode_kernel"], case)
    assert torch.equal(torch.from_numpy(past["out"]), torch.from_numpy(right["out"])), "its output is exact"
    assert [0, 1] in past["reads"] and past["stray"] > 0    # the last row's read past the table is dropped
    padded = _drive("decode_kernel", solution("decode_padded_rows_stored")["decode_kernel"], case)
    assert padded["outside"] == [0, 16 - 4] and not ch06._wrong_rows(padded["out"], right["out"], 1e-4).any()
    merge_case = ([40, 5, 1], 4, 8, 2, 16, "float32", "normal", 4, 3)
    lanes = _drive("merge_kernel", unseen("merge_unmasked_lanes")["merge_kernel"], merge_case)
    assert [0, 0, 3] in lanes["reads"] and lanes["stray"] > 0
    store_case = ([5, -1, 0], 4, 3, 1, 16, "float32", 0)
    minus_one = _drive("store_kv_kernel", solution("store_minus_one")["store_kv_kernel"], store_case)
    assert [-1, 3, 0, 1] in minus_one["k_cache"], "token 1 is in the slot just before the cache"


def test_a_key_read_past_the_end_reaches_the_output_as_nan():
    got = _drive("decode_kernel", solution("decode_unmasked_kv")["decode_kernel"], table.DECODE[0])
    assert not torch.isfinite(torch.from_numpy(got["out"])).all()


def test_a_wild_pointer_is_dropped_and_counted_not_followed():
    wild = _kernel('''
        @triton.jit
        def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                            stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                            BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
            d = tl.arange(0, HEAD_DIM)
            if tl.load(slot_mapping_ptr + tl.program_id(0)) >= 0:
                tl.store(k_cache_ptr + (1 << 40) + d, tl.load(key_ptr + (1 << 40) + d))
    ''', "store_kv_kernel")
    v = grade({**solution(), "store_kv_kernel": wild}, cells=["test_store_kv_kernel"])["test_store_kv_kernel"]
    assert not v.passed and "outside every tensor (dropped)" in v.message, v.message


def test_library_kernels_plain_functions_and_borrowed_loops_are_refused():
    from servelab.kernels.decode import paged_decode_kernel

    def decode_kernel(*args):
        return None

    borrowed = _kernel('''
        @triton.jit
        def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                          stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                          GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                          BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
            attend_tiles(0, 0, 0, 0, 0, k_cache_ptr, v_cache_ptr, block_tables_ptr, 0, 0, 0, scale, 0, 0, 0, 0, 0, 0,
                         0, 0, BLOCK_SIZE, TILE, False, False, "ieee", 1)
    ''', "decode_kernel")
    for kernel, says in [(paged_decode_kernel, "a kernel of the library: write your own"),
                         (decode_kernel, "not a @triton.jit kernel"),
                         (borrowed, "calls attend_tiles from servelab.kernels: write the loop yourself")]:
        v = grade({**solution(), "decode_kernel": kernel}, cells=["test_decode_kernel"])["test_decode_kernel"]
        assert not v.passed and "raised TypeError" in v.message and says in v.message, v.message


def test_the_drills_are_the_library_s_numbers_and_a_prefix_read_once_is_decode_traffic_of_fewer_keys():
    ns = solution()
    drills = CHAPTER.drills.drills
    assert [d.name for d in drills] == [f"drill_{i}" for i in range(1, 7)]
    assert [ns[d.name] for d in drills] == pytest.approx([d.expected() for d in drills], rel=1e-12)
    shape, n = table.DRILL_SHAPE, table.V["drill_1"].numbers("")          # the workbook's own step
    lens, own_lens = [n.context] * n.batch, [n.context - n.prefix] * n.batch
    # read per sequence, the shared prefix is plain decode traffic; read once, it is that of one sequence's copy
    assert costmodel.shared_prefix_decode_traffic(n.prefix, own_lens, *shape, prefix_once=False) \
        == ex.decode_traffic(lens, *shape)
    once = costmodel.shared_prefix_decode_traffic(n.prefix, own_lens, *shape)
    own = ex.decode_traffic(own_lens, *shape)
    assert once == (own[0] + 2 * n.prefix * 8 * 128 * 2, ex.decode_traffic(lens, *shape)[1])
    # the intensity rises with the batch only when the prefix is read once (the notebook's table, setup_12)
    per_seq, cascade = ([(lambda b, f: f / b)(*costmodel.shared_prefix_decode_traffic(4096, [256] * n, 32, 8, 128, 2,
                                                                                     prefix_once=o))
                         for n in (1, 8, 64, 256)] for o in (False, True))
    assert max(per_seq) - min(per_seq) < 1e-9 and cascade == sorted(cascade) and cascade[-1] < H200.ridge_flops_per_byte
    nb = NB.read()
    out = next("".join("".join(o.get("text", "")) for o in c["outputs"]) for c in nb["cells"]
               if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup_12")
    assert f"{cascade[-1]:8.1f}" in out and f"{per_seq[0]:8.1f}" in out, out


def test_an_unanswered_drill_is_named_not_a_name_error():
    ns = {k: v for k, v in notebook_namespace().items() if k not in ("drill_5", "drill_6")}
    with pytest.raises(AssertionError, match=r"not answered yet: drill_5, drill_6 \(assign a number"):
        exec(compile(python_source(NB.source("test_drills")), "test_drills", "exec"), ns)
    ns = {**notebook_namespace(), "drill_2": "eight"}
    with pytest.raises(AssertionError, match="drill_2 must be a number, not 'eight'"):
        exec(compile(python_source(NB.source("test_drills")), "test_drills", "exec"), ns)


def test_learner_results_are_read_not_trusted():
    ns = {**solution(), "decode_traffic": lambda *args: {"bytes": 1, "flops": 2}}
    assert "expected a pair (bytes, flops)" in failing(ns, cells=["test_decode_traffic"])["test_decode_traffic"]
    ns = {**solution(), "decode_traffic": lambda *args: (1.5, 2)}
    assert "expected a whole number of bytes" in failing(ns, cells=["test_decode_traffic"])["test_decode_traffic"]
    ns = {**solution(), "drill_4": "memory-bound"}
    assert "expected a number" in failing(ns, cells=["test_drills"])["test_drills"]


# --------------------------------------------------------------------------------------------------------
# messages


def test_messages_show_input_got_and_expected():
    text = failing(solution("store_minus_one"), cells=["test_store_kv_kernel"])["test_store_kv_kernel"]
    assert "store_kv_kernel on slot_mapping [5, -1, 0] (a cache of 3 blocks x 4 slots" in text
    assert "returned caches holding row 3 of the margin before the cache <- token 1" in text
    assert text.endswith("expected caches holding block 0 row 0 <- token 2, block 1 row 1 <- token 0.")
    text = failing(solution("decode_no_scale"), cells=["test_decode_kernel"])["test_decode_kernel"]
    assert "decode_kernel on seq_lens [4, 1, 21], block size 4, 8 query / 2 KV heads (GROUP 4), head_dim 32" in text
    assert re.search(r"First wrong row: out\[0, 0\] .* is \[-?\d.*\], the float64 reference \[-?\d.*\] \(error", text)
    text = failing(solution("traffic_one_product"), cells=["test_decode_traffic"])["test_decode_traffic"]
    assert "returned (10,240 bytes, 8,192 FLOPs); expected (10,240 bytes, 16,384 FLOPs)" in text
    text = failing(solution("drills_roofline_sum"), cells=["test_drills"])["test_drills"]
    assert ("drill_3 = 212.916: not yet right; drill_3 is its time at the roofline, in microseconds (one layer's "
            "decode attention for 24 sequences of 10,000 cached tokens) (graded within 1%)") in text


def test_visible_messages_name_the_pitfall_through_the_atlas():
    case = table.DECODE[0]
    for name in ("decode_no_scale", "decode_padded_rows_stored"):
        text = ch06.diagnose(solution(name)["decode_kernel"], *case)
        assert text.splitlines()[0] == next(p.message for p in PATCHES if p.name == name), text
    assert ch06.diagnose(solution()["decode_kernel"], *case).endswith("is correct on this input")
    past = ch06.diagnose(unseen("decode_table_past_end")["decode_kernel"], *case)
    assert past.startswith("Pitfall: a block-table entry past the sequence's blocks was read")
    lanes = ch06.diagnose(unseen("merge_unmasked_lanes")["merge_kernel"], [40, 5, 1], 4, 8, 2, 16, "float32",
                          "normal", 4, 3)
    assert lanes.startswith("Pitfall: the padded split lanes were loaded")
    with pytest.raises(AssertionError, match="Pitfall: the padded rows were stored"):
        ch06.run_decode(solution("decode_padded_rows_stored")["decode_kernel"], *case)
    text = ch06.diagnose(solution("traffic_kv_per_query_head")["decode_traffic"], [10, 6], 4, 2, 64, 2)
    assert text.startswith("Pitfall: K/V bytes were counted per query head")


def test_each_run_draws_its_own_random_cases():
    for cell in ("test_decode_kernel", "test_merge_kernel", "test_store_kv_kernel"):
        ex_ = CHAPTER.cells[cell]
        first, second = verdicts.cases(ex_, 1), verdicts.cases(ex_, 2)
        fixed = len(ex_.fixed())
        assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]


def test_probe_answers_are_plain_data_only():
    req = verdicts.request(CHAPTER, "test_decode_kernel", random.Random(6).randrange(10**6))
    assert [(c["name"], c["driver"]) for c in req["calls"]] == [("decode_kernel", "servelab_autograder.exercises.ch06:"
                                                                                   "drive_decode")]
    req["calls"][0]["cases"] = req["calls"][0]["cases"][:1]
    first = probe.answer(req, solution())["calls"][0]["results"][0]
    assert "ok" in first and set(first) <= {"ok", "after"}
    got = plain.decode(json.loads(json.dumps(first["ok"])))
    assert set(got) == {"out", "reads", "stray"} and got["out"].shape == (2 * ch06.MARGIN + 3 * 8, 32)


# --------------------------------------------------------------------------------------------------------
# the grading sandbox's library


def test_the_grading_library_has_no_references_of_this_chapter_and_the_drivers_still_run(tmp_path):
    from servelab_autograder.runner import sandbox

    lib = sandbox.build_library(ROOT, tmp_path / "lib", CHAPTER.references)
    cell = tmp_path / "cells.py"
    cell.write_text("import triton\nimport triton.language as tl\n\n\n" + PITFALLS.solution["decode_kernel"] + "\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(lib.parent)!r})
        sys.path.insert(0, {str(tmp_path)!r})
        import json
        import servelab.kernels as K
        from servelab.analytic import costmodel
        from servelab.kernels import exercises as ex, reference
        from servelab_autograder.exercises import ch06
        import cells
        out = {{"interpreted": K.INTERPRETED}}
        b = ex.make_paged_batch([5, 1], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=16)
        for name, call in [("ref_paged_decode", lambda: reference.ref_paged_decode(*b.args)),
                           ("paged_decode", lambda: K.paged_decode(*b.args)),
                           ("decode_traffic", lambda: ex.decode_traffic([1], 1, 1, 16, 2)),
                           ("shared_prefix_decode_traffic",
                            lambda: costmodel.shared_prefix_decode_traffic(0, [1], 1, 1, 16, 2)),
                           ("ref_merge", lambda: ex.ref_merge(*ch06.stage_one(b, 2))),
                           ("attend_tiles", lambda: ex.split_kv_partials(*b.args, 2))]:
            try:
                call()
                out[name] = "ran"
            except Exception as e:
                out[name] = str(e)
        got = ch06.drive_decode(cells.decode_kernel, [4, 1, 21], 4, 8, 2, 32, "float32", "normal", 0)
        out["driver"] = [list(got["out"].shape), got["reads"], got["stray"]]
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["interpreted"] is True
    assert got["ref_paged_decode"] == ("servelab.kernels.reference.ref_paged_decode is not available while "
                                       "grading: the grader compares your code with it")
    for name in ("paged_decode", "decode_traffic", "ref_merge", "shared_prefix_decode_traffic"):
        assert "not available while grading" in got[name], (name, got[name])
    assert "attend_tiles" in got["attend_tiles"] and got["attend_tiles"] != "ran"   # stage 1 only outside grading
    assert got["driver"] == [[2 * ch06.MARGIN + 24, 32], [], 0]


def test_verdicts_need_no_asserts():
    script = textwrap.dedent(f"""
        import json
        from servelab_autograder.judge import verdicts
        from servelab_autograder.exercises import probe
        from servelab_autograder.judge.checks import ch06 as table
        P = verdicts.Pitfalls(table.CHAPTER, {str(ROOT)!r})
        for name in (None, "traffic_one_product"):
            ns = dict(P.namespace(name))
            req = verdicts.request(table.CHAPTER, "test_decode_traffic", 3)
            reply = json.loads(json.dumps(probe.answer(req, ns)))
            v = verdicts.judge(table.CHAPTER, "test_decode_traffic", 3, reply, P)
            print(v.passed, v.message.splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("True") and lines[1] == "False Pitfall: half the FLOPs were counted: only one of the " \
                                                       "two products, or a multiply-add as 1 FLOP. q.k and p.v are " \
                                                       "head_dim multiply-adds each per key and query head, 2 FLOPs " \
                                                       "per multiply-add: 4 x num_q_heads x head_dim FLOPs per key."


def test_both_init_zero_pitfalls_have_a_patch():
    assert {"decode_max_init_zero", "merge_max_init_zero"} <= {p.name for p in PATCHES}


def test_the_atlas_keeps_two_elements_of_each_output_row_not_the_outputs():
    assert len(atlas_path(A).read_text(encoding="utf-8")) < 64_000
