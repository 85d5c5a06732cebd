"""Every chapter is graded from a table through the shared engine, its pitfalls are patches, and every table is
proved the same way.

A chapter without a table would run hidden test cells in the learner's kernel, a .py known-wrong module would be a
pitfall written twice, and a table the sandbox could see would hand the learner the grader's cases. Then, for each
chapter's table, in this process and through the same requests, plain-data answers and verdicts a sandboxed grading
makes (one class a chapter, so that pytest-xdist's ``loadscope`` spreads the chapters over its workers): the test
cells hold no hidden tests, the solution passes every graded cell and every visible test cell, the released stubs
fail every graded cell, each known-wrong patch applies and loses exactly its cells, each pitfall is one patch, the
reference answers every random case, and the pitfall atlas is what the patches give. What a chapter proves beyond
these is in its tests/test_chNN_grading.py.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import pytest
from grading_harness import Notebook, Proof, same_atlas

from servelab_autograder import paths
from servelab_autograder.exercises.spec import atlas_path
from servelab_autograder.judge import checks, known_wrong, verdicts
from servelab_autograder.runner import sandbox

ROOT = paths.repo_root()
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


def test_there_are_chapters():
    assert len(CHAPTERS) >= 6 and CHAPTERS == sorted(set(CHAPTERS))


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_chapter_is_graded_from_its_table(assignment):
    chapter = verdicts.table(assignment)
    assert chapter is not None, f"{assignment} has no table in servelab_autograder/judge/checks/{assignment[:4]}.py"
    assert chapter.exercises and all(ex.cell.startswith("test_") for ex in chapter.exercises)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_chapters_pitfalls_are_patches_only(assignment):
    folder = known_wrong.folder(ROOT, assignment)
    assert not list(folder.glob("*.py")), f"{folder}: known-wrong submissions are .diff patches now"
    assert known_wrong.pitfalls(ROOT, assignment), f"{assignment} has no known-wrong patch"


def test_the_tables_stay_on_the_trusted_side():
    shown = {p.relative_to(ROOT / "autograder" / "servelab_autograder").as_posix()
             for p in sandbox.kernel_side_files(ROOT)}
    assert not any(name.startswith(("judge", "runner", "course", "testing", "paths")) for name in shown), shown
    assert "exercises" in shown
    assert [c.assignment for c in checks.tables()] == CHAPTERS


# ------------------------------------------------------------------------------------------------
# every table, proved the same way

SEEDS = (0, 20261201)


@dataclass(frozen=True)
class Settings:
    """How a chapter's standard proofs run."""

    seeds: tuple[int, ...] = SEEDS           # the solution passes every graded cell on each
    patch_seeds: tuple[int, ...] = SEEDS[:1]  # each known-wrong patch loses exactly its cells on each
    without: tuple[str, ...] = ()            # solution cells with no pitfall
    reference_seeds: tuple[int, ...] = ()    # seeds whose random cases the reference must answer (cheap cases only)
    skip_demos: bool = False                 # the visible tests run without the demo cells


CLOSED_FORMS = tuple(range(1, 31))  # a chapter whose random cases are closed forms shows the reference on these
SETTINGS = {  # a chapter whose random cases are reference runs proves one seed, and shows no reference seeds
    "ch01_continuous_batching": Settings(patch_seeds=SEEDS, reference_seeds=CLOSED_FORMS),
    "ch02_nanovllm_scheduler": Settings(seeds=SEEDS[:1], without=("drills",)),
    "ch03_token_budget": Settings(skip_demos=True),
    "ch04_radix_cache": Settings(seeds=SEEDS[:1], without=("drills",)),
    "ch05_lock_ref_eviction": Settings(seeds=SEEDS[:1], without=("drills",)),
    "ch06_triton_paged_attention": Settings(),
    "ch07_mini_engine": Settings(),
    "ch08_preemption_and_kv_tiers": Settings(reference_seeds=CLOSED_FORMS),
    "ch09_capacity_and_concurrency": Settings(reference_seeds=CLOSED_FORMS),
    "ch10_async_scheduling": Settings(skip_demos=True),
    "ch11_speculative_decoding": Settings(skip_demos=True),
    "ch12_queueing_and_overload": Settings(skip_demos=True, reference_seeds=CLOSED_FORMS),
    "ch13_fairness_and_priority": Settings(reference_seeds=CLOSED_FORMS),
    "ch14_disaggregated_serving": Settings(reference_seeds=CLOSED_FORMS),
    "ch15_routing_across_replicas": Settings(reference_seeds=CLOSED_FORMS),
    "ch16_parallelism_and_cuda_graphs": Settings(reference_seeds=CLOSED_FORMS),
    "ch17_quantization_moe_mla": Settings(reference_seeds=CLOSED_FORMS),
}


