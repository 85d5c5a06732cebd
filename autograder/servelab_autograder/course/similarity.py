"""How alike the code of a chapter's submissions is, pairwise and against the chapter's solution and the library's
reference implementation: an HTML report for the instructor, made with copydetect.

    python -m servelab_autograder.course.similarity CH [--submitted DIR] [--out FILE] [--threshold T]
    make similarity CH=ch12                  # over autograder/submitted
    python hub/course.py similarity CH       # on the hub, over the collected submissions

What is compared: for each solution cell of the chapter (the drills excepted), the functions and classes a learner
wrote there, parsed and printed back by `ast` without their docstrings (so comments, blank lines and layout do not
count) and with each run of assignments in one canonical order of their data dependencies, one file per
cell. copydetect then replaces every name by its kind (variable, function, object) and every
string by one letter, so renaming does not hide a copy, and compares winnowed fingerprints of the token stream, so
reordering statements moves whole matching runs rather than breaking them. The release's stub of each cell is
boilerplate (its fingerprints never count), cells are compared only with the same cell of another submission or of
the references, and a function shorter than MIN_TOKENS tokens is left out: too short to be anyone's own. A
submission's cells are also compared whole (WHOLE, short functions included), so copying every cell shows even where
each is a formula long.

A pair is listed when either side's share of copied tokens exceeds the threshold. THRESHOLD was chosen on the
independent implementations in autograder/similarity/ (five per chapter, written differently, each graded correct):
their pairs, and each against the solution and the library, share at most 52%; planted copies (locals renamed,
statements swapped) at least 78%; tests/test_similarity.py keeps both sides of 65%.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import io
import json
import math
import sys
import tempfile
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat

from servelab_autograder.course.statements import ASSIGNMENTS, depends, each_block, parameters, stores
from servelab_autograder.judge import known_wrong, verdicts
from servelab_autograder.paths import chapters, release_notebook, repo_root, resolve, source_notebook

MIN_TOKENS = 30           # a function with fewer tokens than this (docstring excluded) is not compared
THRESHOLD = 0.65          # share of a side's tokens found in the other side, above which a pair is listed
NOISE, GUARANTEE = 25, 30  # copydetect's k-gram bounds, in characters of its filtered code
SOLUTION, LIBRARY = "reference-solution", "reference-library"
WHOLE = "all-cells"       # a submission's every solution cell together, short functions included
SKIP_CELLS = ("drills",)  # numbers, not code
IMPLEMENTATIONS = "autograder/similarity"  # <assignment>/<author>.py: independent implementations, for calibrating
CALIBRATION = "calibration.json"           # what `--calibrate` found, per chapter (digests of the files it graded)


@dataclass(frozen=True)
class Pair:
    """One cell of two submissions (or of a submission and a reference) whose code is alike."""

    cell: str
    first: str             # a learner
    second: str            # another learner, or SOLUTION / LIBRARY
    first_share: float     # share of the first side's tokens found in the second
    second_share: float


def tokens(code: str) -> int:
    """Python tokens in ``code``, layout tokens (newlines, indents) and comments not counted."""
    layout = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER,
              tokenize.COMMENT}
    try:
        return sum(1 for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in layout)
    except (tokenize.TokenError, SyntaxError):
        return len(code.split())


def _without_docstring(node: ast.AST) -> ast.AST:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
    for child in getattr(node, "body", []):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            _without_docstring(child)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        node.body = _canonical(node.body, stores(node) | parameters(node))
    return node


def _shape(stmt: ast.stmt, local: set[str]) -> str:
    """A statement with each local name replaced by one letter (globals, builtins and attributes kept): the order
    key that renaming the locals cannot change."""
    clone = ast.parse(ast.unparse(stmt)).body[0]
    for n in ast.walk(clone):
        if isinstance(n, ast.Name) and n.id in local:
            n.id = "V"
    return ast.unparse(clone)


def _canonical(body: list[ast.stmt], local: set[str]) -> list[ast.stmt]:
    """``body`` with each run of adjacent assignments put in one order that depends only on what they compute: a
    topological order of their data dependencies, ties broken by their shapes. Swapping independent statements,
    the cheapest disguise of a copy, then changes nothing that is compared."""
    out: list[ast.stmt] = []
    i = 0
    while i < len(body):
        if not isinstance(body[i], ASSIGNMENTS):
            out.append(body[i])
            i += 1
            continue
        j = i
        while j < len(body) and isinstance(body[j], ASSIGNMENTS):
            j += 1
        run = body[i:j]
        after = {k: {m for m in range(k) if depends(run[m], run[k])} for k in range(len(run))}
        done: list[int] = []
        while len(done) < len(run):
            ready = [k for k in range(len(run)) if k not in done and after[k] <= set(done)]
            done.append(min(ready, key=lambda k: _shape(run[k], local)))
        out += [run[k] for k in done]
        i = j
    each_block(out, lambda block: _canonical(block, local))
    return out


def comparable(source: str, min_tokens: int = MIN_TOKENS) -> str:
    """The code of one cell that is compared: each top-level function or class long enough, printed by `ast`
    without docstrings. A cell that does not parse is compared as written (its learner sees the syntax error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source if tokens(source) >= min_tokens else ""
    parts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            code = ast.unparse(_without_docstring(node))
            if tokens(code) >= min_tokens:
                parts.append(code)
    return "\n\n".join(parts) + ("\n" if parts else "")


def solution_cells(nb) -> dict[str, str]:
    """grade id -> source of every solution cell that holds code to compare."""
    return {gid: code for gid, code in known_wrong.solution_cells(nb).items() if gid not in SKIP_CELLS}


def library_references(assignment: str, names: set[str]) -> dict[str, str]:
    """function name -> source of the library's reference for each exercise of the chapter named in ``names``."""
    out = {}
    for ex in verdicts.table(assignment).exercises:
        ref = getattr(ex.spec, "reference", None)
        name = getattr(ex.spec, "name", "")
        if name in names and ref is not None:
            try:
                out[name] = inspect.getsource(ref)
            except (OSError, TypeError):
                continue
    return out


def submissions(submitted: Path, assignment: str) -> dict[str, Path]:
    """learner -> their notebook, in nbgrader's submitted layout ``<learner>/<assignment>/<assignment>.ipynb``."""
    found = sorted(submitted.glob(f"*/{assignment}/{assignment}.ipynb"))
    return {nb.parent.parent.name: nb for nb in found}


def stage(root: Path, assignment: str, learners: dict[str, dict[str, str]], folder: Path,
          min_tokens: int = MIN_TOKENS) -> None:
    """Write what copydetect compares under ``folder``: learners/<who>/<cell>.py, references/<which>/<cell>.py,
    and the release's stubs as boilerplate/<cell>.py."""
    solution = solution_cells(nbformat.read(source_notebook(root, assignment), as_version=4))
    release = release_notebook(root, assignment)
    stubs = solution_cells(nbformat.read(release, as_version=4)) if release.is_file() else {}
    cells = set(solution)

    def put(where: Path, cell: str, code: str) -> None:
        if code.strip():
            where.mkdir(parents=True, exist_ok=True)
            (where / f"{cell}.py").write_text(code, encoding="utf-8")

    def whole(code: dict[str, str]) -> str:
        return "\n".join(comparable(code[c], 0) for c in solution if c in code)

    for who, code in learners.items():
        for cell, source in code.items():
            if cell in cells:
                put(folder / "learners" / who, cell, comparable(source, min_tokens))
        put(folder / "learners" / who, WHOLE, whole(code))
    put(folder / "references" / SOLUTION, WHOLE, whole(solution))
    put(folder / "boilerplate", WHOLE, whole(stubs))
    for cell, source in solution.items():
        code = comparable(source, min_tokens)
        put(folder / "references" / SOLUTION, cell, code)
        defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef | ast.ClassDef)} \
            if code else set()
        refs = library_references(assignment, defined)
        put(folder / "references" / LIBRARY, cell, "\n\n".join(comparable(s, min_tokens) for s in refs.values()))
        # the stub's signature and docstring, printed the same way: its fingerprints never count as copying
        put(folder / "boilerplate", cell, comparable(stubs.get(cell, ""), 0))


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def _copydetect():
    """copydetect's CopyDetector, its k-grams hashed the same in every process: copydetect 0.5.0 hashes them with
    Python's `hash`, which is salted per process, so the same two files would share a little more or less from one
    run to the next (and a pair could cross the threshold)."""
    import copydetect.utils
    from copydetect import CopyDetector

    copydetect.utils.hash = _stable_hash     # its module's `hash`, looked up when it hashes
    return CopyDetector


