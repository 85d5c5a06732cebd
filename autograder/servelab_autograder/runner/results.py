"""A grading run's results: one file per submission written the moment it is known, grades.csv, the summary
printed at the end, and nbgrader's feedback page made to read."""

from __future__ import annotations

import csv
import html
import json
import os
import re
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from servelab_autograder.runner.submission import first_error_line, short

STATUSES = ("graded", "repaired", "cell-timeout", "kernel-died", "notebook-timeout", "malformed",
            "wrong-assignment", "unknown-assignment", "grader-error")

RESULTS = "results"

PREVIOUS = "runs/previous"


@dataclass


class Outcome:
    student: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "graded"
    message: str = ""
    seconds: float = 0.0
    digest: str = ""   # sha256 of the submitted notebook's bytes: a resumed run re-grades a changed one
    seed: int | None = None  # the seed of the random cases it was graded on (chapters graded from a table)

    def row(self) -> dict:
        return {"student": self.student, "assignment": self.assignment, "score": score_text(self.score),
                "max_score": score_text(self.max_score), "status": self.status, "message": self.message}


def score_text(x: float) -> str:
    return f"{x:g}"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` whole. A file replaced keeps its mode (nbgrader's feedback page must stay readable by the
    learner it is released to); a new one is the writer's alone (mode 600), like the grades."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if path.is_file():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def result_path(out: Path, student: str, assignment: str) -> Path:
    return out / RESULTS / assignment / f"{student}.json"


def save_result(out: Path, outcome: Outcome) -> None:
    """One submission's result, on disk the moment it is known."""
    write_atomic(result_path(out, outcome.student, outcome.assignment), json.dumps(asdict(outcome), indent=1) + "\n")


def load_results(out: Path) -> dict[tuple[str, str], Outcome]:
    """(assignment, student) -> Outcome for every readable result file under out/results/."""
    found = {}
    for path in sorted((out / RESULTS).glob("*/*.json")):
        try:
            o = Outcome(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
        found[(o.assignment, o.student)] = o
    return found


def move_aside(out: Path) -> Path | None:
    """Move the previous run's grades.csv and results/ to runs/previous/<time>/, so that nothing of an
    earlier run can pass for this one's; returns where they went (None when there was nothing)."""
    old = [p for p in (out / "grades.csv", out / RESULTS) if p.exists()]
    if not old:
        return None
    dest = out / PREVIOUS / datetime.now(UTC).strftime("%Y%m%d-%H%M%S-%f")
    dest.mkdir(parents=True)
    for p in old:
        os.replace(p, dest / p.name)
    return dest


FEEDBACK_STYLE = """<style id="servelab-feedback">
/* servelab: a failure message is read whole, not cut at the box's edge */
div.output_area pre, div.output_subarea pre { white-space: pre-wrap; overflow-wrap: anywhere; }
#toc .servelab-lost { display: block; margin-left: 1em; color: #a94442; white-space: pre-wrap; }
</style>
"""


def polish_feedback(page: Path, graded_nb: Path) -> None:
    """Make nbgrader's feedback page read: failure messages wrap instead of being cut, and each test cell in
    the list at the top is named by its exercise, with the first line of what cost it points (read from the
    autograded notebook ``graded_nb``). A page already polished is left as it is."""
    text = page.read_text(encoding="utf-8")
    if 'id="servelab-feedback"' in text:
        return
    lost = {}
    for cell in nbformat.read(graded_nb, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        failed = any(o.get("output_type") == "error" or o.get("name") == "stderr" for o in cell.get("outputs", []))
        if meta.get("grade") and not meta.get("solution") and meta.get("grade_id") and failed:
            lost[meta["grade_id"]] = first_error_line(cell).removeprefix("AssertionError: ")

    def entry(m) -> str:
        gid = html.unescape(m.group(1))
        name = gid.removeprefix("test_")
        why = f'<span class="servelab-lost">{html.escape(lost[gid])}</span>' if gid in lost else ""
        return f'<li><a href="#{m.group(1)}">{html.escape(name)}</a> (Score: {m.group(2)}){why}</li>'

    text = re.sub(r'<li><a href="#([^"]+)">Test cell</a> \(Score: ([^)]*)\)</li>', entry, text)
    text = re.sub(r'<li><a href="#comment-([^"]+)">Comment</a></li>',
                  lambda m: f'<li><a href="#comment-{m.group(1)}">comment on your {m.group(1)}</a></li>', text)
    text = text.replace("</head>", FEEDBACK_STYLE + "</head>", 1)
    write_atomic(page, text)


def write_failure_page(feedback: Path, outcome: Outcome) -> None:
    """A small feedback page (under ``feedback``) for a submission nbgrader could not grade."""
    folder = feedback / outcome.student / outcome.assignment
    folder.mkdir(parents=True, exist_ok=True)
    title = f"{outcome.assignment}: {outcome.student}"
    body = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"</head><body><h1>{html.escape(title)}</h1>"
            f"<p>Score: {score_text(outcome.score)} / {score_text(outcome.max_score)}</p>"
            f"<p>Status: {html.escape(outcome.status)}</p><p>{html.escape(outcome.message)}</p>"
            "</body></html>\n")
    (folder / f"{outcome.assignment}.html").write_text(body, encoding="utf-8")


def write_csv(path: Path, outcomes: list[Outcome]) -> None:
    """grades.csv, written atomically: a reader never sees half a file."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["student", "assignment", "score", "max_score", "status", "message"])
    writer.writeheader()
    for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
        writer.writerow(o.row())
    write_atomic(path, buf.getvalue())


def summary(outcomes: list[Outcome]) -> str:
    rows = [("student", "assignment", "score", "status", "message")]
    for o in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
        score = f"{score_text(o.score)}/{score_text(o.max_score)}"
        rows.append((o.student, o.assignment, score, o.status, short(o.message, 70)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(r[j].ljust(widths[j]) for j in range(4)) + "  " + r[4])
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 7)
    counts = Counter(o.status for o in outcomes)
    lines.append(f"{len(outcomes)} submission(s)" + "".join(f", {n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)
