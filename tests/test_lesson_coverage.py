"""Every assert of lesson Steps 1-2 appears in a visible test cell of the released chapters.

The statements below are the lesson's own (seeds/000, Steps 1 and 2), one per assert, continuation
lines joined. `assert scheduled` is left out: it is an invariant inside schedule(), which the
learner writes (the reference raises a RuntimeError there instead). Passing is nbval's job: these
cells run, strictly compared, in solutions/.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LESSON_ASSERTS = {
    "ch01_continuous_batching": [
        "assert simulate_static(lens, 2) == (250, [20, 200, 250, 230])",
        "assert simulate_continuous(lens, 2) == (200, [20, 200, 70, 100])",
        "assert sum(lens) / (2 * 250) == 0.6 and sum(lens) / (2 * 200) == 0.75",
        "assert simulate_static([5, 1, 1, 1], 2) == (6, [5, 1, 6, 6])",
        "assert simulate_continuous([5, 1, 1, 1], 2) == (5, [5, 1, 2, 3])",
        "assert got == naive_continuous(lens, B)",
        "assert max(max(lens), -(-sum(lens) // B)) <= got[0] <= simulate_static(lens, B)[0]",
    ],
    "ch02_nanovllm_scheduler": [
        'assert trace == [("P", [("A", 6)], 3), ("P", [("B", 5), ("C", 3)], 0), ("D", [("A", 1), ("B", 1), '
        '("C", 1)], 0), ("D", [("A", 1), ("B", 1)], 1), ("D", [("A", 1), ("B", 1)], 0), ("P", [("C", 5)], 3), '
        '("D", [("C", 1)], 3)]',
        "assert all(s.token_ids[s.num_prompt_tokens:] == expected(s.token_ids[:s.num_prompt_tokens], 4) "
        "for s in seqs_all)",
        "assert len(sch.block_manager.free_block_ids) == 5",
        "assert not is_prefill or sum(s.num_scheduled_tokens for s in seqs) <= bs + bs // 2",
        "assert all(s.token_ids[len(p):] == expected(p, bs + 2) for s, p in zip(seqs_all, prompts))",
        "assert len(sch.block_manager.free_block_ids) == 5 and n_prefill_steps > len(prompts)",
    ],
}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _visible_test_code(assignment: str) -> str:
    nb = json.loads((ROOT / "course" / assignment / f"{assignment}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"]
                     if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("grade"))


@pytest.mark.parametrize("assignment", sorted(LESSON_ASSERTS))
def test_every_lesson_assert_is_in_a_released_test_cell(assignment):
    code = _squash(_visible_test_code(assignment))
    missing = [a for a in LESSON_ASSERTS[assignment] if _squash(a) not in code]
    assert not missing, f"{assignment}: lesson asserts missing from its visible test cells: {missing}"
