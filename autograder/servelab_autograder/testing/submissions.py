"""Submissions with known outcomes, in nbgrader's submitted layout, for exercising the autograder.

    python -m servelab_autograder.testing.submissions DIR [assignment ...]

writes ``DIR/<student>/<assignment>/<assignment>.ipynb`` for every chapter (or those named):

    solution              the released notebook with every solution cell filled in (a perfect learner)
    stubs                 the released notebook, untouched
    wrong-<pitfall>       the solution with autograder/known_wrong/<a>/<pitfall>.diff applied
    copied-drills         (a chapter whose drills are drawn per learner) the solution with the drills' answers
                          typed in as numbers: the workbook's own, right for another learner, not for this one
    tamper-<kind>         malformed JSON, another chapter's notebook, a renamed function, an endless loop
                          that swallows KeyboardInterrupt, os._exit(0), a deleted / edited / duplicated /
                          metadata-stripped test cell
    hostile-<kind>        (with --hostile) the solution plus one attack on the grader or the classmates:
                          see :func:`hostile`; armed only inside a grading sandbox

and ``DIR/expected.json``: ``{assignment: {student: {status, score, max_score, below_full, fails,
message, description}}}`` (``score`` is null where only "below full marks" is promised; ``message`` is
text the grader's message must contain; ``fails`` are test cells that must lose points).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

from servelab_autograder.judge import known_wrong as known_wrong_patches
from servelab_autograder.paths import chapters, release_notebook, repo_root
from servelab_autograder.testing.hostile import hostile
from servelab_autograder.testing.notebooks import (
    cell_index,
    complete_submission,
    fresh,
    grade_id,
    is_solution,
    is_test,
    load_release,
    load_source,
    max_score,
    solution_code,
)

SWALLOWING_LOOP = """\
while True:  # tamper: an endless loop that also swallows the grader's KeyboardInterrupt
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass
"""
HARD_EXIT = "import os\nos._exit(0)  # tamper: kill the kernel\n"


# ------------------------------------------------------------------------------------------------
# which tests depend on which code (for the expected outcomes of tamper cases)


def defined_names(source: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments, imports)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _mentions(source: str, names: set[str]) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", source) for n in names)


def affected_tests(assignment: str, broken: set[str], root: Path | None = None) -> list[str]:
    """Test cells that lose their points when the names in ``broken`` are undefined: those that
    use them directly or through a solution cell whose code uses them."""
    src = load_source(assignment, root)
    broken = set(broken)
    changed = True
    while changed:
        changed = False
        for cell in src.cells:
            if is_solution(cell) and _mentions(cell.source, broken):
                new = defined_names(known_wrong_patches.strip_solution_markers(cell.source)) - broken
                if new:
                    broken |= new
                    changed = True
    return [grade_id(c) for c in src.cells if is_test(c) and _mentions(c.source, broken)]


# ------------------------------------------------------------------------------------------------
# known-wrong submissions


def pitfalls(assignment: str, root: Path | None = None) -> list[dict]:
    """The chapter's known-wrong submissions: its patches (``*.diff``, see servelab_autograder.judge.known_wrong)
    applied to the solution."""
    root = root or repo_root()
    answers = solution_code(assignment, root)
    out = []
    for p in known_wrong_patches.pitfalls(root, assignment):
        patched = p.apply(answers)
        out.append({"name": p.name, "replace": {gid: patched[gid] for gid in p.cells}, "fails": list(p.fails),
                    "message": p.says, "description": p.message})
    return out


def known_wrong(assignment: str, root: Path | None = None) -> dict[str, tuple]:
    """pitfall name -> (notebook, pitfall info): the complete submission with REPLACE applied."""
    out = {}
    for info in pitfalls(assignment, root):
        nb = complete_submission(assignment, root)
        for cell in nb.cells:
            if is_solution(cell) and grade_id(cell) in info["replace"]:
                cell.source = info["replace"][grade_id(cell)]
        out[info["name"]] = (nb, info)
    return out


# ------------------------------------------------------------------------------------------------
# tampered submissions


def _neuter_asserts(source: str) -> str:
    """Every assert statement replaced by ``pass`` (same indentation)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "pass\n"
    lines = source.splitlines()
    asserts = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assert)), key=lambda n: -n.lineno)
    if not asserts:
        return "pass\n"
    for node in asserts:
        indent = lines[node.lineno - 1][: node.col_offset]
        lines[node.lineno - 1: node.end_lineno] = [indent + "pass"]
    return "\n".join(lines) + "\n"




