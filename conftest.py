"""Repository-wide pytest hooks.

Notebooks are collected by nbval (`--nbval --nbval-current-env`, set in pyproject.toml):
- `solutions/` strictly: every stored output must come out the same;
- `course/`: errors only in graded cells (the stub test cells are tagged `raises-exception`); every ungraded
  cell's stored outputs, which the release kept from running the stubs (`execute.illustrate`), must come out
  the same, and an ungraded cell stored without outputs must print nothing (or raise, tagged) - so the
  pictures shown before Run All are exactly what the notebook makes. A course/ notebook holding a learner's
  answers is only checked for errors.
Cells tagged `requires-cuda` are skipped when no CUDA device is present.
The long end-to-end modules are collected first (FIRST), so that `make test`'s workers start them at once and
the short tests fill in around them (run with `--no-loadscope-reorder`, which keeps this order).
"""

import os
from pathlib import Path

# One thread per math library in each test process (and in the notebook kernels it starts, which inherit this):
# pytest-xdist already runs one worker per core, and torch's and the BLAS libraries' own pools on top of that put
# several spinning OpenMP threads on each core. Measured next to other work: tests/test_llm.py took 39 s with the
# default threads and 6.6 s with one. Set before anything imports torch or numpy.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent

# Decide compiled vs interpreted Triton before any test module can import triton: importing
# servelab.kernels sets TRITON_INTERPRET=1 when no CUDA device is present.
import servelab.kernels  # noqa: E402, F401

# tests/grading_harness.py holds asserts the chapters' grading tests share: rewrite them as in a test module
pytest.register_assert_rewrite("grading_harness")


def pytest_collectstart(collector):
    if type(collector).__name__ == "IPyNbFile":
        rel = Path(collector.path).resolve().relative_to(ROOT)
        if rel.parts[0] == "course":
            collector.compare_outputs = False


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _pristine_release(nb) -> bool:
    """Every solution cell still holds its stub: the notebook is the release, not a learner's work."""
    cells = [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    return bool(cells) and all("raise NotImplementedError()" in c.source for c in cells)


def _check_kept_outputs(nb_items) -> None:
    if not nb_items:  # no notebook collected: skip the import (seconds, and nbformat, which a GPU image may lack)
        return
    from servelab_autograder.course.execute import graded

    for item in nb_items:
        rel = Path(item.parent.path).resolve().relative_to(ROOT)
        if rel.parts[0] != "course" or graded(item.cell) or not _pristine_release(item.parent.nb):
            continue
        tagged = "raises-exception" in item.cell.get("metadata", {}).get("tags", [])
        if item.cell.outputs or not tagged:
            item.options["check"] = True
            if item.cell.execution_count is None:  # nbval compares only cells it thinks were run
                item.cell.execution_count = 0


# The longest modules of `make test` (bench/results.md, the suite's time per module), longest first: one of them
# started last keeps a worker busy after the others have run out of work.
FIRST = ("tests/test_autograde.py", "tests/test_hub.py", "tests/test_autograde_resume.py", "tests/test_browser.py",
         "tests/test_variants.py", "tests/test_release.py")


def _first(item) -> int:
    rel = Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
    return FIRST.index(rel) if rel in FIRST else len(FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_first)   # stable: everything else keeps its order
    nb_items = [it for it in items if type(it).__name__ == "IPyNbCell"]
    _check_kept_outputs(nb_items)
    if not nb_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="cell tagged requires-cuda and no CUDA device is present")
    for item in nb_items:
        if "requires-cuda" in item.cell.get("metadata", {}).get("tags", []):
            item.add_marker(skip)
