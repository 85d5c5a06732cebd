"""Chapter 06's graders: the solution passes every check, every known-wrong submission fails with its pitfall.

Unit-level and fast: the solution notebook's JSON is parsed and its code cells other than the test cells are
executed in order into one namespace, as the kernel would (IPython magics dropped, matplotlib on Agg), with a
known-wrong module's REPLACE sources swapped in for the solution cells they name. Then the notebook's test cells
(visible asserts and hidden block, which calls the autograder's checks) run on that namespace. nbgrader grades
the same cells as whole submissions in the slower autograde tests.

Triton reads a kernel's source from its file (``inspect.getsource``), so every cell is written to a file of
its own before it is executed, as Jupyter does; without CUDA the kernels run in Triton's interpreter.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import tempfile
import textwrap
from pathlib import Path

import matplotlib
import pytest
from grading_harness import Notebook, caught_under_python_O, pitfall_phrase, python_source

matplotlib.use("Agg")

import torch  # noqa: E402

import servelab.kernels  # noqa: E402,F401  (the interpreter is chosen before any kernel is decorated)
from servelab.kernels import exercises as ex  # noqa: E402
from servelab_autograder import ch06  # noqa: E402

# test cell -> how its hidden block's helper is called on the notebook's namespace
HELPERS = {
    "test_store_kv_kernel": lambda ns: ch06.check_store_kv_kernel(ns["store_kv_kernel"]),
    "test_decode_kernel": lambda ns: ch06.check_decode_kernel(ns["decode_kernel"]),
    "test_merge_kernel": lambda ns: ch06.check_merge_kernel(ns["merge_kernel"]),
    "test_decode_traffic": lambda ns: ch06.check_decode_traffic(ns["decode_traffic"]),
    "test_drills": lambda ns: ch06.check_drills([ns["drill_1"], ns["drill_2"], ns["drill_3"], ns["drill_4"]]),
}
# the pitfalls the issue requires among this chapter's known-wrong submissions
REQUIRED = ("the mask is off by one at a block boundary", "softmax without the running maximum",
            "query heads were paired with the wrong kv head", "the split-kv reduce ignored the partitions' maxima",
            "a block-table entry past the sequence's blocks was read")

_CELL_FILES = tempfile.TemporaryDirectory(prefix="ch06_cells_")
_counter = itertools.count()


# --------------------------------------------------------------------------------------------------------
# the notebook, cell by cell, each cell from a file of its own


def _exec(src: str, label: str, ns: dict) -> None:
    """Execute a cell from a file of its own (a fresh name each time: Triton and linecache read it back)."""
    path = Path(_CELL_FILES.name) / f"cell_{next(_counter)}_{re.sub(r'[^a-z0-9_]', '_', label)}.py"
    path.write_text(python_source(src) + "\n")
    exec(compile(path.read_text(), str(path), "exec"), ns)


class _Notebook(Notebook):
    """Every cell, test cells included, runs from a file of its own; a test cell's stdout is swallowed too."""

    def exec_cell(self, meta: dict, src: str, ns: dict, replacing: bool) -> None:
        _exec(src, str(meta.get("grade_id")), ns)

    def exec_test_cell(self, grade_id: str, src: str, ns: dict) -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            _exec(src, grade_id, ns)


NB = _Notebook("ch06_triton_paged_attention")


def _kernel_from_source(src: str, name: str, extra: dict | None = None):
    """A @triton.jit kernel from source text, through a file (Triton reads the source back)."""
    ns = {"triton": __import__("triton"), "tl": __import__("triton.language", fromlist=["language"]),
          **(extra or {})}
    _exec(textwrap.dedent(src), name, ns)
    return ns[name]


# --------------------------------------------------------------------------------------------------------
# the notebook's shape