def tamper(assignment: str, root: Path | None = None, others: list[str] | None = None) -> dict[str, tuple]:
    """kind -> (notebook or raw text, expected outcome)."""
    root = root or repo_root()
    release = fresh(load_release(assignment, root))
    full = complete_submission(assignment, root)
    top = max_score(release)
    tests = [grade_id(c) for c in release.cells if is_test(c)]
    answers = solution_code(assignment, root)
    # solution cells with what they define and which tests break without them
    sol = []
    for c in release.cells:
        if is_solution(c):
            names = defined_names(answers[grade_id(c)])
            sol.append((grade_id(c), names, affected_tests(assignment, names, root)))
    out: dict[str, tuple] = {}

    def own_tests(gid: str, affected: list[str]) -> list[str]:
        # The test cell named after an exercise surely loses its points when that exercise breaks;
        # other cells that mention its names may not (a check can pair the rest with the reference),
        # so they are not counted on.
        return [f"test_{gid}"] if f"test_{gid}" in tests else affected

    def expect(status, score=None, message="", fails=(), below=False, what=""):
        return {"status": status, "score": score, "max_score": top, "below_full": below,
                "fails": list(fails), "message": message, "description": what}

    # malformed JSON: the complete notebook cut in half
    text = nbformat.writes(full)
    out["malformed"] = (text[: len(text) // 2], expect("malformed", 0.0, "not a notebook",
                                                       what="truncated JSON"))

    # another chapter's notebook in this chapter's folder (or foreign grade ids when alone)
    other = next((o for o in (others or []) if o != assignment), None)
    if other:
        out["foreign"] = (complete_submission(other, root),
                          expect("wrong-assignment", 0.0, f"this is {other}'s notebook",
                                 what=f"{other}'s complete notebook submitted as {assignment}"))
    else:
        nb = copy.deepcopy(full)
        for cell in nb.cells:
            if grade_id(cell):
                cell.metadata.nbgrader["grade_id"] = "foreign_" + grade_id(cell)
        out["foreign"] = (nb, expect("wrong-assignment", 0.0, f"not {assignment}'s notebook",
                                     what="a notebook whose graded cells belong to no chapter"))

    # a function renamed: pick one whose loss leaves other tests passing, if any
    functions = [(gid, n, affected_tests(assignment, {n}, root)) for gid, names, _ in sol for n in sorted(names)
                 if re.search(rf"^def {re.escape(n)}\(", answers[gid], re.M)]
    functions = [f for f in functions if f[2]]
    if functions:
        gid, name, fails = min(functions, key=lambda f: len(f[2]))
        nb = copy.deepcopy(full)
        cell = nb.cells[cell_index(nb, gid)]
        cell.source = re.sub(rf"^def {re.escape(name)}\(", f"def {name}_v2(", cell.source, count=1, flags=re.M)
        out["renamed"] = (nb, expect("graded", None, f"NameError: name '{name}' is not defined", own_tests(gid, fails),
                                     below=True, what=f"{name} renamed to {name}_v2"))

    # an endless loop that swallows KeyboardInterrupt, at the top of a solution cell
    if sol:
        candidates = [s for s in reversed(sol) if s[2]] or list(reversed(sol))
        gid, _, fails = min(candidates, key=lambda s: len(s[2]))
        nb = copy.deepcopy(full)
        cell = nb.cells[cell_index(nb, gid)]
        cell.source = SWALLOWING_LOOP + cell.source
        fails = own_tests(gid, fails)
        out["loop"] = (nb, expect("cell-timeout", None, f"cell {gid}: this cell used more than", fails,
                                  below=bool(fails), what=f"endless loop swallowing KeyboardInterrupt in {gid}"))

        # os._exit(0) in the first solution cell
        gid = sol[0][0]
        nb = copy.deepcopy(full)
        cell = nb.cells[cell_index(nb, gid)]
        cell.source = HARD_EXIT + cell.source
        fails = own_tests(gid, sol[0][2])
        out["exit"] = (nb, expect("kernel-died", None, f"cell {gid}: the kernel died in it", fails, below=True,
                                  what=f"os._exit(0) in {gid}, graded again without that cell"))

    if tests:
        first = tests[0]
        # a deleted test cell: put back and graded
        nb = copy.deepcopy(full)
        del nb.cells[cell_index(nb, first)]
        out["deleted-test"] = (nb, expect("repaired", top, f"test cell {first} was missing",
                                          what=f"{first} deleted"))

        # an edited test cell (asserts -> pass) whose solution was never written
        nb = copy.deepcopy(full)
        cell = nb.cells[cell_index(nb, first)]
        cell.source = _neuter_asserts(cell.source)
        owner = next((s for s in reversed(sol) if cell_index(full, s[0]) < cell_index(full, first)), None)
        if owner:
            stub = release.cells[cell_index(release, owner[0])].source
            nb.cells[cell_index(nb, owner[0])].source = stub
        fails = [first]   # restored from the release, it runs against the stub
        out["edited-test"] = (nb, expect("repaired", None, f"test cell {first} was edited", fails, below=True,
                                         what=f"{first}'s asserts replaced by pass, its exercise left unsolved"))

        # a duplicated grade cell (JupyterLab copy/paste)
        nb = copy.deepcopy(full)
        i = cell_index(nb, first)
        twin = copy.deepcopy(nb.cells[i])
        if "id" in twin:
            twin["id"] = (twin["id"] + "-copy")[-64:]
        nb.cells.insert(i + 1, nbformat.from_dict(twin))
        out["duplicated-cell"] = (nb, expect("repaired", top, f"cell {first} appears 2 times",
                                             what=f"{first} pasted twice"))

        # a test cell whose nbgrader metadata was stripped
        last = tests[-1]
        nb = copy.deepcopy(full)
        cell = nb.cells[cell_index(nb, last)]
        cell.metadata.pop("nbgrader", None)
        cell.metadata.pop("tags", None)
        out["stripped-metadata"] = (nb, expect("repaired", top, f"cell {last} had lost its grading metadata",
                                               what=f"{last}'s nbgrader metadata removed"))
    return out