def _report(detector) -> None:
    """copydetect's HTML report, with the caller's pyplot figures out of its way: it draws on pyplot's current
    figure and closes it, so a figure its caller left open (a chapter's plot with a constrained layout) would be
    drawn on, break its colorbar, and be closed. pyplot keeps its open figures in Gcf (no public way to set them
    aside); they are put back, the same one current."""
    import matplotlib
    from matplotlib._pylab_helpers import Gcf

    kept = dict(Gcf.figs)
    Gcf.figs.clear()
    try:
        with warnings.catch_warnings(), matplotlib.rc_context({"figure.constrained_layout.use": False,
                                                               "figure.autolayout": False}):
            warnings.simplefilter("ignore", DeprecationWarning)   # copydetect 0.5.0 reads its template so
            detector.generate_html_report()
    finally:
        for number, manager in kept.items():
            Gcf.figs[number] = manager


def compare(root: Path, assignment: str, learners: dict[str, dict[str, str]], out: Path | None = None,
            threshold: float = THRESHOLD, min_tokens: int = MIN_TOKENS) -> list[Pair]:
    """The pairs above ``threshold``: ``learners`` maps a learner to {grade id: source of their solution cell}.
    Writes copydetect's HTML report (every listed pair with both sides shown, copied runs highlighted) to ``out``."""
    CopyDetector = _copydetect()
    with tempfile.TemporaryDirectory(prefix="servelab-similarity-") as tmp:
        folder = Path(tmp)
        stage(root, assignment, learners, folder, min_tokens)
        if not (folder / "learners").is_dir():
            return []
        boiler = [str(folder / "boilerplate")] if (folder / "boilerplate").is_dir() else []
        detector = CopyDetector(
            test_dirs=[str(folder / "learners")], ref_dirs=[str(folder / "learners"), str(folder / "references")],
            boilerplate_dirs=boiler, extensions=["py"], noise_t=NOISE, guarantee_t=GUARANTEE,
            display_t=threshold, same_name_only=True, ignore_leaf=True, autoopen=False, silent=True,
            out_file=str(out or folder / "report.html"))
        detector.run()
        if not len(getattr(detector, "similarity_matrix", [])):
            return []
        listed = detector.get_copied_code_list()
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            _report(detector)
    pairs = []
    for first_share, second_share, first, second, *_ in listed:
        a, b = Path(first), Path(second)
        pairs.append(Pair(a.stem, a.parent.name, b.parent.name, round(float(first_share), 3),
                          round(float(second_share), 3)))
    return sorted(pairs, key=lambda p: (-max(p.first_share, p.second_share), p.cell, p.first, p.second))


