"""What the chapters' grading tests (tests/test_chNN_grading.py) share: a solution notebook, cell by cell, and the
chapter's known-wrong submissions.

The solution notebook's JSON is parsed; :meth:`Notebook.namespace` executes its code cells other than the test
cells in order into one namespace, as the kernel would (IPython magics dropped, stdout swallowed), with a
known-wrong module's REPLACE sources swapped in for the solution cells they name. The autograder's check helpers
and the notebook's test cells (visible asserts and hidden block) then run on that namespace. The ``assert_*``
methods and the generators hold the checks every chapter makes the same way; a chapter's own checks stay in its
test module.

pytest rewrites the asserts here as in a test module (conftest.py registers this module).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

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


def cell_names(src: str, strict: bool = False) -> tuple[set[str], set[str]]:
    """Top-level names a cell binds, and every name it reads. ``strict``: for loops and imports bind names too,
    and a name the cell stores anywhere (loop and comprehension variables, arguments and local helpers) is not
    counted as read, since it does not come from another cell."""
    tree = ast.parse(python_source(src))
    bound = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif strict and isinstance(node, ast.For):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif strict and isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if strict:
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        stored |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        stored |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        used -= stored
    return bound, used


def load_module(path: Path):
    """A known-wrong submission (autograder/known_wrong/<assignment>/<name>.py), freshly executed."""
    spec = importlib.util.spec_from_file_location(f"known_wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pitfall_phrase(message: str) -> str:
    """How the "Common pitfalls" list names the pitfall of a known-wrong MESSAGE."""
    return message.removeprefix("Pitfall: ").rstrip(".").lower()


def caught_under_python_O(chapter: str, check: str, name: str, right: str, wrong: str,
                          imports: dict[str, str] | None = None) -> str:
    """Run under ``python -O`` (assert statements stripped) a script that defines ``name`` from the solution's
    source ``right`` and passes it to ``servelab_autograder.<chapter>.<check>``, then from a known-wrong source
    ``wrong``, printing "caught:" and the first line of what the check raised. ``imports``: a name the sources
    use -> the statement importing it. Fails the test if the script fails; returns its stdout."""
    imports = imports or {}
    script = "\n".join([
        *imports.values(),
        f"from servelab_autograder import {chapter}",
        "ns = {" + ", ".join(f"{n!r}: {n}" for n in imports) + "}",
        f"exec({right!r}, ns)",
        f"{chapter}.{check}(ns[{name!r}])",
        f"exec({wrong!r}, ns)",
        "try:",
        f"    {chapter}.{check}(ns[{name!r}])",
        "except AssertionError as e:",
        '    print("caught:", str(e).splitlines()[0])',
    ])
    out = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


class Notebook:
    """A chapter's solution notebook (solutions/<assignment>/<assignment>.ipynb) and its known-wrong submissions.
    ``strict_names``: name flow between cells by :func:`cell_names` with ``strict``. A chapter that runs its cells
    differently overrides :meth:`runs` and :meth:`exec_cell`."""

    def __init__(self, assignment: str, strict_names: bool = False):
        self.path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
        self.known_wrong_dir = ROOT / "autograder" / "known_wrong" / assignment
        self.known_wrong_names = sorted(p.stem for p in self.known_wrong_dir.glob("*.py")
                                        if not p.stem.startswith("_"))
        self.strict_names = strict_names
        self._solution_namespace: dict | None = None

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

    def exec_cell(self, meta: dict, src: str, ns: dict, replacing: bool) -> None:
        """Execute one cell's source in ``ns``; ``replacing``: known-wrong sources are swapped in."""
        exec(compile(python_source(src), f"<cell {meta.get('grade_id')}>", "exec"), ns)

    def namespace(self, replace: dict[str, str] | None = None) -> dict:
        """Execute every code cell except the test cells, in order, with solution cells replaced."""
        replace = replace or {}
        unknown = set(replace) - {meta.get("grade_id") for meta, _ in self.code_cells() if meta.get("solution")}
        assert not unknown, f"REPLACE names cells that are not solution cells: {sorted(unknown)}"
        ns: dict = {"__name__": "__main__"}
        for meta, src in self.code_cells():
            if is_test(meta) or not self.runs(meta):
                continue
            src = replace.get(meta.get("grade_id"), src)
            with contextlib.redirect_stdout(io.StringIO()):
                self.exec_cell(meta, src, ns, bool(replace))
        return ns

    def solution_namespace(self) -> dict:
        """The solution's namespace, built once: copy it before running code that may change it."""
        if self._solution_namespace is None:
            self._solution_namespace = self.namespace()
        return self._solution_namespace

    def known_wrong(self, name: str):
        return load_module(self.known_wrong_dir / f"{name}.py")

    def wrong_namespace(self, name: str) -> dict:
        """The namespace with the known-wrong submission ``name`` swapped in."""
        return self.namespace(self.known_wrong(name).REPLACE)

    def exec_test_cell(self, grade_id: str, src: str, ns: dict) -> None:
        """Execute a test cell's source in ``ns`` (a chapter that runs its cells differently overrides it)."""
        exec(compile(python_source(src), f"<cell {grade_id}>", "exec"), ns)

    def run_test_cell(self, grade_id: str, ns: dict) -> str | None:
        """Run a test cell (visible asserts and hidden block) in ns; None if it passes, else its message."""
        src = self.source(grade_id)
        try:
            self.exec_test_cell(grade_id, src, ns)
        except AssertionError as e:
            return f"AssertionError: {e}"
        except Exception as e:  # noqa: BLE001 - any other error also fails the cell, but without a pitfall
            return f"{type(e).__name__} (not an AssertionError): {e}"
        return None

    def names(self, src: str) -> tuple[set[str], set[str]]:
        return cell_names(src, self.strict_names)

    def affected_tests(self, replaced: set[str]) -> list[str]:
        """Test cells whose outcome can change when the given solution cells are replaced (by name flow)."""
        changed: set[str] = set()
        tests = []
        for meta, src in self.code_cells():
            bound, used = self.names(src)
            if is_test(meta):
                if used & changed:
                    tests.append(meta["grade_id"])
            elif meta.get("grade_id") in replaced or used & changed:
                changed |= bound
        return tests

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

    def assert_solution_passes_every_test_cell(self, grade_ids) -> None:
        ns = dict(self.solution_namespace())
        failures = {g: msg for g in grade_ids if (msg := self.run_test_cell(g, ns))}
        assert not failures, failures

    def assert_a_known_wrong_per_pitfall(self, helpers: dict, pitfalls: dict[str, str], at_least: int,
                                         required: tuple[str, ...] = ()) -> list[str]:
        """There are ``at_least`` known-wrong submissions, each with a docstring, REPLACE, FAILS (test cells of
        ``helpers``) and a MESSAGE that is the head of one of the autograder's ``pitfalls`` texts and named in
        "Common pitfalls"; no two share a MESSAGE, and each ``required`` pitfall has one. Returns the MESSAGEs,
        in name order."""
        assert len(self.known_wrong_names) >= at_least
        plain_md = self.pitfalls_text()
        messages = []
        for name in self.known_wrong_names:
            module = self.known_wrong(name)
            assert module.__doc__ and module.REPLACE and module.FAILS and module.MESSAGE, name
            assert set(module.FAILS) <= set(helpers), name
            # each MESSAGE is the head of one of the autograder's pitfall texts, named in "Common pitfalls"
            assert any(text.startswith(module.MESSAGE) for text in pitfalls.values()), name
            phrase = pitfall_phrase(module.MESSAGE)
            assert phrase in plain_md, f"{name}: '{phrase}' is not in the Common pitfalls list"
            messages.append(module.MESSAGE)
        assert len(set(messages)) == len(messages), "two known-wrong submissions test the same pitfall"
        lowered = [m.lower() for m in messages]
        for pitfall in required:
            assert any(pitfall in m for m in lowered), f"no known-wrong submission for '{pitfall}'"
        return messages

    def assert_known_wrong_fails_its_checks(self, name: str, helpers: dict, message_first: bool = True) -> None:
        """Each check in the submission's FAILS raises AssertionError with its MESSAGE: at the start, or (not
        ``message_first``) anywhere."""
        module = self.known_wrong(name)
        ns = self.wrong_namespace(name)
        for test_cell in module.FAILS:
            with pytest.raises(AssertionError) as info:
                helpers[test_cell](ns)
            if message_first:
                assert str(info.value).startswith(module.MESSAGE), f"{test_cell}:\n{info.value}"
            else:
                assert module.MESSAGE in str(info.value), f"{test_cell}:\n{info.value}"

    def assert_known_wrong_loses_exactly_the_points_of_fails(self, name: str, helpers: dict | None = None) -> None:
        """The test cells themselves: those in FAILS fail and show MESSAGE; the others it can affect pass. With
        ``helpers``, each failing cell's hidden-block helper, run on the same namespace after the cell, raises
        AssertionError starting with MESSAGE too."""
        module = self.known_wrong(name)
        affected = self.affected_tests(set(module.REPLACE))
        assert set(module.FAILS) <= set(affected), f"FAILS names cells that cannot depend on {sorted(module.REPLACE)}"
        ns = self.wrong_namespace(name)
        for test_cell in affected:
            msg = self.run_test_cell(test_cell, ns)
            if test_cell in module.FAILS:
                assert msg is not None, f"{test_cell} passed"
                # the grader reports a failed cell by the first line of its error, cut to 160 characters
                first_line = msg.splitlines()[0][:160]
                assert msg.startswith("AssertionError") and module.MESSAGE in first_line, f"{test_cell}:\n{msg}"
                if helpers is not None:     # and the hidden block alone says the same
                    with pytest.raises(AssertionError) as info:
                        helpers[test_cell](ns)
                    assert str(info.value).startswith(module.MESSAGE), f"{test_cell}:\n{info.value}"
            else:
                assert msg is None, f"{test_cell} should pass:\n{msg}"