# ------------------------------------------------------------------------------------------------


def all_submissions(assignment: str, root: Path | None = None, others: list[str] | None = None) -> dict:
    """student id -> (notebook or raw text, expected outcome) for one chapter."""
    root = root or repo_root()
    release = fresh(load_release(assignment, root))
    top = max_score(release)
    subs = {
        "solution": (complete_submission(assignment, root),
                     {"status": "graded", "score": top, "max_score": top, "below_full": False, "fails": [],
                      "message": "", "description": "every solution cell filled from solutions/"}),
        "stubs": (release, {"status": "graded", "score": 0.0, "max_score": top, "below_full": True, "fails": [],
                            "message": "NotImplementedError", "description": "the release, unchanged"}),
    }
    for name, (nb, info) in known_wrong(assignment, root).items():
        subs[f"wrong-{name}"] = (nb, {"status": "graded", "score": None, "max_score": top, "below_full": True,
                                      "fails": info["fails"], "message": info["message"],
                                      "description": info["description"]})
    copied = copied_drills(assignment, root)
    if copied is not None:
        subs["copied-drills"] = copied
    for kind, (nb, exp) in tamper(assignment, root, others).items():
        subs[f"tamper-{kind}"] = (nb, exp)
    return subs


def copied_drills(assignment: str, root: Path | None = None) -> tuple | None:
    """(notebook, expected) for answers copied from another learner: the solution whose drills cell assigns the
    workbook's own answers as numbers. None for a chapter whose drills are not drawn per learner."""
    from servelab_autograder.judge.verdicts import Pitfalls, table

    root = root or repo_root()
    chapter = table(assignment)
    if chapter is None or chapter.drills is None or not any(d.variant for d in chapter.drills.drills):
        return None
    theirs = Pitfalls(chapter, root).namespace(None)
    nb = complete_submission(assignment, root)
    test = chapter.drills.cell
    cell = nb.cells[cell_index(nb, test) - 1]          # the drills' solution cell stands before their test cell
    cell.source = "".join(f"{d.name} = {theirs[d.name]!r}  # copied\n" for d in chapter.drills.drills)
    points = nb.cells[cell_index(nb, test)].metadata.nbgrader["points"]
    top = max_score(fresh(load_release(assignment, root)))
    return nb, {"status": "graded", "score": top - points, "max_score": top, "below_full": True, "fails": [test],
                "message": "", "description": "the drills' answers copied from the workbook's own numbers"}


def write_one(directory: Path, student: str, assignment: str, nb) -> Path:
    """``directory/<student>/<assignment>/<assignment>.ipynb`` holding ``nb`` (a notebook or raw text)."""
    path = Path(directory) / student / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else nbformat.writes(nb), encoding="utf-8")
    return path


def write_submissions(directory: Path, assignments: list[str] | None = None, root: Path | None = None,
                      with_hostile: bool = False, known: list[str] | None = None) -> dict:
    """Write every submission of every chapter into ``directory`` (with ``with_hostile``, the hostile ones
    too, aimed at ``known`` paths besides the repository and ``directory``); returns (and writes) expected.json."""
    root = root or repo_root()
    chapters_released = [a for a in chapters(root) if release_notebook(root, a).is_file()]
    assignments = assignments or chapters_released
    directory = Path(directory)
    expected: dict[str, dict] = {}
    for a in assignments:
        expected[a] = {}
        subs = all_submissions(a, root, chapters_released)
        if with_hostile:
            subs.update({f"hostile-{k}": v for k, v in
                         hostile(a, root, [str(directory.resolve()), *(known or [])]).items()})
        for student, (nb, exp) in subs.items():
            write_one(directory, student, a, nb)
            expected[a][student] = exp
    (directory / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")
    return expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servelab_autograder.testing.submissions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="where to write <student>/<assignment>/<assignment>.ipynb")
    parser.add_argument("assignments", nargs="*", help="chapters (default: all)")
    parser.add_argument("--hostile", action="store_true",
                        help="also the hostile submissions (armed only inside a grading sandbox)")
    args = parser.parse_args(argv)
    known = chapters()
    unknown = [a for a in args.assignments if a not in known]
    if unknown:
        print(f"unknown chapter(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    unreleased = [a for a in (args.assignments or known) if not release_notebook(repo_root(), a).is_file()]
    if unreleased:
        print(f"no release in course/ for {', '.join(unreleased)}: run `make release`", file=sys.stderr)
        return 2
    expected = write_submissions(args.directory, args.assignments or None, with_hostile=args.hostile)
    for a, subs in expected.items():
        print(f"{a}: {len(subs)} submissions ({', '.join(subs)})")
    print(f"expected outcomes: {args.directory / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
