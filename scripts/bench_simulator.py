"""How fast the serving simulator runs: 100,000 Poisson requests through each scheduling policy.

    python scripts/bench_simulator.py                 # defaults below
    python scripts/bench_simulator.py -n 20000 --rate 40
    python scripts/bench_simulator.py --one-core      # pin the process to one CPU first (Linux)
    python scripts/bench_simulator.py --million       # the goals: 1,000,000 requests, mixed-budget and prefill-first
    python scripts/bench_simulator.py --write         # either, and record what it printed in bench/results.md

The workload is Llama-3-8B on one H100 SXM, prompts and outputs log-normal (medians 512 and 128 tokens,
clipped at 8192 and 2048), arriving at `--rate` requests per second. For each policy the script prints
the CPU and wall time of `simulate` alone (the workload is built once, outside the timing), requests and steps
simulated per CPU second, and a few simulated figures so a run that got faster by doing less shows up.
The policies: nano-vllm's prefill-first steps, the budgeted mixed step (FCFS and shortest-prompt-first
prefill), the mixed step behind chapter 03's admission rule (TPOT 30 ms, TTFT 1 s), which also prices
the per-arrival backlog check, and the mixed step under memory pressure (100,000 tokens of KV) with chapter 08's
swap preemption, which prices every swap's copies, and the mixed step scheduled asynchronously (each step the
longer of its CPU and GPU parts, plus the decodes wasted after each stop), and chapter 12's clients (a 2 s
first-token deadline, leaving the queue when it passes, refused by a 256-request queue cap and retrying with
jittered backoff), which prices the per-step abandonment scan and the retry heap. Nothing is asserted: the figures
are for reading, except prefill-first's requests per CPU second, printed beside its goal of 50,000 (set at 100,000
requests on one pinned core: `--one-core`).

`--million` runs the performance goals instead, 1,000,000 requests of this workload on one pinned core: through
`MixedBudget()` in under 60 s of CPU time and 2 GB of peak memory (the process's peak RSS, workload included), then
through `PrefillFirst()` in under 30 s of CPU time. It prints the CPU seconds, requests per CPU second, the peak RSS
(after the first run) and whether each goal is met. Only TTFT and TPOT percentiles are read off the results there:
the per-token gap metrics take 8 bytes per generated token (~1.7 GB).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import platform
import resource
import sys
import time
from pathlib import Path

from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B, max_backlog_tokens, max_prefill_chunk, step_time
from servelab.analytic.fairness import token_weights
from servelab.simulator import (
    BacklogAdmission,
    Backoff,
    Clients,
    MixedBudget,
    PrefillFirst,
    QueueCap,
    Requests,
    Speculation,
    Swap,
    TokenFair,
    lognormal_lengths,
    percentiles,
    poisson_arrivals,
    simulate,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

RESULTS = results_md.RESULTS
# one section per kind of run (`make bench` makes both): the policies' rates, and the million-request goals
MARKS = {False: "<!-- simulator: scripts/bench_simulator.py -->",
         True: "<!-- simulator-million: scripts/bench_simulator.py --million -->"}
MILLION_CPU_S, MILLION_RSS_BYTES = 60.0, 2e9      # the goal: 1M mixed-budget requests in 60 CPU s and 2 GB
PREFILL_FIRST_REQ_PER_S = 50_000                  # prefill-first's goals: 50k requests per CPU second (100k of them)
PREFILL_FIRST_MILLION_CPU_S = 30.0                # ... and 1M requests in 30 CPU s


def _admission_rule(budget: int = 2048) -> BacklogAdmission:
    """Chapter 03's rule for a 2048-token budget: the chunk a 30 ms TPOT leaves next to 256 decodes at 2048
    tokens of context, on prefixes of up to 8192 tokens, and the backlog a 1 s TTFT then absorbs."""
    decodes = [2048] * 256
    chunk = min(budget - len(decodes), max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030, decodes, 8192))
    step = step_time(LLAMA3_8B, H100_SXM, prefill_tokens=chunk, prefill_context=8192, decode_context_lens=decodes)
    return BacklogAdmission(max_backlog_tokens(len(decodes) + chunk, len(decodes), step, 1.0))


def _peak_rss_bytes() -> int:
    """This process's peak resident set so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _million_run(requests: Requests, policy) -> float:
    """One timed run of the goal's workload: prints its figures, returns its CPU seconds."""
    t0, w0 = time.process_time(), time.perf_counter()
    result = simulate(requests, policy, LLAMA3_8B, H100_SXM)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    ttft, tpot = percentiles(result.ttft), percentiles(result.tpot)
    print(f"{policy.name}: {cpu:.1f} CPU s ({wall:.1f} wall s), {len(requests) / cpu:,.0f} requests and "
          f"{result.step_end_s.size / cpu:,.0f} steps per CPU second, {result.step_end_s.size:,} steps")
    print(f"simulated: TTFT p50 {ttft[50]:.3f} s, p99 {ttft[99]:.3f} s; TPOT p50 {tpot[50]:.4f} s, "
          f"p99 {tpot[99]:.4f} s")
    return cpu