def read_learners(submitted: Path, assignment: str) -> dict[str, dict[str, str]]:
    out = {}
    for who, path in submissions(submitted, assignment).items():
        try:
            out[who] = solution_cells(nbformat.read(path, as_version=4))
        except Exception as exc:  # a malformed notebook is the grader's to report; here it is left out, and said so
            print(f"  {who}: left out, its notebook does not read ({type(exc).__name__})", file=sys.stderr)
    return out


def implementations(root: Path, assignment: str) -> dict[str, dict[str, str]]:
    """author -> {grade id: source} of the chapter's independent implementations: each file in
    autograder/similarity/<assignment>/ holds solution cells, each opened by a line ``# %% <grade id>``."""
    out = {}
    for path in sorted((root / IMPLEMENTATIONS / assignment).glob("*.py")):
        cells: dict[str, list[str]] = {}
        current = None
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.startswith("# %% "):
                current = line[5:].strip()
                cells[current] = []
            elif current is not None:
                cells[current].append(line)
        out[path.stem] = {gid: "".join(lines).strip("\n") + "\n" for gid, lines in cells.items()}
    return out


def failing_cells(assignment: str, cells: dict[str, str], seed: int = 0) -> dict[str, str]:
    """test cell -> message for each graded cell that ``cells`` (grade id -> source; the solution's for any cell not
    given) fails, graded in this process through the trusted engine: an implementation used for calibrating must
    be a correct one."""
    chapter = verdicts.table(assignment)
    pitfalls = verdicts.Pitfalls(chapter, repo_root())
    unknown = set(cells) - set(pitfalls.solution)
    if unknown:
        return {"(cells)": f"no solution cell {sorted(unknown)} in {assignment}"}
    ns = pitfalls.run({**pitfalls.solution, **cells}, f"__independent_{assignment}__")
    got = verdicts.grade_namespace(chapter, ns, seed, pitfalls=pitfalls)
    return {cell: v.message for cell, v in got.items() if not v.passed}


