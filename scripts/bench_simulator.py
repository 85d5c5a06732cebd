"""How fast the serving simulator runs: 100,000 Poisson requests through each scheduling policy.

    python scripts/bench_simulator.py                 # defaults below
    python scripts/bench_simulator.py -n 20000 --rate 40

The workload is Llama-3-8B on one H100 SXM, prompts and outputs log-normal (medians 512 and 128 tokens,
clipped at 8192 and 2048), arriving at `--rate` requests per second. For each policy the script prints
the wall time of `simulate` alone (the workload is built once, outside the timing), requests and steps
simulated per wall second, and a few simulated figures so a run that got faster by doing less shows up.
Nothing is asserted: the figures are for reading.
"""

from __future__ import annotations

import argparse
import platform
import time

from servelab.costmodel import H100_SXM, LLAMA3_8B
from servelab.simulator import MixedBudget, PrefillFirst, Requests, lognormal_lengths, poisson_arrivals, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=30.0, help="arrivals per second (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    n = args.requests
    requests = Requests(poisson_arrivals(n, args.rate, seed=args.seed),
                        lognormal_lengths(n, median=512, sigma=1.0, seed=args.seed + 1, high=8192),
                        lognormal_lengths(n, median=128, sigma=1.0, seed=args.seed + 2, high=2048))
    print(f"{n:,} requests, Poisson {args.rate:g}/s, {LLAMA3_8B.name} on {H100_SXM.name}; "
          f"python {platform.python_version()} on {platform.machine()}")
    header = f"{'policy':<14} {'wall s':>7} {'req/s wall':>11} {'steps':>8} {'steps/s wall':>13} " \
             f"{'sim tok/s':>10} {'TTFT p99 s':>11} {'TPOT p99 s':>11} {'max gap s':>10}"
    print(header)
    print("-" * len(header))
    for policy in (PrefillFirst(), MixedBudget()):
        t0 = time.perf_counter()
        result = simulate(requests, policy, LLAMA3_8B, H100_SXM)
        wall = time.perf_counter() - t0
        s = result.summary()
        print(f"{policy.name:<14} {wall:>7.2f} {n / wall:>11,.0f} {s['steps']:>8,} {s['steps'] / wall:>13,.0f} "
              f"{s['throughput_tok_s']:>10,.0f} {s['ttft_p99_s']:>11.3f} {s['tpot_p99_s']:>11.4f} "
              f"{s['max_gap_s']:>10.3f}")


if __name__ == "__main__":
    main()
