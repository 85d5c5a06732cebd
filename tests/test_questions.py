"""The fifteen interview questions the course answers (numbered 1-15 in the order of the question list the course
was built from): each is answered in a chapter, and that chapter's solution notebook tags it on a graded cell with
metadata ``"servelab": {"questions": [N]}``, so a maintainer can find where question N is answered and graded.

A chapter not written yet is skipped, naming the questions that wait for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# question -> the chapters that answer it (question 5 has two halves)
ANSWERED_IN = {
    1: ("ch08_preemption_and_kv_tiers",), 2: ("ch09_capacity_and_concurrency",), 3: ("ch10_async_scheduling",),
    4: ("ch09_capacity_and_concurrency",), 5: ("ch01_continuous_batching", "ch09_capacity_and_concurrency"),
    6: ("ch03_token_budget",), 7: ("ch09_capacity_and_concurrency",), 8: ("ch03_token_budget",),
    9: ("ch13_fairness_and_priority",), 10: ("ch12_queueing_and_overload",), 11: ("ch13_fairness_and_priority",),
    12: ("ch03_token_budget",), 13: ("ch03_token_budget",), 14: ("ch11_speculative_decoding",),
    15: ("ch12_queueing_and_overload",),
}
CHAPTERS = sorted({c for chapters in ANSWERED_IN.values() for c in chapters})


def tagged(assignment: str) -> dict[int, list[tuple[str, bool]]]:
    """question -> [(grade id or cell kind, graded?)] of the cells of the solution notebook that tag it."""
    nb = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    out: dict[int, list[tuple[str, bool]]] = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {})
        nbgrader = meta.get("nbgrader", {})
        for q in meta.get("servelab", {}).get("questions", []):
            out.setdefault(q, []).append((nbgrader.get("grade_id", cell["cell_type"]), bool(nbgrader.get("grade"))))
    return out


def test_every_question_has_a_chapter():
    assert sorted(ANSWERED_IN) == list(range(1, 16))


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_each_question_is_tagged_on_a_graded_cell_of_its_chapter(assignment):
    expected = sorted(q for q, chapters in ANSWERED_IN.items() if assignment in chapters)
    if not (ROOT / "solutions" / assignment).is_dir():
        pytest.skip(f"{assignment} is not written yet: question(s) {expected} wait for it")
    tags = tagged(assignment)
    missing = [q for q in expected if not any(graded for _, graded in tags.get(q, []))]
    assert not missing, f"{assignment} answers question(s) {missing} but tags none of them on a graded cell"
    strays = sorted(set(tags) - set(expected))
    assert not strays, f"{assignment} tags question(s) {strays}, which other chapters answer"


def test_no_chapter_outside_the_list_tags_a_question():
    for folder in sorted((ROOT / "solutions").iterdir()):
        if folder.is_dir() and folder.name not in CHAPTERS:
            assert not tagged(folder.name), f"{folder.name} tags questions but answers none of them"