def test_notebook_follows_the_authoring_conventions():
    NB.assert_servelab_kernel()
    solutions = NB.solution_ids()
    tests = NB.test_cells()
    assert solutions == ["store_kv_kernel", "decode_kernel", "merge_kernel", "decode_traffic", "drills"]
    assert set(tests) == set(HELPERS)
    assert {g: m["points"] for g, m in tests.items()} == {
        "test_store_kv_kernel": 1, "test_decode_kernel": 4, "test_merge_kernel": 2, "test_decode_traffic": 2,
        "test_drills": 2}
    for c, meta, source in NB.conventional_code_cells():
        tags = c.get("metadata", {}).get("tags", [])
        if meta.get("solution"):
            assert tags == (["raises-exception"] if meta["grade_id"] == "drills" else [])
        elif meta.get("grade"):
            assert "### BEGIN HIDDEN TESTS" in source and "### END HIDDEN TESTS" in source
            hidden = source.split("### BEGIN HIDDEN TESTS")[1]
            assert f"_grade.check_{meta['grade_id'][len('test_'):]}(" in hidden
        else:
            assert "requires-cuda" not in tags or "bench.main" in source
        if meta.get("grade") or meta.get("solution"):
            assert c.get("outputs") == [], meta["grade_id"]


def test_kernel_solution_cells_are_triton_kernels_whose_source_the_interpreter_can_rewrite():
    """Triton's interpreter finds a kernel's body from the last line starting with 'def ' in its source: a
    docstring line starting with 'def ' would break it."""
    for gid in ("store_kv_kernel", "decode_kernel", "merge_kernel"):
        src = NB.source(gid)
        assert src.startswith("@triton.jit\ndef " + gid + "(")
        assert sum(line.strip().startswith("def ") for line in src.splitlines()) == 1


def test_the_first_code_cell_arranges_the_interpreter_before_any_kernel():
    first = NB.code_cells()[0][1]
    imports = [ln for ln in python_source(first).splitlines() if re.match(r"(import|from) ", ln)]
    assert imports[0].startswith("import servelab.kernels"), imports[:2]
    assert "@triton.jit" not in first


def test_only_the_gpu_cell_needs_cuda_and_it_is_not_graded():
    tagged = [(cell.kind, cell.meta) for cell in NB.cells if "requires-cuda" in cell.tags]
    assert len(tagged) == 1
    kind, meta = tagged[0]
    assert kind == "code" and not meta.get("grade") and not meta.get("solution")


def test_saved_outputs_are_deterministic_text_and_png_only():
    for text, _ in NB.saved_outputs():
        assert not re.search(r"\d+\.\d+ ?s\b", text), "no timings in saved outputs"


def test_the_saved_outputs_show_the_numbers_the_markdown_quotes():
    texts = {cell.meta.get("grade_id"): cell.source for cell in NB.cells}
    nb = NB.read()
    outputs = {c["metadata"]["nbgrader"]["grade_id"]: "".join("".join(o.get("text", "")) for o in c["outputs"])
               for c in nb["cells"] if c["cell_type"] == "code"}
    why = next(cell.source for cell in NB.cells if cell.kind == "markdown" and "## Why it matters" in cell.source)
    for number in ("1.07 GB", "224 us", "4.3 us", "7.2 ms", "4.00 FLOP/byte", "4.3 GFLOP"):
        assert number in outputs["setup_2"], number
    for quoted in ("224 µs", "1.07 GB", "4.3 GFLOP", "4.3 µs", "7.2 ms", "4 FLOPs per byte", "50x"):
        assert quoted in why, quoted
    assert "recorded results" in outputs["setup_10"] or "no CUDA" in outputs["setup_10"]
    assert texts["setup_11"].count("bench.RESULTS") == 2
    recorded = "".join("".join(o["data"]["text/markdown"]) for c in nb["cells"] if c["cell_type"] == "code"
                       and c["metadata"]["nbgrader"]["grade_id"] == "setup_11" for o in c["outputs"])
    results = _recorded_results()
    assert recorded.strip().endswith(results[-200:]), "the saved results are not bench/kernels_results.md's"
    body = results.replace("# Paged-attention kernels: measured", "", 1).strip()
    assert recorded.startswith("**Unmeasured.**") == ("unmeasured" in body.splitlines()[0])


def _recorded_results() -> str:
    from servelab.kernels import bench

    return bench.RESULTS.read_text().strip()


# --------------------------------------------------------------------------------------------------------
# the solution passes


@pytest.mark.parametrize("test_cell", sorted(HELPERS))
def test_solution_passes_every_check(test_cell):
    HELPERS[test_cell](NB.solution_namespace())


def test_solution_passes_every_test_cell():
    NB.assert_solution_passes_every_test_cell(HELPERS)


