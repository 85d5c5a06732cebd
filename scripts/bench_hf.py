"""The engine against Hugging Face transformers' `generate()` on the course's trained tiny model, on the CPU.

    python scripts/bench_hf.py            # print the table
    python scripts/bench_hf.py --write    # and record it in bench/results.md (run by `make bench`)

The model is servelab.engine.model.TINY_CHECKPOINT (`LlamaForCausalLM`, bf16 weights), loaded in float32 by
both sides, torch's own threads. The workload: `prompts.text_requests(64, seed=0, min_tokens=16, max_tokens=96)`,
its arrival steps left aside (everything is there at the start): every other prompt is the shared system prompt
and a question, the others a question alone, each request greedy for exactly its own number of tokens (the
engine's `ignore_eos`; transformers with no eos token). Two ways to produce them:
- the engine, `LLM(TINY_CHECKPOINT, block_size=16, max_num_seqs=16)` with every request submitted at once
  (`generate`): continuous batching over the paged KV cache, prefix caching on, torch attention;
- transformers, `generate()` on static batches of 16 requests in the workload's order, left-padded, each batch
  running until its longest request's count (a row that is done keeps computing: padding and tails are waste).
Both hold at most 16 requests at a time. Tokens/s counts the useful tokens only, each request's own count, for both
sides alike ("tokens computed" is what each side ran through the model: for transformers padding and the tails of
finished rows included, for the engine prefix-cache hits left out); loading is not timed. Wall time and CPU time
(the process, all threads) are printed: the figures are for reading, nothing is asserted. On a machine busy with
other work, pass `--threads 1`: torch's OpenMP threads spinning on shared cores slow the engine's many small
operations far more than transformers' few large ones (measured next to a training run: 14 against 1,500 tokens/s
with 2 threads). The outputs are compared; a request whose tokens differ from its padded batch's is generated again
by transformers alone (no padding), to tell a padding effect (float rounding in a batch of another shape tipping a
near tie) from an engine error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

import torch

from servelab.engine import llm as L
from servelab.engine.model import TINY_CHECKPOINT
from servelab.engine.prompts import BENCH_BATCH, BENCH_WORKLOAD, SYSTEM_PROMPT, text_requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_md  # noqa: E402

RESULTS = results_md.RESULTS
# a section marker scripts/results_md.py recognises (a word, no spaces), so bench.py and the others keep it
MARK = L.HF_BENCH_MARK
W = BENCH_WORKLOAD      # chapter 07 states these: servelab.claims.engine holds it to them
NUM_REQUESTS, SEED, MIN_TOKENS, MAX_TOKENS, BATCH = W["n"], W["seed"], W["min_tokens"], W["max_tokens"], BENCH_BATCH


def workload(n: int = NUM_REQUESTS, seed: int = SEED, min_tokens: int = MIN_TOKENS,
             max_tokens: int = MAX_TOKENS) -> list[tuple[str, int]]:
    """(prompt text, greedy tokens to generate) per request, in submission order."""
    return [(prompt, tokens) for _, prompt, tokens in text_requests(n, seed=seed, min_tokens=min_tokens,
                                                                    max_tokens=max_tokens)]


def load_hf(folder: str | Path = TINY_CHECKPOINT):
    """transformers' model (float32, eval, its eos token unset so that it never stops early) and tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    # generate() fills an unset eos_token_id from the model's own generation config, so it is unset there
    model.generation_config.eos_token_id = None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    return model, tokenizer


def engine(folder: str | Path = TINY_CHECKPOINT, batch: int = BATCH) -> L.LLM:
    return L.LLM(folder, block_size=16, num_blocks=256, max_num_batched_tokens=512, max_num_seqs=batch)


def run_engine(llm: L.LLM, requests: list[tuple[str, int]]) -> list[list[int]]:
    params = [L.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for _, n in requests]
    return [o["token_ids"] for o in llm.generate([p for p, _ in requests], params)]


@torch.no_grad()
def run_hf(model, tokenizer, requests: list[tuple[str, int]], batch: int = BATCH) -> list[list[int]]:
    """Static batches of `batch` requests, left-padded; each runs to its longest count, each request keeps its own."""
    out = []
    for i in range(0, len(requests), batch):
        chunk = requests[i:i + batch]
        enc = tokenizer([p for p, _ in chunk], return_tensors="pt", padding=True)
        seqs = model.generate(**enc, do_sample=False, max_new_tokens=max(n for _, n in chunk))
        width = enc["input_ids"].shape[1]
        out += [seqs[j, width:width + n].tolist() for j, (_, n) in enumerate(chunk)]
    return out


