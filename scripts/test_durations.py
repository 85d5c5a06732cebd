"""The suite's time per test module, from the JUnit XML `make test` writes (bench/out/pytest.xml).

    python scripts/test_durations.py                       # print the table (the slowest modules first)
    python scripts/test_durations.py --top 10              # only the ten slowest
    python scripts/test_durations.py --into bench/results.md   # record it there, replacing the last record

Each test's time is what pytest measured for it (setup, call and teardown) on whichever xdist worker ran it, so
the column adds up to the workers' busy time, about the wall time times the workers, not to the wall time.
A notebook (nbval) counts as one module. Nothing is asserted: the figures go where a person reads them.
"""

from __future__ import annotations

import argparse
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

START, END = "<!-- test durations: scripts/test_durations.py -->", "<!-- end test durations -->"


def _module(classname: str) -> str:
    """tests.test_tables.TestCh09 -> tests/test_tables.py; solutions.ch01_a.ch01_a.ipynb -> its .ipynb path."""
    if classname.endswith(".ipynb"):
        return classname.removesuffix(".ipynb").replace(".", "/") + ".ipynb"
    parts = classname.split(".")
    cut = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
    return "/".join(parts[:cut + 1]) + ".py"


def per_module(xml: Path) -> tuple[list[tuple[str, float, int, int]], float]:
    """[(module, seconds, tests, failed or errored)] slowest first, and the suite's wall time as pytest wrote it."""
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    seconds: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    bad: dict[str, int] = defaultdict(int)
    for case in root.iter("testcase"):
        module = _module(case.get("classname") or "?")
        seconds[module] += float(case.get("time") or 0.0)
        count[module] += 1
        bad[module] += int(any(c.tag in ("failure", "error") for c in case))
    wall = sum(float(s.get("time") or 0.0) for s in suites)
    rows = sorted(((m, seconds[m], count[m], bad[m]) for m in seconds), key=lambda r: -r[1])
    return rows, wall


def table(rows, wall: float, top: int | None = None) -> str:
    busy = sum(r[1] for r in rows)
    lines = [f"pytest wall time {wall:.0f} s; time in tests {busy:.0f} s over {sum(r[2] for r in rows)} tests "
             f"in {len(rows)} modules", "", "| module | s | share | tests | failed |", "|---|---:|---:|---:|---:|"]
    for module, s, n, failed in rows[:top]:
        lines.append(f"| {module} | {s:.1f} | {s / busy:.1%} | {n} | {failed or ''} |")
    return "\n".join(lines)


def record(results: Path, text: str) -> None:
    old = results.read_text(encoding="utf-8")
    block = (f"{START}\n## The suite's time per test module (`make test`, `scripts/test_durations.py`)\n\n"
             f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n{text}\n{END}\n")
    if START in old:
        old = old[:old.index(START)] + old[old.index(END) + len(END) + 1:]
    results.write_text(old.rstrip("\n") + "\n\n" + block, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml", nargs="?", type=Path, default=Path("bench/out/pytest.xml"))
    parser.add_argument("--top", type=int, default=None, help="only the N slowest modules")
    parser.add_argument("--into", type=Path, default=None, metavar="RESULTS_MD", help="record the table there")
    args = parser.parse_args(argv)
    if not args.xml.is_file():
        print(f"no {args.xml}: run `make test` first (it writes it)", file=sys.stderr)
        return 2
    rows, wall = per_module(args.xml)
    text = table(rows, wall, args.top)
    print(text)
    if args.into:
        record(args.into, table(rows, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
