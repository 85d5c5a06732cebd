"""The mutation report (`make mutants`) with its wall time, and its record in bench/results.md.

    python scripts/bench_mutants.py                 # run every chapter's mutants (two workers) and print the report
    python scripts/bench_mutants.py --write         # and record it in bench/results.md
    python scripts/bench_mutants.py --log FILE --wall-s S --write   # record a finished run's output instead

The report is `python -m servelab_autograder.judge.mutants`'s: one line per chapter, "chNN: K killed, E equivalent
(explained), S survived", and a total. The figures are for reading: the run's exit status says whether any mutant
survived, and tests/test_mutants.py keeps the committed lists of equivalent programs honest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.md"
MARK = "<!-- mutants: scripts/bench_mutants.py -->"
LINE = re.compile(r"^(ch\d\d|total): \d+ killed, \d+ equivalent \(explained\), \d+ survived.*$", re.M)


def section(report: str, wall_s: float, jobs: int) -> str:
    lines = [m.group(0) for m in LINE.finditer(report)]
    if not lines:
        raise SystemExit("no report lines in the mutants output")
    return "\n".join([
        MARK, "", "## Mutants (`make mutants`, `scripts/bench_mutants.py`)", "",
        f"{dt.date.today().isoformat()}, {os.cpu_count()} cores, "
        f"`python -m servelab_autograder.judge.mutants --jobs {jobs}`: "
        f"{wall_s:.0f} s wall for every chapter. A mutant is killed when a hidden case fails (a crash or a time-out "
        "counts), equivalent when its chapter's list in autograder/mutants/ explains it or it leaves every drill "
        "answer within the tolerance its question states.", "", "```", *lines, "```", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="record the report in bench/results.md")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--log", type=Path, help="a finished run's output, instead of running it now")
    parser.add_argument("--wall-s", type=float, help="that run's wall time (with --log)")
    args = parser.parse_args(argv)
    if args.log:
        report, wall, rc = args.log.read_text(encoding="utf-8"), args.wall_s or 0.0, 0
    else:
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "servelab_autograder.judge.mutants", "--jobs", str(args.jobs)],
                             cwd=ROOT, capture_output=True, text=True)
        report, wall, rc = run.stdout, time.monotonic() - start, run.returncode
    print(report, end="")
    if args.write:
        text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
        RESULTS.write_text(results_md.record(text, section(report, wall, args.jobs), MARK), encoding="utf-8")
        print(f"recorded in {RESULTS.relative_to(ROOT)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