@functools.cache
def proof(assignment: str) -> Proof:
    skip = verdicts.table(assignment).demos if SETTINGS[assignment].skip_demos else ()
    return Proof(assignment, Notebook(assignment, skip=skip))


def test_every_chapter_has_its_proofs():
    assert sorted(SETTINGS) == CHAPTERS
    assert sorted(c.assignment for c in ChapterProofs.__subclasses__()) == CHAPTERS


def pytest_generate_tests(metafunc):
    """Each chapter's class draws its seeds and patches from its own settings."""
    if metafunc.cls is None or not issubclass(metafunc.cls, ChapterProofs):
        return
    a = metafunc.cls.assignment
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", SETTINGS[a].seeds)
    if "patch" in metafunc.fixturenames:
        metafunc.parametrize("patch", proof(a).patches, ids=lambda p: p.name)
    if "reference_seed" in metafunc.fixturenames:
        seeds = SETTINGS[a].reference_seeds
        metafunc.parametrize("reference_seed", seeds or [pytest.param(None, marks=pytest.mark.skip(
            reason="its random cases are reference runs"))])


class ChapterProofs:
    assignment = ""

    @property
    def proof(self) -> Proof:
        return proof(self.assignment)

    def test_test_cells_hold_no_hidden_tests(self):
        for gid in self.proof.nb.test_cells():
            assert "HIDDEN TESTS" not in self.proof.nb.source(gid), f"{gid}: the table is its hidden test"

    def test_the_solution_passes_every_graded_cell(self, seed):
        self.proof.assert_solution_passes(seed)

    def test_the_solution_passes_every_visible_test_cell(self):
        self.proof.assert_visible_tests_pass()

    def test_the_released_stubs_fail_every_graded_cell(self):
        self.proof.assert_stubs_fail_every_cell()

    def test_a_known_wrong_patch_applies_and_loses_exactly_its_cells(self, patch):
        self.proof.assert_patch_loses_exactly_its_cells(patch, SETTINGS[self.assignment].patch_seeds)

    def test_every_pitfall_is_one_patch_named_in_the_chapter(self):
        self.proof.assert_every_pitfall_is_one_patch(without=SETTINGS[self.assignment].without)

    def test_the_reference_answers_every_random_case(self, reference_seed):
        """Every grading draws its own seed: a generator that can make an input the reference refuses fails a
        correct answer now and then."""
        for ex in self.proof.chapter.cells.values():
            if not hasattr(ex, "random"):
                continue
            for case in verdicts.cases(ex, reference_seed)[len(ex.fixed()):]:
                try:
                    ex.spec.expected(case)
                except Exception as e:  # noqa: BLE001 - the case is what is reported
                    raise AssertionError(f"seed {reference_seed}: {ex.spec.name}{case!r}: the reference raised "
                                         f"{type(e).__name__}: {e}") from e

    def test_the_atlas_is_what_the_patches_give(self):
        stored = json.loads(atlas_path(self.assignment).read_text(encoding="utf-8"))
        fresh = json.loads(verdicts.atlas_text(self.proof.chapter, ROOT))
        assert same_atlas(stored, fresh), "stale pitfall atlas: run python -m servelab_autograder.judge.verdicts"


class TestCh01(ChapterProofs):
    assignment = "ch01_continuous_batching"


class TestCh02(ChapterProofs):
    assignment = "ch02_nanovllm_scheduler"


class TestCh03(ChapterProofs):
    assignment = "ch03_token_budget"


class TestCh04(ChapterProofs):
    assignment = "ch04_radix_cache"


class TestCh05(ChapterProofs):
    assignment = "ch05_lock_ref_eviction"


class TestCh06(ChapterProofs):
    assignment = "ch06_triton_paged_attention"


class TestCh07(ChapterProofs):
    assignment = "ch07_mini_engine"


class TestCh08(ChapterProofs):
    assignment = "ch08_preemption_and_kv_tiers"


class TestCh09(ChapterProofs):
    assignment = "ch09_capacity_and_concurrency"


class TestCh10(ChapterProofs):
    assignment = "ch10_async_scheduling"


class TestCh11(ChapterProofs):
    assignment = "ch11_speculative_decoding"


class TestCh12(ChapterProofs):
    assignment = "ch12_queueing_and_overload"


class TestCh13(ChapterProofs):
    assignment = "ch13_fairness_and_priority"


class TestCh14(ChapterProofs):
    assignment = "ch14_disaggregated_serving"


class TestCh15(ChapterProofs):
    assignment = "ch15_routing_across_replicas"


class TestCh16(ChapterProofs):
    assignment = "ch16_parallelism_and_cuda_graphs"


class TestCh17(ChapterProofs):
    assignment = "ch17_quantization_moe_mla"
