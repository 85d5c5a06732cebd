"""Re-execute notebooks in place (``make solutions``).

    python -m servelab_autograder.course.execute solutions/*/*.ipynb [--timeout S] [--kernel NAME]

Each notebook runs top to bottom in a fresh ``servelab`` kernel whose working directory is the
notebook's folder. Outputs are written back into the file; volatile metadata (timings, widget
state) is dropped so that re-running an unchanged chapter changes nothing but what the code prints.

A cell that raises fails the run (exit status 1, naming the notebook and the cell) unless it is
tagged ``raises-exception``; such a cell that raises in a ``solutions/`` notebook, or a graded
cell that writes to stderr, is reported as a warning because nbgrader would score it 0.
The notebook is only rewritten when every cell ran.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from servelab_autograder.runner.nbgrader_process import venv_path_env

KERNEL = "servelab"
CELL_TIMEOUT = 600

# Cell metadata written by execution front ends that changes on every run.
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime", "papermill", "scrolled_state")
VOLATILE_NB_METADATA = ("papermill", "widgets", "toc-autonumbering")


def cell_label(cell, index: int) -> str:
    """``cell 7 (test_simulate_static)``: the index plus the nbgrader grade id when there is one."""
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    return f"cell {index} ({gid})" if gid else f"cell {index}"


def strip_volatile(nb) -> None:
    for key in VOLATILE_NB_METADATA:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                # the kernel's transient display ids are never saved by JupyterLab either
                out.pop("transient", None)


def _first_error_line(cell) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            first = (str(out.get("evalue", "")).splitlines() or [""])[0]
            return f"{out.get('ename', 'Error')}: {first}".rstrip(": ")
    return ""


def execute_notebook(path: str | Path, timeout: int = CELL_TIMEOUT, kernel: str = KERNEL) -> list[str]:
    """Execute ``path`` in place. Returns warnings; raises ``RuntimeError`` naming the failing cell."""
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    running: dict[str, int] = {}

    def on_cell_execute(cell, cell_index, **_):
        running["index"] = cell_index

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        record_timing=False,
        coalesce_streams=True,  # one stream output per cell, however the kernel chunked what it printed
        allow_errors=False,  # only cells tagged raises-exception may raise
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_execute=on_cell_execute,
    )
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
        index = running.get("index", 0)
        where = cell_label(nb.cells[index], index)
        if isinstance(err, CellTimeoutError):
            raise RuntimeError(f"{path}: {where} exceeded the per-cell limit of {timeout} s") from None
        if isinstance(err, DeadKernelError):
            raise RuntimeError(f"{path}: the kernel died in {where}") from None
        raise RuntimeError(f"{path}: {where} raised {_first_error_line(nb.cells[index]) or err}") from None

    warnings = []
    graded_source = "solutions" in path.parts
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        err = _first_error_line(cell)
        if err and graded_source:
            warnings.append(f"{cell_label(cell, index)} is tagged raises-exception and raised {err}")
        if cell.metadata.get("nbgrader", {}).get("grade"):
            if any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.outputs):
                warnings.append(f"{cell_label(cell, index)} writes to stderr (nbgrader scores that as 0)")
    strip_volatile(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return warnings


def graded(cell) -> bool:
    """A solution or test cell of nbgrader's (an exercise, a drill answer, a graded check)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def illustrate(path: str | Path, timeout: int = CELL_TIMEOUT, kernel: str = KERNEL) -> tuple[int, int]:
    """Run a released notebook, stubs in place, and keep the outputs of every cell that is not graded and
    ran without error (the why-it-matters pictures, the worked traces): the learner sees them before Run All.
    Every other cell is left without outputs. Returns (cells kept, code cells)."""
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, record_timing=False, allow_errors=True,
                            coalesce_streams=True, resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except (CellTimeoutError, DeadKernelError) as err:
        raise RuntimeError(f"{path}: running the release with its stubs failed: {err}") from None
    kept = total = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        total += 1
        if graded(cell) or any(o.get("output_type") == "error" for o in cell.outputs):
            cell.outputs, cell.execution_count = [], None
        else:
            kept += 1
    strip_volatile(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return kept, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.course.execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", help="notebooks to execute in place")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="per-cell limit in seconds")
    parser.add_argument("--kernel", default=KERNEL, help="kernel name (default: servelab)")
    args = parser.parse_args(argv)
    os.environ.update(venv_path_env())   # kernels and nbgrader's alembic live in this interpreter's bin/

    failed = 0
    for nb_path in args.notebooks:
        if not os.path.isfile(nb_path):
            print(f"FAIL {nb_path}: no such notebook", file=sys.stderr)
            failed += 1
            continue
        start = time.monotonic()
        try:
            warnings = execute_notebook(nb_path, timeout=args.timeout, kernel=args.kernel)
        except RuntimeError as err:
            print(f"FAIL {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"ok   {nb_path} ({time.monotonic() - start:.1f} s)")
        for warning in warnings:
            print(f"     warning: {warning}")
    if failed:
        print(f"{failed} notebook(s) failed; they were left unchanged", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
