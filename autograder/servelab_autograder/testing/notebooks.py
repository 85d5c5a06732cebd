"""The notebooks tests build submissions from: a chapter's fresh release, its source, its solution code, and
the grading metadata of a cell."""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from pathlib import Path

import nbformat

from servelab_autograder.judge import known_wrong as known_wrong_patches
from servelab_autograder.paths import release_notebook, repo_root, source_notebook
from servelab_autograder.runner.submission import grade_id, nbgrader_meta  # noqa: F401 - the tests' too


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def points(cell) -> float:
    return float(nbgrader_meta(cell).get("points", 0) or 0)


def max_score(nb) -> float:
    return sum(points(c) for c in nb.cells if nbgrader_meta(c).get("grade"))


_FRESH: dict[tuple[str, str], Path] = {}


def fresh_release(assignment: str, root: Path | None = None) -> Path:
    """The chapter's release notebook as `nbgrader generate_assignment` makes it from solutions/ now, built once per
    process into a temporary folder (no gradebook). Not course/: a learner, or an instructor trying the course as one,
    edits the notebooks there, and the stubs must stay the stubs."""
    root = root or repo_root()
    key = (str(root), assignment)
    if key not in _FRESH or not release_notebook(root, assignment, _FRESH[key]).is_file():
        from servelab_autograder.course import release
        dest = Path(tempfile.mkdtemp(prefix=f"servelab-stubs-{assignment}-"))
        atexit.register(shutil.rmtree, dest, True)
        failed = release.build_all(root, [assignment], dest)
        if failed:
            raise RuntimeError(f"cannot build the release of {assignment}: {failed[assignment]}")
        _FRESH[key] = dest
    return release_notebook(root, assignment, _FRESH[key])


def load_release(assignment: str, root: Path | None = None):
    """The released notebook, fresh from solutions/ (`fresh_release`)."""
    return nbformat.read(fresh_release(assignment, root), as_version=4)


def load_source(assignment: str, root: Path | None = None):
    return nbformat.read(source_notebook(root or repo_root(), assignment), as_version=4)


def solution_code(assignment: str, root: Path | None = None) -> dict[str, str]:
    """grade_id -> the code a perfect learner puts in that solution cell."""
    return known_wrong_patches.solution_cells(load_source(assignment, root))


def fresh(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def complete_submission(assignment: str, root: Path | None = None):
    """The course/ release with every solution cell (matched by grade_id) holding the solution."""
    nb = fresh(load_release(assignment, root))
    answers = solution_code(assignment, root)
    for cell in nb.cells:
        if is_solution(cell):
            gid = grade_id(cell)
            if gid not in answers:
                raise ValueError(f"{assignment}: released solution cell {gid!r} has no counterpart in solutions/")
            cell.source = answers[gid]
    return nb


def cell_index(nb, gid: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if grade_id(c) == gid)


def with_cell(nb, source: str, after: int = 0):
    """``nb`` with a learner's own code cell (no grading metadata) inserted after code cell number ``after``."""
    nb = copy.deepcopy(nb)
    codes = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    nb.cells.insert(codes[after] + 1, nbformat.v4.new_code_cell(source))
    return nb
