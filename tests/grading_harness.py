"""What the chapters' grading tests (tests/test_chNN_grading.py) share: a solution notebook, cell by cell.

The solution notebook's JSON is parsed; :meth:`Notebook.namespace` executes its code cells other than the test
cells in order into one namespace, as the kernel would (IPython magics dropped, stdout swallowed), and
:meth:`Notebook.run_test_cell` runs a visible test cell on it. The ``assert_*`` methods and the generators hold
the checks every chapter makes the same way, which tests/test_grading_tables.py makes for every chapter's table
(through the engine, ``servelab_autograder.judge.verdicts``); each chapter's own test module proves the rest.

pytest rewrites the asserts here as in a test module (conftest.py registers this module).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from servelab_autograder import paths

ROOT = Path(__file__).resolve().parents[1]


def same_atlas(stored, fresh) -> bool:
    """Two pitfall atlases (JSON) are the same: equal everywhere, except that a float array (a kernel's or a model's
    output, whose last bits depend on the CPU and its BLAS) may differ by rounding."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        if stored.get("$") == fresh.get("$") == "array" and stored.get("dtype", "").startswith("float"):
            import numpy as np

            from servelab_autograder.exercises import plain
            a, b = plain.decode(stored), plain.decode(fresh)
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.allclose(a, b, rtol=1e-4, atol=1e-5,
                                                                                  equal_nan=True))
        return stored.keys() == fresh.keys() and all(same_atlas(stored[k], fresh[k]) for k in stored)
    if isinstance(stored, list) and isinstance(fresh, list):
        return len(stored) == len(fresh) and all(same_atlas(a, b) for a, b in zip(stored, fresh))
    return stored == fresh


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
    """A chapter's solution notebook (solutions/<assignment>/<assignment>.ipynb), cell by cell; :meth:`namespace`
    leaves out the cells ``skip`` names (a chapter's demos, when no visible test reads what they make)."""

    def __init__(self, assignment: str, skip: tuple[str, ...] = ()):
        self.path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
        self.skip = frozenset(skip)

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
        """The "Common pitfalls" markdown cell, in lower case, without backticks and bold markers."""
        pitfalls_md = next(cell.source for cell in self.cells
                           if cell.kind == "markdown" and "## Common pitfalls" in cell.source)
        return pitfalls_md.replace("`", "").replace("**", "").lower()

    # ----------------------------------------------------------------------------------------------------
    # running it

    def runs(self, meta: dict) -> bool:
        """Whether :meth:`namespace` executes this code cell (not a test cell): every one but ``skip``."""
        return meta.get("grade_id") not in self.skip

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

    def assert_authoring_conventions(self, solution_outputs: bool = True) -> None:
        """The servelab kernel, every code cell's conventions (`conventional_code_cells`), each test cell ending with
        `print("<exercise>: visible tests pass")` (the drills: "drills: answered") and having printed just that,
        and (unless `solution_outputs` is False) no stored outputs in solution cells."""
        self.assert_servelab_kernel()
        for c, meta, source in self.conventional_code_cells():
            if meta.get("solution") and not solution_outputs:
                continue
            if meta.get("solution"):
                assert c.get("outputs") == [], meta["grade_id"]
            if meta.get("grade"):
                name = meta["grade_id"].removeprefix("test_")
                line = "drills: answered" if name == "drills" else f"{name}: visible tests pass"
                assert source.rstrip().endswith(f'print("{line}")'), meta["grade_id"]
                assert ["".join(o.get("text", "")) for o in c["outputs"]] == [line + "\n"], meta["grade_id"]

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
                assert meta["locked"] and re.fullmatch(r"setup_(\d+|drills)", meta["grade_id"])
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