def test_the_locked_launchers_match_the_library_launchers():
    """The hidden checks launch a kernel with servelab.kernels.exercises; the notebook with its locked cells."""
    ns = NB.solution_namespace()
    b = ex.make_paged_batch([5, 1, 21], block_size=4, num_q_heads=8, num_kv_heads=2, head_dim=32, seed=9)
    assert torch.equal(ns["paged_decode"](*b.args), ex.launch_decode(ns["decode_kernel"], *b.args))
    parts = ex.split_kv_partials(*b.args, 3)
    merged = ex.launch_merge(ns["merge_kernel"], *parts, torch.empty_like(b.q))
    assert torch.equal(ns["split_kv_decode"](*b.args, num_splits=3), merged)
    key, value = torch.randn(4, 2, 16), torch.randn(4, 2, 16)
    slots = torch.tensor([6, -1, 0, 11], dtype=torch.int32)
    caches = [torch.full((3, 4, 2, 16), float("nan")) for _ in range(4)]
    ns["store_kv"](key, value, caches[0], caches[1], slots)
    ex.launch_store_kv(ns["store_kv_kernel"], key, value, caches[2], caches[3], slots)
    assert all(torch.equal(a.nan_to_num(7.0), b_.nan_to_num(7.0)) for a, b_ in zip(caches[:2], caches[2:]))


# --------------------------------------------------------------------------------------------------------
# every known-wrong submission fails, with its pitfall's name


def test_there_is_a_known_wrong_for_every_pitfall_the_chapter_names():
    assert len(NB.known_wrong_names) >= 5
    plain_md = re.sub(r"\s+", " ", NB.pitfalls_text())
    messages = []
    for name in NB.known_wrong_names:
        module = NB.known_wrong(name)
        assert module.__doc__ and module.REPLACE and module.FAILS and module.MESSAGE, name
        assert set(module.FAILS) <= set(HELPERS), name
        assert any(text.startswith(module.MESSAGE) for text in ch06.PITFALLS.values()), name
        phrase = pitfall_phrase(module.MESSAGE)
        assert phrase in plain_md, f"{name}: '{phrase}' is not in the Common pitfalls list"
        messages.append(phrase)
    assert len(set(messages)) == len(messages), "two known-wrong submissions test the same pitfall"
    assert set(REQUIRED) <= set(messages), set(REQUIRED) - set(messages)


@pytest.mark.parametrize("name", NB.known_wrong_names)
def test_known_wrong_loses_exactly_the_points_of_FAILS(name):
    """The test cells themselves: those in FAILS fail and show MESSAGE on their first line (the visible asserts'
    messages come from the same checks as the hidden block); the others it can affect pass."""
    NB.assert_known_wrong_loses_exactly_the_points_of_fails(name, HELPERS)


def test_dependencies_between_cells_are_what_the_chapter_says():
    assert NB.affected_tests({"store_kv_kernel"}) == ["test_store_kv_kernel"]
    assert NB.affected_tests({"decode_kernel"}) == ["test_decode_kernel"]
    assert NB.affected_tests({"merge_kernel"}) == ["test_merge_kernel"]
    assert NB.affected_tests({"decode_traffic"}) == ["test_decode_traffic"]
    assert NB.affected_tests({"drills"}) == ["test_drills"]


# --------------------------------------------------------------------------------------------------------
# the checks refuse the library, trace what a kernel touches, and explain


def test_library_kernels_plain_functions_and_the_reference_formula_are_refused():
    from servelab.kernels.decode import paged_decode_kernel

    with pytest.raises(AssertionError, match="a kernel of the library"):
        ch06.check_decode_kernel(paged_decode_kernel)
    with pytest.raises(AssertionError, match="not a @triton.jit kernel"):
        ch06.check_merge_kernel(lambda *a: None)
    borrowed = _kernel_from_source('''
        @triton.jit
        def decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
                          stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head,
                          GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                          BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
            attend_tiles(0, 0, 0, 0, 0, k_cache_ptr, v_cache_ptr, block_tables_ptr, 0, 0, 0, scale, 0, 0, 0, 0, 0, 0,
                         0, 0, BLOCK_SIZE, TILE, False, False, "ieee", 1)
    ''', "decode_kernel", {"attend_tiles": None})
    with pytest.raises(AssertionError, match="uses attend_tiles from servelab.kernels"):
        ch06.check_decode_kernel(borrowed)
    with pytest.raises(AssertionError, match="exercises.decode_traffic itself"):
        ch06.check_decode_traffic(ex.decode_traffic)

    def via_reference(*args):
        return ex.decode_traffic(*args)

    with pytest.raises(AssertionError, match="calls servelab.kernels.exercises.decode_traffic"):
        ch06.check_decode_traffic(via_reference)


