"""Every chapter is graded from a table through the shared engine, and its pitfalls are patches.

The per-chapter proofs are tests/test_chNN_grading.py; this module holds what all chapters share: a chapter
without a table would run hidden test cells in the learner's kernel, a .py known-wrong module would be a
pitfall written twice, and a table the sandbox could see would hand the learner the grader's cases.
"""

from __future__ import annotations

import pytest

from servelab_autograder import checks, known_wrong, release, sandbox, verdicts

ROOT = release.repo_root()
CHAPTERS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


def test_there_are_chapters():
    assert len(CHAPTERS) >= 6 and CHAPTERS == sorted(set(CHAPTERS))


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_chapter_is_graded_from_its_table(assignment):
    chapter = verdicts.table(assignment)
    assert chapter is not None, f"{assignment} has no table in servelab_autograder/checks/{assignment[:4]}.py"
    assert chapter.exercises and all(ex.cell.startswith("test_") for ex in chapter.exercises)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_a_chapters_pitfalls_are_patches_only(assignment):
    folder = known_wrong.folder(ROOT, assignment)
    assert not list(folder.glob("*.py")), f"{folder}: known-wrong submissions are .diff patches now"
    assert known_wrong.pitfalls(ROOT, assignment), f"{assignment} has no known-wrong patch"


def test_the_tables_stay_on_the_trusted_side():
    shown = {p.relative_to(ROOT / "autograder" / "servelab_autograder").as_posix()
             for p in sandbox.kernel_side_files(ROOT)}
    assert not any(name.startswith("checks") for name in shown), shown
    assert {"verdicts.py", "known_wrong.py", "grade.py"}.isdisjoint(shown)
    assert [c.assignment for c in checks.tables()] == CHAPTERS
