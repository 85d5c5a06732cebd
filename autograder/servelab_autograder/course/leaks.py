"""Leak scanning: no line of a solution or hidden-test region, and no drill's answer, may appear in what a
learner receives (the released notebook, its outputs, the chapter folder's other files)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from servelab_autograder.paths import RELEASE_DIR, chapters, read_json, repo_root, source_notebook, visible_files

# nbgrader's delimiters (ClearSolutions / ClearHiddenTests defaults) and the stub it writes instead.
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()", "YOUR ANSWER HERE"}


def _regions(source: str) -> tuple[list[str], list[str]]:
    """Split a cell's lines into (inside solution/hidden regions, outside), markers dropped."""
    inside, outside, depth = [], [], 0
    for line in source.splitlines():
        upper = line.upper()
        if "BEGIN SOLUTION" in upper or "BEGIN HIDDEN TESTS" in upper:
            depth += 1
            continue
        if "END SOLUTION" in upper or "END HIDDEN TESTS" in upper:
            depth = max(0, depth - 1)
            continue
        (inside if depth else outside).append(line)
    return inside, outside


def _text_lines(obj) -> list[str]:
    return "".join(obj).splitlines() if isinstance(obj, list) else str(obj).splitlines()


def secret_lines(solution_nb: Path) -> set[str]:
    """Non-trivial lines (stripped) of every solution region and hidden-test block of a source
    notebook that appear nowhere else in it: if one of them shows up in the release, it leaked."""
    nb = read_json(solution_nb)
    secret, public = set(), set(STUB_LINES)
    for cell in nb.get("cells", []):
        inside, outside = _regions("".join(cell.get("source", "")))
        secret.update(ln.strip() for ln in inside)
        public.update(ln.strip() for ln in outside)
        for out in cell.get("outputs", []):
            for key in ("text", "data"):
                if key == "text" and "text" in out:
                    public.update(ln.strip() for ln in _text_lines(out["text"]))
                elif key == "data":
                    for value in out.get("data", {}).values():
                        if isinstance(value, list | str):
                            public.update(ln.strip() for ln in _text_lines(value))
    return {ln for ln in secret - public if len(ln) >= 4 and re.search(r"[A-Za-z0-9]", ln)}


def _released_lines(path: Path) -> list[tuple[str, str]]:
    """(where, stripped line) for every line of text in a released file."""
    if path.suffix == ".ipynb":
        try:
            nb = read_json(path)
        except ValueError:
            return [(str(path), ln.strip()) for ln in path.read_text(errors="replace").splitlines()]
        lines = []
        for i, cell in enumerate(nb.get("cells", [])):
            chunks = [cell.get("source", "")]
            for out in cell.get("outputs", []):
                chunks.append(out.get("text", ""))
                chunks.extend(v for v in out.get("data", {}).values() if isinstance(v, list | str))
            for chunk in chunks:
                lines.extend((f"{path} cell {i}", ln.strip()) for ln in _text_lines(chunk))
        lines.extend((f"{path} metadata", ln.strip()) for ln in json.dumps(nb.get("metadata", {})).splitlines())
        return lines
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return []  # binary (an image): nothing to compare line by line
    return [(str(path), ln.strip()) for ln in text.splitlines()]


_NUMBER = re.compile(r"(?<![\w.])-?\d[\d_,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def drill_answers(assignment: str) -> list[tuple[str, float, float]]:
    """(drill, answer, how close an answer must be to be graded right) for the chapter's graded drills."""
    from servelab_autograder.judge import verdicts

    chapter = verdicts.table(assignment)
    if chapter is None or chapter.drills is None:
        return []
    out = []
    for d in chapter.drills.drills:
        value = float(d.expected())
        out.append((d.name, value, max(d.abs_tol, d.rel_tol * abs(value), 1e-9 * abs(value))))
    return out


def _output_numbers(path: Path) -> list[tuple[str, float, float]]:
    """(where, number, half a unit of its last printed digit) for every number of two or more significant
    digits printed in the stored outputs of a notebook."""
    if path.suffix != ".ipynb":
        return []
    try:
        nb = read_json(path)
    except ValueError:
        return []
    found = []
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items()
                                             if k.startswith("text/") and isinstance(v, list | str)]
            for text in texts:
                for token in _NUMBER.findall("".join(text) if isinstance(text, list) else text):
                    mantissa = re.split(r"[eE]", token.replace(",", "").replace("_", ""))[0]
                    if len(mantissa.replace("-", "").replace(".", "").lstrip("0")) < 2:
                        continue  # one significant digit ("8", "0.3") tells no answer
                    exponent = int(re.split(r"[eE]", token)[1]) if re.search(r"[eE]", token) else 0
                    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
                    try:
                        found.append((f"{path} cell {i} output", float(token.replace(",", "").replace("_", "")),
                                      0.5 * 10.0 ** (exponent - decimals)))
                    except ValueError:
                        pass
    return found


def find_leaks(root: Path | None = None, assignments: list[str] | None = None,
               release_dir: Path | None = None) -> list[str]:
    """Everything in a release that must not be there: nbgrader markers anywhere in course/<a>/, any line
    of <a>'s solution regions or hidden tests, and a graded drill's answer printed in an output: a number that
    is the answer rounded to the digits shown and would be graded right (a whole answer of one digit, or a
    printed number of one significant digit, is too common to tell). Returns one description per leak."""
    root = root or repo_root()
    release_dir = release_dir or root / RELEASE_DIR
    leaks = []
    for a in assignments if assignments is not None else chapters(root):
        folder = release_dir / a
        if not folder.is_dir():
            continue
        secrets = secret_lines(source_notebook(root, a))
        answers = [(name, v, tol) for name, v, tol in drill_answers(a) if not (v.is_integer() and abs(v) < 10)]
        for path in visible_files(folder):
            for where, number, half_unit in _output_numbers(path):
                for name, value, tol in answers:
                    # the answer itself, rounded to the digits printed, and close enough to be graded right
                    if abs(number - value) <= min(tol, half_unit) * (1 + 1e-9):
                        leaks.append(f"{where}: {number:g}, the answer to {name}")
            for where, line in _released_lines(path):
                upper = line.upper()
                marker = next((m for m in MARKERS if m in upper), None)
                if marker:
                    leaks.append(f"{where}: nbgrader marker {marker!r}")
                elif line in secrets:
                    leaks.append(f"{where}: solution/hidden-test line {line!r}")
    return leaks