class Proof:
    """What every chapter's grading test proves the same way, in this process, through the trusted engine
    (``servelab_autograder.judge.verdicts``): the requests, plain-data answers and verdicts of a sandboxed grading."""

    def __init__(self, assignment: str, notebook: Notebook):
        from servelab_autograder.judge import known_wrong, verdicts

        self.assignment, self.nb = assignment, notebook
        self.chapter = verdicts.table(assignment)
        self.pitfalls = verdicts.Pitfalls(self.chapter, ROOT)
        self.patches = known_wrong.pitfalls(ROOT, assignment)

    def solution(self, name: str | None = None) -> dict:
        """The solution (with pitfall ``name`` applied) as a learner's namespace, a fresh copy."""
        return dict(self.pitfalls.namespace(name))

    def grade(self, ns: dict, seed: int = 0, cells=None) -> dict:
        from servelab_autograder.judge import verdicts

        return verdicts.grade_namespace(self.chapter, ns, seed, pitfalls=self.pitfalls, cells=cells)

    def failing(self, ns: dict, seed: int = 0, cells=None) -> dict[str, str]:
        return {cell: v.message for cell, v in self.grade(ns, seed, cells).items() if not v.passed}

    def stubs(self) -> dict:
        """The released notebook's solution cells (and the chapter's setup cells) run as a learner's namespace."""
        import nbformat

        from servelab_autograder.judge import known_wrong

        nb = nbformat.read(paths.release_notebook(ROOT, self.assignment), as_version=4)
        solutions = known_wrong.solution_cells(nb)
        ns: dict = {}
        exec(self.chapter.prelude, ns)
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in solutions or gid in self.chapter.setup:
                try:
                    exec(compile(cell.source, gid, "exec"), ns)
                except NotImplementedError:
                    pass   # the drills cell raises at once
        return ns

    def assert_solution_passes(self, seed: int) -> None:
        assert self.failing(self.solution(), seed) == {}

    def assert_visible_tests_pass(self, ns: dict | None = None) -> None:
        ns = self.nb.namespace() if ns is None else ns
        for gid in self.nb.test_cells():
            exec(compile(python_source(self.nb.source(gid)), gid, "exec"), ns)

    def assert_table_names_real_cells(self, solution_ids: list[str], references_in: str, points: int = 2) -> None:
        """The chapter's table grades exactly the notebook's test cells (``points`` each; the solution cells are
        ``solution_ids``, in order), its demos are real cells that are not graded, and every reference the sandbox
        hides is a callable of the module ``references_in``."""
        tests = self.nb.test_cells()
        assert set(self.chapter.cells) == set(tests)
        assert self.nb.solution_ids() == list(solution_ids)
        assert {g: m["points"] for g, m in tests.items()} == {f"test_{g}": points for g in solution_ids}
        ids = {c.meta.get("grade_id") for c in self.nb.cells}
        assert set(self.chapter.demos) <= ids and not set(self.chapter.demos) & set(tests)
        for ref in self.chapter.references:
            module, name = ref.split(":")
            obj = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
            assert module == references_in and callable(obj), ref

    def assert_runs_draw_their_own_random_cases(self, cell: str) -> None:
        """Two seeds give ``cell`` the same fixed cases and different random ones."""
        from servelab_autograder.judge import verdicts

        ex = self.chapter.cells[cell]
        first, second = verdicts.cases(ex, 1), verdicts.cases(ex, 2)
        fixed = len(ex.fixed())
        assert first[:fixed] == second[:fixed] and first[fixed:] != second[fixed:]

    def assert_stubs_fail_every_cell(self) -> None:
        got = self.failing(self.stubs())
        assert set(got) == set(self.chapter.cells)
        for message in got.values():
            assert "NotImplementedError: fill in the function first" in message or "is not defined" in message, \
                message

    def assert_patch_loses_exactly_its_cells(self, patch, seeds=(0,)) -> None:
        """The patch applies and changes the solution; the cells whose functions it changes are graded (the others
        grade the solution's own code, which passes): exactly its ``fails`` lose, each with its pitfall's line
        first (graders show a failure's first line) and its ``says`` phrase."""
        from servelab_autograder.judge import verdicts

        assert patch.apply(self.pitfalls.solution) != self.pitfalls.solution
        ns = self.solution(patch.name)
        changed = verdicts.changed_cells(self.chapter, ns, self.solution())
        assert set(patch.fails) <= set(changed), changed
        for seed in seeds:
            got = self.failing(ns, seed, cells=changed)
            assert sorted(got) == sorted(patch.fails), got
            for cell, message in got.items():
                assert message.splitlines()[0] == patch.message, (cell, message)
                assert patch.says.lower() in message.lower()

    def assert_every_pitfall_is_one_patch(self, without=()) -> None:
        """Each item of the notebook's Common pitfalls is one patch, naming it (its message holds its `says:` phrase
        as written); every solution cell but ``without`` has a pitfall; no two patches share a message."""
        listed = self.nb.pitfalls_text()
        assert listed.count("\n- ") == len(self.patches), "each item of Common pitfalls is one known-wrong patch"
        for p in self.patches:
            # as written: a grading's feedback is matched against the phrase (tests/test_autograde.py)
            assert p.message.startswith("Pitfall: ") and p.says in p.message, f"{p.name}: {p.says!r} not in its message"
            assert p.says.lower().replace("`", "") in listed, f"{p.name}: 'Common pitfalls' does not say {p.says!r}"
            assert set(p.fails) <= set(self.chapter.cells)
        assert {c for p in self.patches for c in p.cells} == set(self.pitfalls.solution) - set(without)
        assert len({p.message for p in self.patches}) == len(self.patches)