def calibration(root: Path, assignment: str) -> dict[str, tuple[float, float]]:
    """cell -> (the highest share between two independent implementations, or one and a reference; the lowest share
    of a planted copy: an implementation or the solution with its locals renamed and statements swapped)."""
    from servelab_autograder.course.disguise import disguise

    authors = implementations(root, assignment)
    solution = solution_cells(nbformat.read(source_notebook(root, assignment), as_version=4))
    copies = {f"copy-of-{who}": {c: disguise(src) for c, src in code.items()} for who, code in authors.items()}
    copies["copy-of-solution"] = {c: disguise(src) for c, src in solution.items()}
    planted = compare(root, assignment, {**authors, **copies}, threshold=0.0)
    independent = [p for p in planted if p.first not in copies and p.second not in copies]
    out: dict[str, tuple[float, float]] = {}
    for cell in [*solution, WHOLE]:
        high = max((max(p.first_share, p.second_share) for p in independent if p.cell == cell), default=0.0)
        shares = {}
        for p in planted:
            if p.cell != cell:
                continue
            for a, b, share in ((p.first, p.second, p.first_share), (p.second, p.first, p.second_share)):
                if a.startswith("copy-of-") and b in (a[8:], SOLUTION if a == "copy-of-solution" else None):
                    shares[a] = max(shares.get(a, 0.0), share)
        low = min(shares.values(), default=float("nan")) if shares else float("nan")
        out[cell] = (high, low)
    return out


def digests(root: Path, assignment: str) -> dict[str, str]:
    """author -> sha256 of their implementation file, as graded when the calibration was recorded."""
    return {p.stem: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / IMPLEMENTATIONS / assignment).glob("*.py"))}


def record(root: Path, assignment: str, graded: dict[str, list[str]], shares: dict) -> None:
    """Write what `--calibrate` found into autograder/similarity/calibration.json: grading the implementations takes
    minutes, so the test suite checks this record against the files instead of grading them again."""
    path = root / IMPLEMENTATIONS / CALIBRATION
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[assignment] = {"digests": digests(root, assignment), "failing": graded,
                        "cells": {c: {"independent": round(h, 4), "planted": None if math.isnan(lo) else round(lo, 4)}
                                  for c, (h, lo) in shares.items()}}
    path.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help="e.g. ch12 or ch12_queueing_and_overload")
    parser.add_argument("--submitted", type=Path, default=None,
                        help="nbgrader's submitted folder (default: autograder/submitted)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the HTML report (default: autograder/runs/similarity/<chapter>.html)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--calibrate", action="store_true",
                        help="grade the chapter's independent implementations, print per cell the highest share "
                             "between them and the lowest share of a planted copy, and record both in "
                             f"{IMPLEMENTATIONS}/{CALIBRATION}")
    args = parser.parse_args(argv)
    root = repo_root()
    try:
        (assignment,) = resolve([args.chapter], chapters(root))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.calibrate:
        authors = implementations(root, assignment)
        graded = {}
        for who, cells in authors.items():
            bad = failing_cells(assignment, cells)
            graded[who] = sorted(bad)
            print(f"  {who}: " + ("passes every graded cell" if not bad else f"FAILS {bad}"))
        print(f"{assignment}: {len(authors)} independent implementations; per cell, the highest share between two "
              f"of them (or one and a reference) and the lowest share of a planted copy; threshold {THRESHOLD:.0%}")
        shares = calibration(root, assignment)
        for cell, (high, low) in shares.items():
            print(f"  {cell:<28} independent {high:6.1%}   planted copies {low:6.1%}")
        record(root, assignment, graded, shares)
        return 0 if not any(graded.values()) else 1
    submitted = args.submitted or root / "autograder" / "submitted"
    learners = read_learners(submitted, assignment)
    if len(learners) < 1:
        print(f"no submissions of {assignment} under {submitted} (<learner>/{assignment}/{assignment}.ipynb)",
              file=sys.stderr)
        return 2
    out = args.out or root / "autograder" / "runs" / "similarity" / f"{assignment}.html"
    pairs = compare(root, assignment, learners, out, args.threshold)
    print(f"{assignment}: {len(learners)} submissions, {len(pairs)} pairs of cells above {args.threshold:.0%} "
          f"(functions under {MIN_TOKENS} tokens left out)")
    for p in pairs:
        print(f"  {p.cell:<24} {p.first:<20} {p.second:<20} {p.first_share:6.0%} {p.second_share:6.0%}")
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
