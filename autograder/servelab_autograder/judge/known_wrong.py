"""Known-wrong submissions as small patches against the solution: the one place each pitfall is written.

``autograder/known_wrong/<assignment>/<name>.diff`` reads as the lines it changes::

    Pitfall: a batch's requests run side by side, so a batch costs the max of its lengths, not their sum.
    fails: test_simulate_static
    says: not their sum
    --- simulate_static
    +++ simulate_static
    @@
             for i in batch:
                 finish[i] = t + out_lens[i]
    -        t += max(out_lens[i] for i in batch)  # the whole batch waits for its longest request
    +        t += sum(out_lens[i] for i in batch)

The first line is the pitfall as learners read it: the grader puts it on the first line of a failure when a
learner's result is what this patch returns. ``fails:`` lists the test cells it must lose; ``says:`` is the
phrase that names it, which the chapter's "Common pitfalls" list and each of those cells' failure show.
Then a unified diff against solution cells, each named by its grade id after ``---``: a hunk's context and
removed lines must occur exactly once in that cell (line numbers are not needed and not read). The solution
cell is the code a learner would type: the notebook's solution cell without its ``### BEGIN/END SOLUTION``
lines.

The grader uses the patches twice: applied to the complete submission they make the known-wrong notebooks
the tests grade, and run on the trusted side they name the pitfall behind a wrong result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

KNOWN_WRONG = "autograder/known_wrong"


class BadPatch(ValueError):
    """A known-wrong patch that cannot be read or no longer applies (the message says which and why)."""


@dataclass(frozen=True)
class Pitfall:
    name: str                                            # the file's stem
    message: str                                         # the first line: what learners read
    fails: tuple[str, ...]                               # test cells that must lose their points
    says: str                                            # the phrase naming it (pitfall list, failures)
    hunks: tuple[tuple[str, str, str], ...]              # (solution cell, old text, new text)
    path: Path

    @property
    def cells(self) -> set[str]:
        return {cell for cell, _, _ in self.hunks}

    def apply(self, solution: dict[str, str]) -> dict[str, str]:
        """``solution`` (grade id -> source) with this patch applied; raises BadPatch unless every hunk
        matches its cell exactly once."""
        out = dict(solution)
        for cell, old, new in self.hunks:
            if cell not in out:
                raise BadPatch(f"{self.path.name}: no solution cell {cell!r}")
            count = out[cell].count(old)
            if count != 1:
                where = "does not occur" if count == 0 else f"occurs {count} times"
                raise BadPatch(f"{self.path.name}: a hunk of {cell} {where} in the solution:\n{old}")
            out[cell] = out[cell].replace(old, new)
        return out


def load(path: Path) -> Pitfall:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("--- ")), None)
    if start is None or start < 3:
        raise BadPatch(f"{Path(path).name}: expected the pitfall's line, 'fails:' and 'says:' lines, then a diff")
    message = lines[0].strip()
    header = dict(ln.split(":", 1) for ln in lines[1:start] if ":" in ln)
    fails, says = header.get("fails", "").split(), header.get("says", "").strip()
    if not message or not fails or not says:
        raise BadPatch(f"{Path(path).name}: the first line names the pitfall, then 'fails:' lists test cells and "
                       f"'says:' the phrase that names it")
    hunks, cell, old, new = [], None, None, None

    def close():
        if cell is not None and old is not None:
            if old == new:
                raise BadPatch(f"{Path(path).name}: a hunk of {cell} changes nothing")
            hunks.append((cell, "\n".join(old), "\n".join(new)))

    for ln in lines[start:]:
        if ln.startswith("--- "):
            close()
            cell, old, new = ln[4:].strip(), None, None
        elif ln.startswith("+++ "):
            continue
        elif ln.startswith("@@"):
            close()
            old, new = [], []
        elif old is None:
            raise BadPatch(f"{Path(path).name}: a line outside a hunk: {ln!r}")
        elif ln.startswith(" ") or ln == "":
            old.append(ln[1:])
            new.append(ln[1:])
        elif ln.startswith("-"):
            old.append(ln[1:])
        elif ln.startswith("+"):
            new.append(ln[1:])
        else:
            raise BadPatch(f"{Path(path).name}: not a diff line: {ln!r}")
    close()
    if not hunks:
        raise BadPatch(f"{Path(path).name}: no hunks")
    return Pitfall(Path(path).stem, message, tuple(fails), says, tuple(hunks), Path(path))


def folder(root: Path, assignment: str) -> Path:
    return Path(root) / KNOWN_WRONG / assignment


def pitfalls(root: Path, assignment: str) -> list[Pitfall]:
    """The chapter's known-wrong patches, by name."""
    return [load(p) for p in sorted(folder(root, assignment).glob("*.diff"))]


def strip_solution_markers(source: str) -> str:
    """The solution as a learner would type it: the ``### BEGIN/END SOLUTION`` lines removed."""
    return "\n".join(ln for ln in source.splitlines() if not re.search(r"(BEGIN|END) SOLUTION", ln))


def solution_cells(nb) -> dict[str, str]:
    """grade id -> the code a perfect learner puts in that solution cell (``nb``: the source notebook)."""
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            out[meta["grade_id"]] = strip_solution_markers(cell.source)
    return out