def test_stubs_and_learner_errors_are_reported_in_their_terms():
    stub = _kernel_from_source('''
        @triton.jit
        def merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
                         NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
            """The release's stub."""
            raise NotImplementedError()
    ''', "merge_kernel")
    with pytest.raises(AssertionError, match="raised NotImplementedError: fill in the function first"):
        ch06.check_merge_kernel(stub)
    assert ch06.diagnose("merge_kernel", stub).startswith("merge_kernel, launched on grid (num_seqs, num_q_heads) "
                                                          "raised NotImplementedError")
    with pytest.raises(AssertionError, match=r"expected a pair \(bytes, flops\)"):
        ch06.check_decode_traffic(lambda *args: {"bytes": 1, "flops": 2})


def test_a_wild_pointer_is_dropped_and_reported_not_followed():
    """A store far outside every tensor would corrupt memory or crash the interpreter: the trace drops it."""
    wild = _kernel_from_source('''
        @triton.jit
        def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                            stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                            BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
            d = tl.arange(0, HEAD_DIM)
            if tl.load(slot_mapping_ptr + tl.program_id(0)) >= 0:
                x = tl.load(key_ptr + (1 << 40) + d)
                tl.store(k_cache_ptr + (1 << 40) + d, x)
    ''', "store_kv_kernel")
    with pytest.raises(AssertionError, match="outside every tensor argument"):
        ch06.check_store_kv_kernel(wild)


def test_a_kernel_that_reads_past_the_end_fails_even_when_its_output_is_right():
    """decode_table_past_end's output is exact (its K/V loads are masked), yet the trace sees the reads."""
    module = NB.known_wrong("decode_table_past_end")
    kernel = _kernel_from_source(module.REPLACE["decode_kernel"], "decode_kernel")
    b = ex.make_paged_batch([4, 1, 21], block_size=4, num_q_heads=8, num_kv_heads=2, head_dim=32)
    assert torch.allclose(ex.launch_decode(kernel, *b.args).double(), ch06.ref_paged_decode(*b.args), atol=1e-5)
    with pytest.raises(AssertionError, match="read entry 1 of sequence 0's block-table row"):
        ch06.check_decode_kernel(kernel)


def test_drills_are_computed_by_the_reference_and_wrong_answers_get_hints():
    ns = NB.solution_namespace()
    answers = [ns["drill_1"], ns["drill_2"], ns["drill_3"], ns["drill_4"]]
    expected = [q[1]() for q in ch06.DRILLS.values()]
    assert answers == pytest.approx(expected, rel=1e-9)
    nbytes, flops = ex.decode_traffic([10_000] * 24, 64, 8, 128, 2)
    with pytest.raises(AssertionError, match="K/V bytes were counted per query head"):
        ch06.check_drills([ex.decode_traffic([10_000] * 24, 64, 64, 128, 2)[0], *answers[1:]])
    with pytest.raises(AssertionError, match="bytes per FLOP"):
        ch06.check_drills([answers[0], nbytes / flops, *answers[2:]])
    with pytest.raises(AssertionError, match="That is the compute time"):
        ch06.check_drills([*answers[:2], flops / 989e12 * 1e6, answers[3]])
    with pytest.raises(AssertionError, match="not their sum"):
        ch06.check_drills([*answers[:2], (nbytes / 4.8e12 + flops / 989e12) * 1e6, answers[3]])
    with pytest.raises(AssertionError, match="must be a number|expected a number"):
        ch06.check_drills([*answers[:3], "memory-bound"])


def test_checks_write_nothing_to_stderr(capfd):
    ns = NB.wrong_namespace("decode_no_running_max")
    with pytest.raises(AssertionError):
        ch06.check_decode_kernel(ns["decode_kernel"])
    assert capfd.readouterr().err == ""


def test_checks_do_not_rely_on_assert_statements():
    """Under python -O the checks still fail a wrong submission and pass the right one."""
    wrong = NB.known_wrong("traffic_one_product").REPLACE["decode_traffic"]
    out = caught_under_python_O("ch06", "check_decode_traffic", "decode_traffic", NB.source("decode_traffic"), wrong)
    assert "caught: Pitfall: the FLOPs count two products" in out
