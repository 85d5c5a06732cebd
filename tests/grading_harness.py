"""What the chapters' grading tests (tests/test_chNN_grading.py) share: a solution notebook, cell by cell.

The solution notebook's JSON is parsed; :meth:`Notebook.namespace` executes its code cells other than the test
cells in order into one namespace, as the kernel would (IPython magics dropped, stdout swallowed), and
:meth:`Notebook.run_test_cell` runs a visible test cell on it. The ``assert_*`` methods and the generators hold
the checks every chapter makes the same way; the grading itself is proved through the engine
(``servelab_autograder.verdicts``) in each chapter's own test module.

pytest rewrites the asserts here as in a test module (conftest.py registers this module).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


class Cell(NamedTuple):
    kind: str                 # "code" or "markdown"
    meta: dict                # nbgrader metadata, {} when there is none
    source: str
    tags: tuple[str, ...]


def python_source(src: str) -> str:
    """A cell's source without IPython magics (the only ones here are line magics like %matplotlib)."""
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%"))


def is_test(meta: dict) -> bool:
    return bool(meta.get("grade"))


class Notebook:
    """A chapter's solution notebook (solutions/<assignment>/<assignment>.ipynb), cell by cell. A chapter that
    runs its cells differently while grading overrides :meth:`runs`."""

    def __init__(self, assignment: str):
        self.path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"

    # ----------------------------------------------------------------------------------------------------
    # the notebook, cell by cell

    def read(self) -> dict:
        """The notebook's JSON, freshly parsed."""
        return json.loads(self.path.read_text())

    @functools.cached_property
    def cells(self) -> tuple[Cell, ...]:
        """Every cell, in order."""
        return tuple(Cell(c["cell_type"], c.get("metadata", {}).get("nbgrader", {}), "".join(c["source"]),
                          tuple(c.get("metadata", {}).get("tags", ()))) for c in self.read()["cells"])

    def code_cells(self) -> list[tuple[dict, str]]:
        """(nbgrader metadata, source) of every code cell, in order."""
        return [(cell.meta, cell.source) for cell in self.cells if cell.kind == "code"]

    def source(self, grade_id: str) -> str:
        return next(src for meta, src in self.code_cells() if meta.get("grade_id") == grade_id)

    def solution_ids(self) -> list[str]:
        return [meta["grade_id"] for meta, _ in self.code_cells() if meta.get("solution")]

    def test_cells(self) -> dict[str, dict]:
        """grade_id -> nbgrader metadata of every test cell."""
        return {meta["grade_id"]: meta for meta, _ in self.code_cells() if is_test(meta)}

    def pitfalls_text(self) -> str:
        """The "Common pitfalls" markdown cell, in lower case, without backticks and asterisks."""
        pitfalls_md = next(cell.source for cell in self.cells
                           if cell.kind == "markdown" and "## Common pitfalls" in cell.source)
        return pitfalls_md.replace("`", "").replace("*", "").lower()

    # ----------------------------------------------------------------------------------------------------
    # running it

    def runs(self, meta: dict) -> bool:
        """Whether :meth:`namespace` executes this code cell (not a test cell): every one."""
        return True

    def namespace(self) -> dict:
        """Execute every code cell except the test cells (and those :meth:`runs` leaves out), in order."""
        ns: dict = {"__name__": "__main__"}
        for meta, src in self.code_cells():
            if is_test(meta) or not self.runs(meta):
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(python_source(src), f"<cell {meta.get('grade_id')}>", "exec"), ns)
        return ns

    # ----------------------------------------------------------------------------------------------------
    # checks every chapter makes the same way

    def assert_servelab_kernel(self) -> None:
        assert self.read()["metadata"]["kernelspec"] == {"name": "servelab", "display_name": "Python (servelab)",
                                                         "language": "python"}

    def conventional_code_cells(self) -> Iterator[tuple[dict, dict, str]]:
        """(cell JSON, nbgrader metadata, source) of every code cell, each once it keeps the authoring conventions
        all chapters share: markdown cells carry no nbgrader metadata; code cells carry schema 3; a solution cell
        is unlocked, worth no points and holds a BEGIN/END SOLUTION block; a test cell is locked and tagged
        raises-exception (its stub fails in the release); every other cell is a locked setup_N cell."""
        for c in self.read()["cells"]:
            meta = c.get("metadata", {}).get("nbgrader")
            if c["cell_type"] == "markdown":
                assert meta is None
                continue
            assert meta is not None and meta["schema_version"] == 3
            source = "".join(c["source"])
            if meta.get("solution"):
                assert meta == {"grade": False, "solution": True, "locked": False, "grade_id": meta["grade_id"],
                                "schema_version": 3}
                assert "### BEGIN SOLUTION" in source and "### END SOLUTION" in source
            elif meta.get("grade"):
                assert c["metadata"].get("tags") == ["raises-exception"]
                assert meta["locked"] and not meta["solution"]
            else:
                assert meta["locked"] and re.fullmatch(r"setup_\d+", meta["grade_id"])
            yield c, meta, source

    def saved_outputs(self) -> Iterator[tuple[str, bool]]:
        """(text, whether it carries a PNG) of every saved output, each once it is a stream on stdout, an execute
        result or display data, and its text (all but the PNG) shows no figure repr and no memory address."""
        for c in self.read()["cells"]:
            for out in c.get("outputs", []):
                assert out["output_type"] in ("stream", "execute_result", "display_data"), out["output_type"]
                if out["output_type"] == "stream":
                    assert out["name"] == "stdout"
                    text, png = "".join(out["text"]), False
                else:
                    png = "image/png" in out["data"]
                    text = "".join("".join(v) for k, v in out["data"].items() if k != "image/png")
                assert "<Figure" not in text and not re.search(r"0x[0-9a-f]{6,}", text)
                yield text, png
