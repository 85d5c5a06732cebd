"""Measure how long the workbook takes to run, next to the targets it is held to.

    python scripts/bench.py               # everything (run by `make bench`)
    python scripts/bench.py --skip-tests  # only the notebooks and one autograde

Figures, in order:
  (a) each solution notebook executed end to end with nbclient (kernel `servelab`, temp copy);
  (b) autograding one complete submission of the first chapter, and what the sandbox adds per submission
      (the same copies graded with and without it);
  (c) `make setup` on a warm venv, then `make test` itself (pytest-xdist workers, --dist loadscope),
      held to the target; then, to show where the time goes,
      pytest split into groups that do not overlap (tests/ by marker, then the nbval runs over
      solutions/ and course/), each run alone and serially (browser-deps is a no-op once chromium is there).

Nothing here fails on a slow figure: the script prints a table (figure, measured, target) and writes
the same table to bench/results.md, the committed record of the last measurement (with the date and
the machine). Logs of each step go to bench/out/ (not committed). Exit status is 0 unless the script
itself breaks.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OUT = REPO / "bench" / "out"
RESULTS = REPO / "bench" / "results.md"
KERNEL = "servelab"
ENGINE_MARK = "<!-- engine: scripts/bench_engine.py -->"   # the section scripts/bench_engine.py writes
VLLM_SCHEDULER_MARK = "<!-- vllm_scheduler: scripts/bench_vllm_scheduler.py -->"   # scripts/bench_vllm_scheduler.py's

NOTEBOOK_TARGET_S = 20.0
AUTOGRADE_TARGET_S = 8.0   # issue 37: one chapter, one submission, on the 2-core machine
MAKE_TEST_TARGET_S = 8 * 60.0

# (label, pytest arguments): the tests `make test` runs (pyproject's testpaths: tests/, plus the notebooks
# in solutions/ and course/ through nbval) cut into groups that do not overlap, each timed alone on one
# worker. The marker groups name tests/ explicitly; otherwise they would collect the notebooks.
PYTEST_PHASES = [
    ("pytest tests -m 'not browser and not autograde'", ["tests", "-m", "not browser and not autograde"]),
    ("pytest tests -m autograde", ["tests", "-m", "autograde"]),
    ("pytest tests -m browser", ["tests", "-m", "browser"]),
    ("pytest --nbval --nbval-current-env solutions", ["--nbval", "--nbval-current-env", "solutions"]),
    ("pytest --nbval-lax --nbval-current-env course", ["--nbval-lax", "--nbval-current-env", "course"]),
]


@dataclass
class Row:
    figure: str
    seconds: float | None  # None: not measured
    target_s: float | None  # None: no target
    note: str = ""

    def measured(self) -> str:
        return "—" if self.seconds is None else f"{self.seconds:.1f} s"

    def target(self) -> str:
        if self.target_s is None:
            return ""
        return f"< {self.target_s / 60:.0f} min" if self.target_s >= 120 else f"< {self.target_s:.0f} s"

    def verdict(self) -> str:
        if self.seconds is None or self.target_s is None:
            return ""
        return "ok" if self.seconds < self.target_s else "OVER"


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() else "_" for c in text)
    return "_".join(p for p in keep.split("_") if p)[:60]


def _run(label: str, cmd: list[str], timeout_s: float, env: dict | None = None) -> tuple[float, int, str]:
    """Run `cmd` from the repo root; return (wall seconds, exit code, last output line). Log to bench/out."""
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{_slug(label)}.log"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s
        )
        out, rc = proc.stdout.decode(errors="replace"), proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + f"\n[bench] killed after {timeout_s:.0f} s\n"
        rc = -1
    wall = time.perf_counter() - t0
    log.write_text(f"$ {' '.join(cmd)}\n{out}")
    last = next((ln.strip("= ").strip() for ln in reversed(out.splitlines()) if ln.strip()), "")
    return wall, rc, last


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


# (a) ---------------------------------------------------------------------------------------------------
def bench_notebooks(timeout_s: float) -> list[Row]:
    import nbformat
    from nbclient import NotebookClient

    notebooks = sorted(REPO.glob("solutions/*/*.ipynb"))
    if not notebooks:
        return [Row("solution notebooks (solutions/*/*.ipynb)", None, NOTEBOOK_TARGET_S, "none found")]
    rows = []
    for nb_path in notebooks:
        label = f"execute {nb_path.relative_to(REPO)}"
        print(f"[bench] {label} ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="servelab-bench-nb-") as tmp:
            work = Path(tmp) / nb_path.parent.name
            shutil.copytree(nb_path.parent, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            nb = nbformat.read(work / nb_path.name, as_version=4)
            client = NotebookClient(
                nb, kernel_name=KERNEL, timeout=int(timeout_s), resources={"metadata": {"path": str(work)}}
            )
            note = ""
            t0 = time.perf_counter()
            try:
                client.execute()
            except Exception as e:  # noqa: BLE001 - a broken notebook is a figure, not a crash
                note = f"FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1][:120]}"
            wall = time.perf_counter() - t0
        rows.append(Row(label, wall, NOTEBOOK_TARGET_S, note))
    return rows


# (b) ---------------------------------------------------------------------------------------------------
def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


COMPLETE_STUDENT = "solution"  # the student servelab_autograder.testing.submissions fills with every solution


def bench_autograde(timeout_s: float) -> list[Row]:
    notebooks = sorted(REPO.glob("solutions/*/*.ipynb"))
    chapter = notebooks[0].parent.name if notebooks else None
    figure = f"autograde one complete submission ({chapter or 'first chapter'})"
    missing = [m for m in ("servelab_autograder.testing.submissions", "servelab_autograder.runner.grade")
               if not _have(m)]
    if missing:
        return [Row(figure, None, AUTOGRADE_TARGET_S, f"not available ({', '.join(missing)} missing)")]
    if chapter is None:
        return [Row(figure, None, AUTOGRADE_TARGET_S, "not available (no chapter in solutions/)")]
    if not (REPO / "course" / chapter / f"{chapter}.ipynb").is_file():
        return [Row(figure, None, AUTOGRADE_TARGET_S, f"not available (course/{chapter} missing: make release)")]
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="servelab-bench-grade-") as tmp:
        # Build every known submission of the chapter, then grade a folder holding only the complete one.
        built = Path(tmp) / "built"
        print(f"[bench] build the {chapter} submissions ...", flush=True)
        _, rc, last = _run(
            "build submissions",
            [py, "-m", "servelab_autograder.testing.submissions", str(built), chapter],
            timeout_s,
            _env(),
        )
        complete = built / COMPLETE_STUDENT / chapter
        if rc != 0 or not complete.is_dir():
            why = f"rc={rc}: {last[:100]}" if rc != 0 else f"no {COMPLETE_STUDENT}/{chapter} in its output"
            return [Row(figure, None, AUTOGRADE_TARGET_S, f"not available (building the submission failed, {why})")]
        one = Path(tmp) / "submitted"
        shutil.copytree(complete, one / COMPLETE_STUDENT / chapter)
        out = Path(tmp) / "out"  # keep the repo's gradebook and autograded/ untouched
        grade_cmd = [py, "-m", "servelab_autograder.runner.grade", str(one), "--out", str(out)]
        print("[bench] autograde it (python -m servelab_autograder.runner.grade <tmp>/submitted) ...", flush=True)
        wall, rc, last = _run("autograde one submission", grade_cmd, timeout_s, _env())
        note = _grade_summary(out / "grades.csv", OUT / f"{_slug('autograde one submission')}.log")
        if rc != 0:
            note = f"FAILED rc={rc}: {last[:100]}"
        rows = [Row(figure, wall, AUTOGRADE_TARGET_S, note)]
        rows.append(_sandbox_overhead(complete, chapter, Path(tmp), timeout_s))
    return rows


SANDBOX_COPIES = 3
SANDBOX_TARGET_S = 1.0


def _sandbox_overhead(complete: Path, chapter: str, tmp: Path, timeout_s: float) -> Row:
    """Mean grading time per submission with the sandbox minus without it, over the same copies."""
    figure = f"sandbox overhead per submission (mean of {SANDBOX_COPIES}, {chapter})"
    subs = tmp / "copies"
    for i in range(SANDBOX_COPIES):
        shutil.copytree(complete, subs / f"copy{i}" / chapter)
    means = {}
    for label, extra in (("sandboxed", []), ("unsandboxed", ["--unsafe-no-sandbox"])):
        print(f"[bench] grade {SANDBOX_COPIES} copies {label} ...", flush=True)
        cmd = [sys.executable, "-m", "servelab_autograder.runner.grade", str(subs), "--out", str(tmp / f"out-{label}"),
               *extra]
        _, rc, last = _run(f"grade copies {label}", cmd, timeout_s, _env())
        log = OUT / f"{_slug(f'grade copies {label}')}.log"
        text = log.read_text(errors="replace") if log.is_file() else ""
        each = [float(x) for x in re.findall(r"^\[\d+/\d+\] .*?\s(\d+(?:\.\d+)?)s\s", text, re.M)]
        if rc != 0 or len(each) != SANDBOX_COPIES:
            return Row(figure, None, SANDBOX_TARGET_S, f"FAILED ({label}) rc={rc}: {last[:100]}")
        means[label] = sum(each) / len(each)
    return Row(figure, means["sandboxed"] - means["unsandboxed"], SANDBOX_TARGET_S,
               f"{means['sandboxed']:.2f} s sandboxed, {means['unsandboxed']:.2f} s without")


def _grade_summary(grades_csv: Path, log: Path) -> str:
    """'score 17/17, ok (gradebook 7.2 s + grading 4.6 s)' from the grader's grades.csv and its output."""
    try:
        with open(grades_csv, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError:
        return ""
    note = "; ".join(f"score {r.get('score')}/{r.get('max_score')}, {r.get('status')}" for r in rows)
    # The grader prints how long registering the chapter took and each submission's time; show the
    # split when it is there (a fresh gradebook is part of one autograde, but not of grading a batch).
    text = log.read_text(errors="replace") if log.is_file() else ""
    reg = re.search(r"^registered .*\((\d+(?:\.\d+)?) s\)", text, re.M)
    one = re.search(r"^\[1/1\] .*?\s(\d+(?:\.\d+)?)s\s", text, re.M)
    if reg and one:
        note += f" (gradebook {reg.group(1)} s + grading {one.group(1)} s)"
    return note


# (c) ---------------------------------------------------------------------------------------------------
def _pytest_note(rc: int, last: str) -> str:
    if rc == 5:
        return "no tests collected"
    return (last if rc in (0, 1) else f"rc={rc}: {last}")[:120]


def bench_make_test(timeout_s: float) -> list[Row]:
    rows = []
    make = shutil.which("make")
    if make is None:
        rows.append(Row("make setup (warm venv)", None, None, "not available (no `make`)"))
        rows.append(Row("make test", None, MAKE_TEST_TARGET_S, "not available (no `make`)"))
    else:
        print("[bench] make setup ...", flush=True)
        wall, rc, last = _run("make setup", [make, "--no-print-directory", "setup"], timeout_s, _env())
        rows.append(Row("make setup (warm venv)", wall, None, "" if rc == 0 else f"FAILED rc={rc}: {last}"))
        # the Makefile's own test target, so the figure is of the command the README gives
        print("[bench] make test ...", flush=True)
        cmd = [make, "--no-print-directory", "test", "PYTEST_ARGS=-q -p no:cacheprovider"]
        wall, rc, last = _run("make test", cmd, timeout_s, _env())
        rows.append(Row("make test (pytest on one worker per core)", wall, MAKE_TEST_TARGET_S, _pytest_note(rc, last)))
    phases = []
    for label, args in PYTEST_PHASES:
        print(f"[bench] {label} ...", flush=True)
        wall, rc, last = _run(
            label, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], timeout_s, _env()
        )
        phases.append(Row(label, wall, None, _pytest_note(rc, last)))
    measured = [r.seconds for r in phases if r.seconds is not None]
    rows += phases
    rows.append(
        Row(
            "sum of the phases above, one worker each",
            sum(measured),
            None,
            f"{len(measured)} of {len(phases)} phases measured",
        )
    )
    return rows


