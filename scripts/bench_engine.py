"""How fast the engine generates on the CPU at tiny size, against a plain loop and against no KV cache.

    python scripts/bench_engine.py            # print the table
    python scripts/bench_engine.py --write    # and record it in bench/results.md (run by `make bench`)

The model is `ModelConfig.tiny("llama")` with seeded random weights (2 layers, hidden 64, 4 query heads on 2
KV heads of 16), fp32, torch's own threads. The workload: 16 prompts of 24-64 tokens (seeded), 32 greedy
tokens each. Three ways to produce the same tokens (the script checks that they agree):
- the engine, `servelab.engine.llm.LLM` with the torch attention path, every request submitted at once: batched
  steps over the paged KV cache (block size 16);
- a plain loop: one request after another, each with its own contiguous KV cache (`model.generate_alone`);
- no cache: one request after another, every token recomputing the whole sequence.
Wall time and CPU time are both printed: the figures are for reading, nothing is asserted. The Triton
interpreter is for correctness, not speed, so it is not timed here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import time
from pathlib import Path

import torch

from servelab.engine import llm as L
from servelab.engine import model as sm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results.md"
MARK = L.BENCH_MARK


def workload(n=16, seed=0, vocab=128):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(24, 64))] for _ in range(n)]


@torch.no_grad()
def no_cache(model, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        cache = sm.ContiguousCache(model.config.num_layers)
        hidden = model(torch.tensor(ids), torch.arange(len(ids)), cache.attend)
        ids.append(int(model.logits(hidden[-1:]).argmax(-1)))
    return ids[len(prompt):]


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the table in {RESULTS.name}")
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per request (default 32)")
    args = parser.parse_args(argv)
    model = sm.Model.random(sm.ModelConfig.tiny("llama"), seed=0)
    prompts, n = workload(), args.tokens
    sp = L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)

    def engine():
        return [o["token_ids"] for o in L.LLM(model, block_size=16, num_blocks=128, max_num_batched_tokens=512,
                                               max_num_seqs=16).generate(prompts, sp)]

    runs = {"engine (batched, paged KV, torch attention)": timed(engine),
            "plain loop (one request at a time, contiguous KV)": timed(lambda: [sm.generate_alone(model, p, n)
                                                                                for p in prompts]),
            "no KV cache (one request at a time, recompute)": timed(lambda: [no_cache(model, p, n) for p in prompts])}
    outputs = [out for out, _, _ in runs.values()]
    agree = all(o == outputs[0] for o in outputs)
    total = len(prompts) * n
    base = runs["plain loop (one request at a time, contiguous KV)"][1]
    lines = ["| way | generated tokens/s (wall) | wall | CPU | vs plain loop |", "|---|---:|---:|---:|---:|"]
    for name, (_, wall, cpu) in runs.items():
        lines.append(f"| {name} | {total / wall:,.0f} | {wall:.2f} s | {cpu:.2f} s | {base / wall:.2f}x |")
    head = (f"{len(prompts)} requests x {n} greedy tokens on ModelConfig.tiny('llama'), fp32, "
            f"{torch.get_num_threads()} torch threads, nproc {os.cpu_count()}; outputs agree: {agree}")
    print(head)
    print("\n".join(lines))
    if args.write:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = [MARK, "", "## The engine on the CPU at tiny size (`scripts/bench_engine.py`)", "",
                   f"- date: {when}; {head}", "", *lines, ""]
        old = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else ""
        # its own section only: the sections after it (the simulator's profile, the test durations) stay
        RESULTS.write_text(results_md.record(old, "\n".join(section), MARK), encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
