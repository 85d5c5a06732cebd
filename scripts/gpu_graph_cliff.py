"""What a decode step pays without a CUDA graph: the same forward pass launched op by op (eager) and replayed from
one captured graph, at Llama-3-8B's shape on a GPU, by batch size.

    python scripts/gpu_graph_cliff.py            # on a CUDA GPU: about a minute; prints a table, writes nothing
    python scripts/gpu_graph_cliff.py --smoke    # anywhere: a tiny model on the CPU, eager only (no graphs there)

The model is `servelab.engine.model.Model` with seeded random bf16 weights and Llama-3-8B's dimensions; attention is
torch's scaled_dot_product_attention of each new token over a static cache of `--context` tokens (one K/V tensor
for every layer: what is timed is the launches and the bytes, not the cache's contents). An engine that captures
decode batches up to some size (vLLM: 512 by default) replays a graph below it and runs eagerly above it; the
difference between the two columns is the cliff a batch one past the largest captured size steps off. Each
figure is the median of `--repeats` timed steps after warm-up, CUDA events around each. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]
import gpu_engine  # noqa: E402

from servelab.engine import model as sm  # noqa: E402


def decode_step(model: sm.Model, batch: int, context: int, device: str, dtype):
    """A function running one decode step of `batch` sequences (static inputs, so a graph can capture it)."""
    c = model.config
    ids = torch.zeros(batch, dtype=torch.long, device=device)
    positions = torch.full((batch,), context, dtype=torch.long, device=device)
    k = torch.randn(batch, c.num_kv_heads, context, c.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)

    def attend(layer, q, k_new, v_new):
        out = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True)
        return out.squeeze(2)

    def step():
        with torch.no_grad():
            return model.logits(model(ids, positions, attend)[:, :]).argmax(-1)
    return step


def timed_ms(fn, repeats: int, cuda: bool) -> float:
    if not cuda:
        import time
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU, eager only")
    parser.add_argument("--context", type=int, default=256, help="tokens of context per sequence (default 256)")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per figure (default 20)")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        print("no CUDA device: nothing measured (run with --smoke to check the script on the CPU)")
        return 0
    if args.smoke:
        model = sm.Model.random(sm.ModelConfig.tiny("llama"), seed=0)
        device, dtype, batches = "cpu", torch.float32, (1, 4)
    else:
        device, dtype, batches = "cuda", torch.bfloat16, (1, 16, 64, 256, 512)
        model = sm.Model.random(gpu_engine.llama3_8b(), seed=0, scale=0.02, dtype=dtype, device=device)
    where = torch.cuda.get_device_name() if cuda else "CPU smoke run (tiny model): not a GPU figure"
    print(f"{where}; context {args.context}; median of {args.repeats} steps; torch {torch.__version__}")
    print("| batch | eager ms | CUDA graph ms | eager - graph ms |")
    print("|---:|---:|---:|---:|")
    for batch in batches:
        step = decode_step(model, batch, args.context, device, dtype)
        for _ in range(3):
            step()
        eager = timed_ms(step, args.repeats, cuda)
        if cuda:
            torch.cuda.synchronize()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):        # warm-up on a side stream, as capture requires
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            graph.replay()
            replay = timed_ms(graph.replay, args.repeats, cuda)
            print(f"| {batch} | {eager:.2f} | {replay:.2f} | {eager - replay:.2f} |", flush=True)
            del graph
        else:
            print(f"| {batch} | {eager:.2f} | - | - |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