def _million(requests: Requests) -> None:
    """The goals' measurement: a MixedBudget() run, CPU time and peak memory against their limits, then a
    PrefillFirst() run against its CPU time limit (the peak RSS, a high-water mark, is read after the first)."""
    n = len(requests)
    cpu = _million_run(requests, MixedBudget())
    rss = _peak_rss_bytes()
    print(f"peak RSS {rss / 1e9:.2f} GB (ru_maxrss, workload and result included)")
    print(f"goal {n:,} requests under {MILLION_CPU_S:.0f} CPU s: {_met(cpu < MILLION_CPU_S)}; "
          f"under {MILLION_RSS_BYTES / 1e9:.0f} GB peak RSS: {_met(rss < MILLION_RSS_BYTES)}")
    cpu = _million_run(requests, PrefillFirst())
    print(f"goal {n:,} prefill-first requests under {PREFILL_FIRST_MILLION_CPU_S:.0f} CPU s: "
          f"{_met(cpu < PREFILL_FIRST_MILLION_CPU_S)}")


class _Tee(io.StringIO):
    """What the run prints, kept as well as shown."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def write(self, text):
        self.out.write(text)
        return super().write(text)


def record(printed: str, million: bool, path: Path | None = None) -> None:
    """Put what one run printed into bench/results.md as its own section (the other sections stay)."""
    path = path or RESULTS
    mark = MARKS[million]
    title = ("The simulator's goals on one core" if million
             else "The simulator's policies, requests per CPU second")
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = "\n".join([mark, "", f"## {title} (`scripts/bench_simulator.py{' --million' if million else ''}`)", "",
                          f"- date: {when}", "", "```", printed.rstrip("\n"), "```", ""])
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    path.write_text(results_md.record(old, section, mark), encoding="utf-8")
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=30.0, help="arrivals per second (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one-core", action="store_true", help="pin this process to one CPU before timing")
    parser.add_argument("--million", action="store_true",
                        help="the goals: 1,000,000 requests (unless -n says otherwise) on one core, through "
                             "MixedBudget() (CPU time and peak RSS against 60 s and 2 GB) and PrefillFirst() (30 s)")
    parser.add_argument("--write", action="store_true", help=f"record what is printed in {RESULTS.name}")
    args = parser.parse_args(argv)
    if args.million:
        args.one_core = True
        if "-n" not in argv and not any(a.startswith("--requests") for a in argv):
            args.requests = 1_000_000
    if not args.write:
        run(args)
        return
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        run(args)
    record(tee.getvalue(), args.million)


def run(args: argparse.Namespace) -> None:
    if args.one_core and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    n = args.requests
    requests = Requests(poisson_arrivals(n, args.rate, seed=args.seed),
                        lognormal_lengths(n, median=512, sigma=1.0, seed=args.seed + 1, high=8192),
                        lognormal_lengths(n, median=128, sigma=1.0, seed=args.seed + 2, high=2048))
    print(f"{n:,} requests, Poisson {args.rate:g}/s, {LLAMA3_8B.name} on {H100_SXM.name}; "
          f"python {platform.python_version()} on {platform.machine()}, {cpus} CPU(s) usable")
    if args.million:
        _million(requests)
        return
    header = f"{'policy':<24} {'CPU s':>7} {'wall s':>7} {'req/s CPU':>10} {'steps':>8} {'steps/s CPU':>12} " \
             f"{'sim tok/s':>10} {'TTFT p99 s':>11} {'TPOT p99 s':>11} {'max gap s':>10} {'rejected':>9}"
    print(header)
    print("-" * len(header))
    runs = [("prefill-first", PrefillFirst(), {}),
            ("mixed-budget", MixedBudget(), {}),
            ("mixed, shortest first", MixedBudget(prefill_order="shortest_first"), {}),
            ("mixed + admission rule", MixedBudget(), {"admission": _admission_rule()}),
            ("mixed, swap, 100k KV", MixedBudget(), {"kv_capacity_tokens": 100_000, "preemption": Swap()}),
            ("mixed, async scheduling", MixedBudget(), {"async_scheduling": True}),
            ("mixed, speculation k=4", MixedBudget(), {"speculation": Speculation(4, 0.7)}),
            ("mixed, clients + retries", MixedBudget(), {"admission": QueueCap(256),
                                                         "clients": Clients(2.0, retry=Backoff(0.5, 8.0))}),
            ("token-fair, 4 tenants", TokenFair([i % 4 for i in range(n)],
                                                token_weights(LLAMA3_8B, H100_SXM, 512, 64, 640)), {})]
    rates = {}
    for label, policy, kwargs in runs:
        t0, w0 = time.process_time(), time.perf_counter()
        result = simulate(requests, policy, LLAMA3_8B, H100_SXM, **kwargs)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        rates[label] = n / cpu
        s = result.summary()
        print(f"{label:<24} {cpu:>7.2f} {wall:>7.2f} {n / cpu:>10,.0f} {s['steps']:>8,} {s['steps'] / cpu:>12,.0f} "
              f"{s['throughput_tok_s']:>10,.0f} {s['ttft_p99_s']:>11.3f} {s['tpot_p99_s']:>11.4f} "
              f"{s['max_gap_s']:>10.3f} {s['rejected']:>9,}")
    rate = rates["prefill-first"]
    print(f"goal prefill-first >= {PREFILL_FIRST_REQ_PER_S:,} requests per CPU second: {rate:,.0f}, "
          f"{_met(rate >= PREFILL_FIRST_REQ_PER_S)}" + ("" if args.one_core else " (the goal is for --one-core)"))


if __name__ == "__main__":
    main()
