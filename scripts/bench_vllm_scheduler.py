"""How fast servelab.schedulers.vllm_scheduler's Scheduler steps: schedule() + update_from_output() calls per second.

    python scripts/bench_vllm_scheduler.py             # print the table
    python scripts/bench_vllm_scheduler.py --write     # and record it in bench/results.md (run by `make bench`)

The workload (seeded): 2000 requests arriving as a Poisson stream counted in steps (1.5 per step, more than the
scheduler serves, so a queue builds), prompts of 32-512 tokens, half of them opening with one of 8 shared prefixes
of 32-256 tokens, 16-256 output tokens each (ignore_eos). The scheduler: block size 16, 2688 usable blocks (43,008
tokens of KV, a little less than 128 running requests grow to, so some are preempted), a budget of 2048 tokens
per step, max_num_seqs 128, prefix caching on, FCFS. The model is `vllm_scheduler.fake_model` hashing only the
last block of tokens (see `sample`). The figures time add_request(), schedule() and update_from_output(), wall
and CPU; building the requests and the fake model are left out (the model's wall time is printed). Nothing is
asserted but that every request generates its tokens: the figures are for reading.

`--write` puts this script's section into bench/results.md after its marker comment (MARK), in place of the old
one (up to the next section's marker), and keeps the rest of the file; a first section goes just before
scripts/bench_engine.py's, which runs to the end of the file. scripts/bench.py keeps both when it rewrites the file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import sys
import time
from pathlib import Path

from servelab.engine.v1 import fake_next_token
from servelab.schedulers import vllm_scheduler as vs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results.md"
MARK = "<!-- vllm_scheduler: scripts/bench_vllm_scheduler.py -->"

BLOCK_SIZE, NUM_GPU_BLOCKS = 16, 2689          # block 0 is the null block
BUDGET, MAX_NUM_SEQS = 2048, 128


def workload(n: int = 2000, seed: int = 0, rate: float = 1.5, vocab: int = 32000) -> dict[int, list[vs.Request]]:
    """{step: requests to add just before that step's schedule()} (see the module docstring)."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(vocab) for _ in range(rng.randint(32, 256))] for _ in range(8)]
    by_step: dict[int, list[vs.Request]] = {}
    t = 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        prefix = rng.choice(prefixes) if rng.random() < 0.5 else []
        length = rng.randint(max(32, len(prefix) + 1), 512)
        prompt = prefix + [rng.randrange(vocab) for _ in range(length - len(prefix))]
        request = vs.Request(f"r{i}", prompt, rng.randint(16, 256), ignore_eos=True, arrival_time=float(i))
        by_step.setdefault(int(t), []).append(request)
    return by_step


def sample(scheduler: vs.Scheduler, output: vs.SchedulerOutput) -> dict[str, list[int]]:
    """`vllm_scheduler.fake_model`, hashing the last block of tokens instead of the whole sequence (which would take
    most of the run): one token for each request whose scheduled range reaches its last token, [] otherwise."""
    requests = scheduler.requests
    return {rid: ([fake_next_token(requests[rid].all_token_ids[-BLOCK_SIZE:])]
                  if output.samples(rid, requests[rid].num_tokens) else []) for rid in output.num_scheduled_tokens}


def drive(scheduler: vs.Scheduler, by_step: dict[int, list[vs.Request]]) -> dict[str, float]:
    """Step until every request has finished; the clock counts steps, and when nothing is left to run it jumps to
    the next arrivals. add_request(), schedule() and update_from_output() are timed (wall and CPU), the fake model
    apart. Returns steps, scheduled and prefix-hit tokens, and the seconds."""
    wall, cpu = time.perf_counter, time.process_time
    due = sorted(by_step)
    nxt = clock = tokens = hits = 0
    t = {"wall_s": 0.0, "cpu_s": 0.0, "model_wall_s": 0.0}
    while nxt < len(due) or scheduler.has_unfinished_requests():
        w0, c0 = wall(), cpu()
        if nxt < len(due) and not scheduler.has_unfinished_requests():
            clock = max(clock, due[nxt])                        # idle: jump to the next arrivals
        while nxt < len(due) and due[nxt] <= clock:
            for request in by_step[due[nxt]]:
                scheduler.add_request(request)
            nxt += 1
        out = scheduler.schedule()
        w1, c1 = wall(), cpu()
        sampled = sample(scheduler, out)
        w2, c2 = wall(), cpu()
        scheduler.update_from_output(out, sampled)
        w3, c3 = wall(), cpu()
        t["wall_s"] += (w1 - w0) + (w3 - w2)
        t["cpu_s"] += (c1 - c0) + (c3 - c2)
        t["model_wall_s"] += w2 - w1
        tokens += out.total_num_scheduled_tokens
        hits += sum(out.num_hit_tokens.values())
        clock += 1
    return {"steps": scheduler.num_steps, "tokens": tokens, "hit_tokens": hits, **t}


def record(text: str, section: str) -> str:
    """`text` (bench/results.md) with this script's section put in (scripts/results_md.py's `record`)."""
    return results_md.record(text, section, MARK)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the table in {RESULTS.name}")
    parser.add_argument("--requests", type=int, default=2000, help="requests in the workload (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    by_step = workload(args.requests, args.seed)
    requests = [r for batch in by_step.values() for r in batch]
    scheduler = vs.Scheduler(block_size=BLOCK_SIZE, num_blocks=NUM_GPU_BLOCKS, max_num_batched_tokens=BUDGET,
                             max_num_seqs=MAX_NUM_SEQS, enable_prefix_caching=True)
    run = drive(scheduler, by_step)
    steps, wall, cpu = run["steps"], run["wall_s"], run["cpu_s"]
    preemptions = sum(r.num_preemptions for r in requests)
    assert all(r.num_output_tokens == r.max_tokens for r in requests), "every request generates max_tokens"

    head = (f"{len(requests)} requests (prompts 32-512 tokens, half behind 8 shared prefixes; 16-256 output "
            f"tokens), block size {BLOCK_SIZE}, {NUM_GPU_BLOCKS - 1} usable blocks, budget {BUDGET}, "
            f"max_num_seqs {MAX_NUM_SEQS}, prefix caching on; {preemptions} preemptions, "
            f"{run['hit_tokens']:,} prefix-hit tokens; fake model {run['model_wall_s']:.2f} s apart; "
            f"python {platform.python_version()}, nproc {os.cpu_count()}")
    lines = ["| steps | requests | wall | CPU | steps/s (wall) | scheduled tokens/s (wall) |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {steps:,} | {len(requests):,} | {wall:.2f} s | {cpu:.2f} s | {steps / wall:,.0f} | "
             f"{run['tokens'] / wall:,.0f} |"]
    print(head)
    print("\n".join(lines))
    if args.write:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = "\n".join([MARK, "", "## vLLM V1's scheduler on the CPU (`scripts/bench_vllm_scheduler.py`)", "",
                             f"- date: {when}; {head}", "", *lines])
        old = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else ""
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(record(old, section), encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
