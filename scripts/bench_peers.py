"""servelab's reference stack against the systems it models, in one run: CPU time, interleaved, medians.

    python scripts/bench_peers.py                               # SGLang from the cache (pip download if missing)
    python scripts/bench_peers.py --nano-vllm ~/src/nano-vllm   # and nano-vllm, from a copy of its repository
    python scripts/bench_peers.py --write                       # record the table in bench/results.md (make bench)

The parts (each also a script of its own):
- scripts/peers_radix.py: RadixCache on four workloads at page size 1 and 16 (keys as array('q'), the form SGLang's
  requests hold, against the goal; keys as tuples, chapter 04's form, beside it), and evict(1) on 100k leaves,
  against SGLang 0.5.23's own `radix_cache.py`, read from its PyPI wheel at run time (`--sglang WHEEL`, or the
  wheel `pip download --no-deps sglang==0.5.23` puts in ~/.cache/servelab-peers; nothing of it enters the
  repository); goal 3x;
- scripts/peers_scheduler.py: Scheduler + BlockManager on six workloads against nano-vllm (`--nano-vllm DIR`, or
  $SERVELAB_NANO_VLLM: a copy of its repository kept outside this one; bb823b3 is the commit compared with);
  goal 1.5x.
Without a peer a part prints servelab's figures alone and says so. Every comparison also checks that both
gave the same results (matched lengths, evictions, sizes; the scheduler's every step): a disagreement is
printed loudly and the exit status is 1. The goals are figures to read against, not gates.
`scripts/bench_simulator.py --million` measures the simulator's goal (one million requests, one core).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_radix  # noqa: E402
import peers_scheduler  # noqa: E402
import results_md  # noqa: E402
from results_md import record  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results.md"
MARK = "<!-- peers: scripts/bench_peers.py -->"
GOALS = {"radix": 3.0, "scheduler": 1.5}


def rows(args) -> tuple[list[tuple[str, dict]], list[str]]:
    """(part, row) for every workload of both parts, and a line per peer saying what was compared with."""
    notes = []
    wheel, why = peers_radix.find_wheel(args.sglang, fetch=not args.no_download)
    notes.append(f"SGLang: {wheel.name if wheel else 'none'}" + (f" ({why})" if why else ""))
    radix = peers_radix.measure(str(wheel) if wheel else None, args.repeats, args.quick)
    nano = args.nano_vllm or os.environ.get("SERVELAB_NANO_VLLM")
    if nano:
        commit = peers_scheduler.NanoVllm(nano).commit or args.nano_vllm_commit or "unknown (no .git)"
        notes.append(f"nano-vllm: {results_md.shown(nano)} at commit {commit}")
    else:
        notes.append("nano-vllm: none given (--nano-vllm DIR): servelab's scheduler figures alone")
    scheduler = peers_scheduler.measure(nano, args.repeats, args.quick)
    return [("radix", r) for r in radix] + [("scheduler", r) for r in scheduler], notes


def table(measured: list[tuple[str, dict]]) -> list[str]:
    lines = ["| part | workload | servelab | servelab, tuple keys | peer | servelab / peer | goal | agree |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for part, r in measured:
        unit, scale = ("ms", 1e3) if "per call" in r["workload"] else ("s", 1.0)
        peer = f"{r['peer_s'] * scale:.3f} {unit}" if r["peer_s"] is not None else "-"
        tuples = f"{r['tuples_s'] * scale:.3f} {unit}" if r.get("tuples_s") is not None else "-"
        if r["ratio"] is None:
            ratio, goal = "-", f">= {GOALS[part]:g}x"
        else:
            met = "met" if r["ratio"] >= GOALS[part] else "NOT met"
            ratio, goal = f"{r['ratio']:.2f}x", f">= {GOALS[part]:g}x: {met}"
        agree = {True: "yes", False: "**NO**", None: "-"}[r["agree"]]
        lines.append(f"| {part} | {r['workload']} | {r['servelab_s'] * scale:.3f} {unit} | {tuples} | {peer} | "
                     f"{ratio} | {goal} | {agree} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang", default=None, help="an sglang-0.5.23 wheel (default: the cache, downloaded)")
    parser.add_argument("--no-download", action="store_true", help="never pip download the SGLang wheel")
    parser.add_argument("--nano-vllm", default=None, help="a copy of nano-vllm's repository (outside this one)")
    parser.add_argument("--nano-vllm-commit", default=None, help="its commit, when the copy has no .git")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small workloads, a few seconds (not for the record)")
    parser.add_argument("--write", action="store_true", help=f"record the table in {RESULTS.name}")
    args = parser.parse_args(argv)

    measured, notes = rows(args)
    lines = table(measured)
    head = (f"CPU time (time.process_time), medians of {args.repeats} interleaved repetitions; python "
            f"{platform.python_version()}, nproc {os.cpu_count()}" + ("; QUICK workloads" if args.quick else ""))
    print(head)
    print("\n".join(f"- {n}" for n in notes))
    print("\n".join(lines))
    disagree = [r["workload"] for _, r in measured if r["agree"] is False]
    if disagree:
        print(f"\n!!! AGREEMENT FAILED on {', '.join(disagree)}: servelab and the peer gave different results !!!")
    if args.write and not args.quick:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = [MARK, "", "## Against the peers (`scripts/bench_peers.py`)", "", f"- date: {when}; {head}",
                   *[f"- {n}" for n in notes], "", *lines, ""]
        old = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else ""
        RESULTS.write_text(record(old, "\n".join(section), MARK), encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
