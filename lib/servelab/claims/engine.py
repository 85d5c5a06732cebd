"""Chapter 07's numbers: the engine's settings the text restates, and the benchmark's workload it describes."""

from __future__ import annotations

from servelab.claims.core import Claim
from servelab.engine.prompts import BENCH_BATCH, BENCH_WORKLOAD, CHAPTER_ENGINE

# the engine runs a CPU-sized model; the serving model prices GPU steps
CPU = "the CPU engine's own settings on the tiny trained model, not a GPU step the serving model prices"


def ch07() -> list[Claim]:
    a, e, w = "ch07_mini_engine", CHAPTER_ENGINE, BENCH_WORKLOAD
    slots = e["num_blocks"] * e["block_size"]
    return [
        Claim(a, "cell-02", "the chapter engine's blocks", e["num_blocks"], "num_blocks={}", None, CPU),
        Claim(a, "cell-02", "the chapter engine's token budget", e["max_num_batched_tokens"],
              "max_num_batched_tokens={}", None, CPU),
        Claim(a, "cell-05", "the token budget, in the plot's caption", e["max_num_batched_tokens"],
              "up to {} tokens a step", None, CPU),
        Claim(a, "cell-18", "the token budget, in the timeline", e["max_num_batched_tokens"],
              "chunks of at most {} tokens", None, CPU),
        Claim(a, "cell-18", "the KV cache's token slots", slots, "{} token slots in all", None, CPU),
        Claim(a, "cell-20", "the benchmark's requests", w["n"], "serves {} of these text requests", None, CPU),
        Claim(a, "cell-20", "the benchmark's shortest output", w["min_tokens"], "prompt, {}-", None, CPU),
        Claim(a, "cell-20", "the benchmark's longest output", w["max_tokens"], "-{} greedy tokens each", None, CPU),
        Claim(a, "cell-20", "transformers' static batch", BENCH_BATCH, "static batches of {} left-padded", None, CPU),
        Claim(a, "cell-20", "requests at a time, either side", BENCH_BATCH, "at most {} requests at a time", None,
              CPU),
        Claim(a, "cell-22", "tokens a step at most, in the speed note", e["max_num_batched_tokens"],
              "one token or {} (the", None, CPU),
    ]
