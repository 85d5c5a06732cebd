"""A submission before it is graded: loaded and pre-checked (valid JSON, nbformat and Unicode, the right
chapter by its grade ids), and repaired where a learner can break it by accident; read against the graded
cells of the chapter's release (:class:`GradedCells`)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024


def short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def digest_file(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {})
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


@dataclass


class GradedCells:
    name: str
    release: nbformat.NotebookNode
    order: list[str] = field(default_factory=list)  # grade ids in notebook order
    cells: dict = field(default_factory=dict)  # grade id -> released cell
    max_score: float = 0.0

    @classmethod
    def from_release(cls, name: str, path: Path) -> GradedCells:
        nb = nbformat.read(path, as_version=4)
        ch = cls(name, nb)
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid:
                ch.order.append(gid)
                ch.cells[gid] = cell
                if nbgrader_meta(cell).get("grade"):
                    ch.max_score += float(nbgrader_meta(cell).get("points", 0) or 0)
        return ch

    def is_test(self, gid: str) -> bool:
        meta = nbgrader_meta(self.cells[gid])
        return bool(meta.get("grade")) and not meta.get("solution")

    def is_locked(self, gid: str) -> bool:
        return bool(nbgrader_meta(self.cells[gid]).get("locked")) and not nbgrader_meta(self.cells[gid]).get("solution")

    def kind(self, gid: str) -> str:
        return "test cell" if self.is_test(gid) else "read-only cell" if self.is_locked(gid) else "cell"


class Rejected(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _fix_cell_ids(data: dict) -> None:
    """Give duplicated or missing nbformat cell ids fresh values (copy/paste can duplicate them)."""
    if (data.get("nbformat"), data.get("nbformat_minor", 0)) < (4, 5):
        return
    seen = set()
    for i, cell in enumerate(data.get("cells", [])):
        if not isinstance(cell, dict):
            continue
        cid = cell.get("id")
        if not isinstance(cid, str) or not cid or cid in seen:
            base = f"cell-{i}"
            cid = base
            while cid in seen:
                cid += "x"
            cell["id"] = cid
        seen.add(cid)


def load_submission(path: Path) -> nbformat.NotebookNode:
    """Parse and validate a submitted notebook, or raise Rejected("malformed", ...)."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise Rejected("malformed", f"not a notebook: cannot read it ({err.strerror})") from None
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise Rejected("malformed", f"not a notebook: {len(raw) / 2**20:.0f} MiB is over the "
                                    f"{MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise Rejected("malformed", f"not a notebook: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise Rejected("malformed", f"not a notebook: invalid JSON ({err})") from None
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        bad = err.object[err.start:err.end].encode("unicode_escape").decode("ascii")
        raise Rejected("malformed", f"not a notebook: it holds text that is not Unicode (a lone surrogate "
                                    f"escape, {bad})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise Rejected("malformed", "not a notebook: the JSON has no list of cells")
    if data.get("nbformat") != 4:
        raise Rejected("malformed", f"not a notebook: nbformat {data.get('nbformat')!r}, expected 4")
    _fix_cell_ids(data)
    try:
        _, data = nbformat.validator.normalize(data, strip_invalid_metadata=True)
        nb = nbformat.reads(json.dumps(data), as_version=4, capture_validation_error={})
        nbformat.validate(nb)
    except Exception as err:  # noqa: BLE001 - any schema problem means "not a notebook"
        first = (str(getattr(err, "message", "") or err).strip().splitlines() or ["invalid"])[0]
        raise Rejected("malformed", f"not a notebook: {short(first, 160)}") from None
    return nb


def identify(nb, assignment: str, chapters: dict[str, GradedCells]) -> None:
    """Raise Rejected unless the notebook's grade ids say it is ``assignment``'s notebook."""
    ids = {grade_id(c) for c in nb.cells if grade_id(c)}
    mine = len(ids & set(chapters[assignment].order))
    best = max(((len(ids & set(ch.order)), name) for name, ch in chapters.items() if name != assignment),
               default=(0, ""))
    if best[0] > mine:
        raise Rejected("wrong-assignment", f"this is {best[1]}'s notebook, not {assignment}'s "
                                           f"({best[0]} of its graded cells belong to {best[1]})")
    if mine == 0:
        why = "it has no graded cells" if not ids else f"none of its {len(ids)} graded cells belongs to it"
        raise Rejected("wrong-assignment", f"not {assignment}'s notebook: {why}")


def repair(nb, chapter: GradedCells) -> list[str]:
    """Undo accidents nbgrader handles badly, in place; returns one note per repair.

    - a graded cell pasted twice: nbgrader blanks the earlier copy's metadata and then aborts the
      whole run (SchemaTooOldError), so keep the last copy and turn the others into plain cells;
    - a locked cell that lost its nbgrader metadata: found by its source and re-tagged;
    - a deleted locked cell (test or read-only): re-inserted from the release after its predecessor
      (nbgrader's OverwriteCells then restores hidden tests into it, as for every test cell);
    - instructor-owned metadata (grade/solution/locked/points) reset to the release's;
    and notes locked cells whose source was edited (nbgrader restores them from the gradebook).
    """
    notes = []
    counts = Counter(grade_id(c) for c in nb.cells if grade_id(c))
    for gid, n in counts.items():
        if n > 1:
            copies = [c for c in nb.cells if grade_id(c) == gid]
            for cell in copies[:-1]:
                cell.metadata.pop("nbgrader", None)
            notes.append(f"cell {gid} appears {n} times; graded the last copy")

    present = {grade_id(c) for c in nb.cells if grade_id(c)}
    for gid in chapter.order:
        if gid in present or not chapter.is_locked(gid):
            continue
        want = chapter.cells[gid].source.strip()
        twin = next((c for c in nb.cells if not nbgrader_meta(c) and c.source.strip() == want
                     and c.cell_type == chapter.cells[gid].cell_type), None)
        if twin is not None:
            twin.metadata["nbgrader"] = copy.deepcopy(chapter.cells[gid].metadata["nbgrader"])
            if "tags" in chapter.cells[gid].metadata:
                twin.metadata["tags"] = list(chapter.cells[gid].metadata["tags"])
            present.add(gid)
            notes.append(f"cell {gid} had lost its grading metadata; restored it")

    used_ids = {c.get("id") for c in nb.cells}
    for pos, gid in enumerate(chapter.order):
        if gid in present or not chapter.is_locked(gid):
            continue
        cell = copy.deepcopy(chapter.cells[gid])
        if "id" in cell:
            while cell["id"] in used_ids:
                cell["id"] = (cell["id"] + "r")[-64:]
            used_ids.add(cell["id"])
        before = [g for g in chapter.order[:pos] if g in present]
        after = [g for g in chapter.order[pos + 1:] if g in present]
        index = {(grade_id(c)): i for i, c in enumerate(nb.cells) if grade_id(c)}
        if before:
            nb.cells.insert(index[before[-1]] + 1, cell)
        elif after:
            nb.cells.insert(index[after[0]], cell)
        else:
            nb.cells.append(cell)
        present.add(gid)
        what = "re-inserted and graded" if chapter.is_test(gid) else "re-inserted"
        notes.append(f"{chapter.kind(gid)} {gid} was missing; {what}")

    for cell in nb.cells:
        gid = grade_id(cell)
        if gid not in chapter.cells:
            if "nbgrader" in cell.get("metadata", {}):
                # a cell of the learner's own making, or one whose grade id is not the chapter's:
                # nbgrader would drop the id anyway, and stray metadata can abort the whole run
                cell.metadata.pop("nbgrader", None)
            continue
        ref = chapter.cells[gid]
        keys = ("grade", "solution", "locked", "points")
        if any(bool(nbgrader_meta(cell).get(k)) != bool(nbgrader_meta(ref).get(k)) for k in keys[:3]) or \
                float(nbgrader_meta(cell).get("points", 0) or 0) != float(nbgrader_meta(ref).get("points", 0) or 0):
            notes.append(f"{chapter.kind(gid)} {gid} had its grading metadata changed; restored it")
        cell.metadata["nbgrader"] = copy.deepcopy(ref.metadata["nbgrader"])
        if chapter.is_locked(gid):
            if "tags" in ref.metadata:
                cell.metadata["tags"] = list(ref.metadata["tags"])
            if cell.cell_type == ref.cell_type and cell.source.strip() != ref.source.strip():
                notes.append(f"{chapter.kind(gid)} {gid} was edited; graded the original")
    return notes


def first_error_line(cell) -> str:
    """The first line of what cost a graded cell its points."""
    outputs = cell.get("outputs", [])
    for out in outputs:
        if out.get("output_type") == "error":
            lines = [ln for ln in str(out.get("evalue", "")).strip().splitlines() if ln.strip()]
            return f"{out.get('ename', 'Error')}: {lines[0].strip()}" if lines else str(out.get("ename", "Error"))
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            lines = [ln for ln in str(out.get("text", "")).splitlines() if ln.strip()]
            return f"wrote to stderr: {lines[0].strip() if lines else ''}"
    for out in outputs:
        if out.get("output_type") == "execute_result":
            return "partial credit"
    return "lost points"


def cells_with_error(nb, ename: str) -> list[tuple[str, str]]:
    """(cell name, error message) of every cell with an ``ename`` error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == ename:
                found.append((cell_name({"grade_id": grade_id(cell), "index": i}), str(o.get("evalue", "")).strip()))
                break
    return found


def cell_name(event: dict | None) -> str:
    if not event:
        return "an unknown cell"
    return event.get("grade_id") or f"#{event.get('index')} (a cell without a grade id)"