# report ------------------------------------------------------------------------------------------------
def _nproc() -> str:
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(os.cpu_count())


def _table(rows: list[Row]) -> list[str]:
    header = ["figure", "measured", "target", "", "note"]
    body = [[r.figure, r.measured(), r.target(), r.verdict(), r.note.replace("|", "/")] for r in rows]
    return ["| " + " | ".join(header) + " |", "|" + "|".join(["---", "---:", "---", "---", "---"]) + "|"] + [
        "| " + " | ".join(cells) + " |" for cells in body
    ]


def _text_table(rows: list[Row]) -> str:
    body = [["figure", "measured", "target", "", "note"]] + [
        [r.figure, r.measured(), r.target(), r.verdict(), r.note] for r in rows
    ]
    widths = [max(len(row[i]) for row in body) for i in range(4)]
    lines = []
    for i, row in enumerate(body):
        cells = [
            row[0].ljust(widths[0]),
            row[1].rjust(widths[1]),
            row[2].ljust(widths[2]),
            row[3].ljust(widths[3]),
            row[4],
        ]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("-" * min(120, sum(widths) + 6 + len("note")))
    return "\n".join(lines)


def write_results(rows: list[Row], args: argparse.Namespace, started: dt.datetime) -> None:
    when = started.strftime("%Y-%m-%d %H:%M UTC")
    scope = "notebooks and one autograde only (`--skip-tests`)" if args.skip_tests else "all figures"
    lines = [
        "# Benchmark: last measured figures",
        "",
        "Written by `make bench` (`scripts/bench.py`); targets are goals, nothing fails on them.",
        "",
        f"- date: {when}",
        f"- machine: nproc {_nproc()}, CPU {results_md.cpu_model()}, {platform.system()} {platform.machine()}",
        f"- python: {platform.python_version()} ({results_md.shown(sys.executable)})",
        f"- scope: {scope}",
        "",
        *_table(rows),
        "",
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else ""
    first = results_md.SECTION_MARK.search(old)   # every other script's section is kept
    sections = old[first.start():] if first else ""   # the other scripts' sections, from the first of them on
    RESULTS.write_text("\n".join(lines) + ("\n" + sections if sections else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--skip-tests",
        action="store_true",
        help="only time the solution notebooks and one autograde, not `make test`'s phases",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds allowed for any one step before it is killed (default 1800)",
    )
    parser.add_argument("--no-write", action="store_true", help=f"print only; leave {RESULTS.name} alone")
    args = parser.parse_args(argv)

    started = dt.datetime.now(dt.UTC)
    for old_log in OUT.glob("*.log"):  # logs of the last run only
        old_log.unlink()
    t0 = time.perf_counter()
    rows = bench_notebooks(args.timeout)
    rows += bench_autograde(args.timeout)
    if not args.skip_tests:
        rows += bench_make_test(args.timeout)

    print()
    print(_text_table(rows))
    print(f"\n(bench took {time.perf_counter() - t0:.0f} s; logs in {OUT.relative_to(REPO)}/)")
    if not args.no_write:
        write_results(rows, args, started)
        print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
