"""Where the engine's decode step goes on a GPU: host time against GPU time, at Llama-3-8B's shape.

    python scripts/gpu_engine_profile.py      # on a CUDA GPU (about 30 s); prints, writes nothing

For batch 1 and 64 (512-token prompts, random bf16 weights, the chapter 06 Triton kernels) it prints the wall
time of an engine step, of the model's forward alone on the same decode batch, and of that forward with
attention left out (the linear layers, norms and rotary only); then cProfile's top functions over 3 steps and
torch.profiler's tables over 2 (by GPU time and by host time). `scripts/gpu_engine.py` measures tokens/s
against the roofline; this says why they differ. Nothing is asserted.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]
import gpu_engine  # noqa: E402

from servelab.engine import llm as L  # noqa: E402
from servelab.engine import model as sm  # noqa: E402


def timed(fn, n: int = 4) -> float:
    """Milliseconds per call of fn, the GPU drained before and after."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return 0
    from torch.profiler import ProfilerActivity, profile

    model = sm.Model.random(gpu_engine.llama3_8b(), seed=0, scale=0.02, dtype=torch.bfloat16, device="cuda")
    for batch in (1, 64):
        prompt = 512
        engine = L.LLM(model, block_size=16, num_blocks=batch * (-(-(prompt + 40) // 16)) + 8,
                       max_num_batched_tokens=prompt * batch, max_num_seqs=batch, enable_prefix_caching=False,
                       attention="triton")
        for i in range(batch):
            engine.add_request([(7 * i + j) % 1000 for j in range(prompt)],
                               L.SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
        for _ in range(3):          # the prefill, then two decodes (compiles the kernels)
            engine.step()
        print(f"batch {batch}: {timed(engine.step):.2f} ms per engine step", flush=True)
        b = engine.runner.prepare_decode(list(engine.scheduler.running), 16)
        b = L.Batch(*(getattr(b, f).to("cuda") if isinstance(getattr(b, f), torch.Tensor) else getattr(b, f)
                      for f in L.Batch.__dataclass_fields__))
        with torch.no_grad():
            attend = engine.runner.attend(b)
            model(b.input_ids, b.positions, attend)
            ms = timed(lambda: model(b.input_ids, b.positions, attend))  # noqa: B023
            print(f"batch {batch}: {ms:.2f} ms per model forward (triton attention)", flush=True)
            ms = timed(lambda: model(b.input_ids, b.positions, lambda layer, q, k, v: q))  # noqa: B023
            print(f"batch {batch}: {ms:.2f} ms per model forward (no attention)", flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            engine.step()
        torch.cuda.synchronize()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(22)
        print(text.getvalue()[-6000:])
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(2):
                engine.step()
            torch.cuda.synchronize()
        print(p.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=60))
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
