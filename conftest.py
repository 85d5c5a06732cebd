"""Repository-wide pytest hooks.

Notebooks are collected by nbval (`--nbval --nbval-current-env`, set in pyproject.toml):
- `solutions/` strictly: every stored output must come out the same;
- `course/` laxly: only errors count, and the stub test cells are tagged `raises-exception`.
Cells tagged `requires-cuda` are skipped when no CUDA device is present.
"""

from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(config, items):
    nb_items = [it for it in items if type(it).__name__ == "IPyNbCell"]
    if not nb_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="cell tagged requires-cuda and no CUDA device is present")
    for item in nb_items:
        if "requires-cuda" in item.cell.get("metadata", {}).get("tags", []):
            item.add_marker(skip)