@torch.no_grad()
def hf_alone(model, tokenizer, prompt: str, n: int) -> list[int]:
    """transformers on one prompt, no padding: the reference a padded batch is held to."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    return model.generate(ids, do_sample=False, max_new_tokens=n)[0, ids.shape[1]:].tolist()


def disagreements(model, tokenizer, requests, ours, theirs) -> tuple[int, int]:
    """(requests whose engine tokens differ from the padded batch's, of those the ones that equal transformers
    alone: the padding's doing, not the engine's)."""
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    padding = sum(ours[i] == hf_alone(model, tokenizer, *requests[i]) for i in differ)
    return len(differ), padding


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def table(runs: dict[str, tuple[float, float]], useful: int, computed: dict[str, int]) -> list[str]:
    base = runs["transformers"][0]
    lines = ["| way | useful tokens/s (wall) | wall | CPU | tokens computed | vs transformers |",
             "|---|---:|---:|---:|---:|---:|"]
    names = {"engine": f"engine: continuous batching, paged KV, max {BATCH} running",
             "transformers": f"transformers `generate()`: static batches of {BATCH}, left-padded"}
    for key, (wall, cpu) in runs.items():
        lines.append(f"| {names[key]} | {useful / wall:,.0f} | {wall:.2f} s | {cpu:.2f} s | {computed[key]:,} | "
                     f"{base / wall:.2f}x |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"record the table in {RESULTS.name}")
    parser.add_argument("--checkpoint", type=Path, default=TINY_CHECKPOINT,
                        help="a checkpoint folder (default: the course's trained tiny model)")
    parser.add_argument("-n", type=int, default=NUM_REQUESTS, help=f"requests (default {NUM_REQUESTS})")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own; 1 next to other work, where spinning OpenMP "
                             "threads on shared cores slow small steps many times over)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not (args.checkpoint / "config.json").is_file():
        print(f"{args.checkpoint}: no checkpoint there (`make model` trains it)", file=sys.stderr)
        return 2
    requests = workload(args.n, SEED, MIN_TOKENS, MAX_TOKENS)
    model, tokenizer = load_hf(args.checkpoint)
    llm = engine(args.checkpoint)
    load = os.getloadavg()[0]
    ours, e_wall, e_cpu = timed(lambda: run_engine(llm, requests))
    theirs, h_wall, h_cpu = timed(lambda: run_hf(model, tokenizer, requests))
    differ, padding = disagreements(model, tokenizer, requests, ours, theirs)

    useful = sum(n for _, n in requests)
    prompt_lens = [len(tokenizer(p)["input_ids"]) for p, _ in requests]
    hf_computed = 0   # every row of a batch: its padded prompt, then a token a step to the batch's longest count
    for i in range(0, len(requests), BATCH):
        chunk = range(i, min(i + BATCH, len(requests)))
        hf_computed += len(chunk) * (max(prompt_lens[j] for j in chunk) + max(requests[j][1] for j in chunk) - 1)
    engine_computed = sum(n for _, n, _ in llm.steps)   # prefix-cache hits are not computed
    lines = table({"engine": (e_wall, e_cpu), "transformers": (h_wall, h_cpu)}, useful,
                  {"engine": engine_computed, "transformers": hf_computed})
    shared = sum(p.startswith(SYSTEM_PROMPT) for p, _ in requests)
    work = (f"{len(requests)} requests (`text_requests({len(requests)}, seed={SEED}, min_tokens={MIN_TOKENS}, "
            f"max_tokens={MAX_TOKENS})`): prompts of {min(prompt_lens)}-{max(prompt_lens)} tokens, {shared} opening "
            f"with the shared system prompt; {min(n for _, n in requests)}-{max(n for _, n in requests)} greedy "
            f"tokens each, {useful:,} in all: the useful tokens, which tokens/s counts")
    machine = (f"CPU {results_md.cpu_model()}, nproc {os.cpu_count()}, {torch.get_num_threads()} torch threads, "
               f"load average {load:.2f} at the start; torch {torch.__version__}, "
               f"transformers {_transformers_version()}")
    model_line = f"model: {results_md.shown(args.checkpoint)} in float32"
    verdict = (f"outputs: the engine equals transformers on {len(requests) - differ} of {len(requests)} requests"
               + (f"; of the {differ} that differ, {padding} equal transformers run alone (no padding): a padding "
                  f"effect" if differ else ""))
    ratio = f"engine / transformers (useful tokens/s, wall): {h_wall / e_wall:.2f}x"
    print(work, machine, model_line, sep="\n")
    print("\n".join(lines))
    print(ratio)
    print(verdict)
    if args.write:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = [MARK, "", "## The engine against transformers on the trained tiny model (`scripts/bench_hf.py`)",
                   "", f"- date: {when}", f"- machine: {machine}", f"- {model_line}", f"- workload: {work}",
                   f"- {verdict}", f"- {ratio}", "", *lines, ""]
        old = RESULTS.read_text(encoding="utf-8") if RESULTS.is_file() else ""
        RESULTS.write_text(results_md.record(old, "\n".join(section), MARK), encoding="utf-8")
        print(f"wrote {RESULTS}")
    return 0


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


if __name__ == "__main__":
    sys.exit(main())
