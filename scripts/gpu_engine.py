"""The engine at a real model's shape on a GPU: decode tokens/s at batch 1, 16 and 64 against the cost model.

    python scripts/gpu_engine.py            # on a CUDA GPU: Llama-3-8B's shape, random bf16 weights
    python scripts/gpu_engine.py --smoke    # anywhere: a tiny model on the CPU, to check the script runs

On a GPU the model has Llama-3-8B's dimensions (`servelab.analytic.costmodel.LLAMA3_8B`) with seeded random weights in
bf16 (about 16 GB), attention through the chapter 06 Triton kernels, compiled. For each batch size B, B
requests with 512-token prompts are prefilled, then the script times `--steps` decode steps of the whole
batch (after two warm-up steps) and prints the measured decode tokens/s next to the roofline prediction for
the same steps: B / `costmodel.step_time(LLAMA3_8B, H200, decode_context_lens=...)`, at each step's real
context lengths. The gap between the two is what the engine's Python and launches cost beyond the roofline.
Nothing is asserted; `--write` appends the table to bench/kernels_results.md (or `--out`) as its own section,
each row the moment it is measured, so a run stopped by a timeout keeps the batch sizes it finished;
`--budget` starts no batch size after that many seconds. A figure is only ever measured here: without a GPU
the script says so and measures nothing (the smoke run's figures are CPU ones, labelled, and are written
only to an explicit `--out` other than the results file). `scripts/gpu_check.sh` runs it after the kernels.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import torch

import servelab.kernels  # noqa: F401  (before triton: it picks compiled or interpreted kernels)
from servelab.analytic import costmodel as cm
from servelab.engine import llm as L
from servelab.engine import model as sm

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "kernels_results.md"
PROMPT = 512


def llama3_8b() -> sm.ModelConfig:
    s = cm.LLAMA3_8B
    return sm.ModelConfig("llama", vocab_size=s.vocab_size, hidden_size=s.hidden_size,
                          intermediate_size=s.intermediate_size, num_layers=s.num_layers, num_heads=s.num_heads,
                          num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, rope_theta=500000.0,
                          max_position_embeddings=8192)


def measure(model, batch: int, steps: int, attention: str, sync, prompt: int = PROMPT,
            block_size: int = 16) -> tuple[float, float]:
    """(measured decode tokens/s, predicted tokens/s) for `steps` decode steps of `batch` requests."""
    blocks = batch * (-(-(prompt + steps + 3) // block_size)) + 8
    engine = L.LLM(model, block_size=block_size, num_blocks=blocks, max_num_batched_tokens=prompt * batch,
                   max_num_seqs=batch, enable_prefix_caching=False, attention=attention)
    vocab = model.config.vocab_size
    for i in range(batch):
        engine.add_request([(7 * i + j) % vocab for j in range(prompt)],
                           L.SamplingParams(temperature=0, max_tokens=steps + 3, ignore_eos=True))
    engine.step()                       # the prefill of every request (one step: the budget holds them all)
    for _ in range(2):                  # warm-up decodes (compiles the decode kernel)
        engine.step()
    sync()
    start = time.perf_counter()
    predicted = 0.0
    for k in range(steps):
        predicted += cm.step_time(cm.LLAMA3_8B, cm.H200, decode_context_lens=[prompt + 3 + k] * batch)
        engine.step()
    sync()
    wall = time.perf_counter() - start
    return batch * steps / wall, batch * steps / predicted


def main(argv=None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU, interpreter kernels")
    parser.add_argument("--steps", type=int, default=32, help="timed decode steps per batch size (default 32)")
    parser.add_argument("--write", action="store_true", help=f"append the table to {RESULTS.name} (or --out)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the file --write appends to (default {RESULTS})")
    parser.add_argument("--budget", type=float, default=None, help="seconds: start no batch size after this long")
    args = parser.parse_args(argv)
    if args.smoke and args.write and args.out.resolve() == RESULTS.resolve():
        parser.error(f"a smoke run never writes {RESULTS.name}: its figures are not a GPU's (give --out)")
    if args.smoke:
        model, batches, attention = sm.Model.random(sm.ModelConfig.tiny("llama"), seed=0), (1, 2), "triton"
        steps, sync, prompt = min(args.steps, 2), (lambda: None), 16
        where = "CPU smoke run (tiny model, interpreter): not a GPU figure, and no prediction applies"
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing measured (run with --smoke to check the script on the CPU)")
        return 0
    else:
        model = sm.Model.random(llama3_8b(), seed=0, scale=0.02, dtype=torch.bfloat16, device="cuda")
        batches, attention, steps, sync, prompt = (1, 16, 64), "triton", args.steps, torch.cuda.synchronize, PROMPT
        where = f"{torch.cuda.get_device_name()}, Llama-3-8B shape, random bf16 weights, Triton kernels"
    import triton  # here, after servelab.kernels has chosen how kernels run

    head = (f"{where}; {prompt}-token prompts, {steps} timed decode steps per batch; torch {torch.__version__}, "
            f"triton {triton.__version__}")
    lines = ["| batch | measured decode tokens/s | roofline prediction (H200) | measured / predicted |",
             "|---:|---:|---:|---:|"]
    out = open(args.out, "a", encoding="utf-8") if args.write else None  # noqa: SIM115 - written row by row
    if out:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        out.write(f"\n## The engine at Llama-3-8B's shape (`scripts/gpu_engine.py`)\n\n- {when}; {head}\n\n"
                  + "\n".join(lines) + "\n")
        out.flush()
    print(head)
    print("\n".join(lines), flush=True)
    for b in batches:
        if args.budget is not None and time.monotonic() - started > args.budget:
            lines.append(f"| {b} | not measured: out of time (--budget {args.budget:.0f} s) | - | - |")
        else:
            got, want = measure(model, b, steps, attention, sync, prompt)
            lines.append(f"| {b} | {got:,.1f} | {want:,.1f} | {got / want:.2f} |" if not args.smoke
                         else f"| {b} | {got:,.1f} | - | - |")
        print(lines[-1], flush=True)
        if out:
            out.write(lines[-1] + "\n")
            out.flush()  # on disk now: a timeout during the next batch size keeps this one
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
