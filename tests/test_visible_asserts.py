"""Every assert in a visible test cell carries a message: a learner whose answer fails an edge case (an empty list, a
boundary) reads what was called and what was expected, as `make check` tells them, not a bare AssertionError."""

from __future__ import annotations

import ast
import json

from servelab_autograder import paths

ROOT = paths.repo_root()

# Test cells whose bare asserts are known and not yet given a message (none now): a cell listed here must get a
# message, and leave this list, when its notebook is next edited.
KNOWN_BARE: set[tuple[str, str]] = set()


def _is_test(meta: dict) -> bool:
    return bool(meta.get("grade")) and not meta.get("solution")


def bare_asserts(notebook: dict) -> dict[str, list[int]]:
    """grade_id -> line numbers of every assert without a message in the notebook's test cells."""
    found = {}
    for cell in notebook["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not _is_test(meta):
            continue
        # IPython magics and shell lines are not Python
        src = "\n".join(line for line in "".join(cell["source"]).splitlines()
                        if not line.lstrip().startswith(("%", "!")))
        lines = [node.lineno for node in ast.walk(ast.parse(src)) if isinstance(node, ast.Assert) and node.msg is None]
        if lines:
            found[meta["grade_id"]] = sorted(lines)
    return found


def test_bare_asserts_are_found():
    nb = {"cells": [{"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "grade_id": "t"}},
                     "source": ["assert f([]) == 0, 'f([]) should be 0'\n", "assert f([1]) == 1\n"]}]}
    assert bare_asserts(nb) == {"t": [2]}


def test_every_visible_assert_has_a_message():
    chapters = paths.chapters(ROOT)
    assert len(chapters) == 17, chapters
    bare = {}
    for a in chapters:
        nb = json.loads(paths.source_notebook(ROOT, a).read_text())
        for gid, lines in bare_asserts(nb).items():
            bare[(a, gid)] = lines
    unexpected = {k: v for k, v in bare.items() if k not in KNOWN_BARE}
    assert not unexpected, (
        "visible test cells with an assert that has no message (give it the _grade.diagnose(...) message the other "
        f"asserts use): {unexpected}")
    fixed = KNOWN_BARE - set(bare)
    assert not fixed, f"these cells have no bare assert any more: take them out of KNOWN_BARE: {sorted(fixed)}"
