"""What speculation buys, measured in the simulator: the same batch decoded with and without it."""

from __future__ import annotations

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import ModelSpec
from servelab.simulator.arrivals import Requests
from servelab.simulator.loop import simulate
from servelab.simulator.policies import PrefillFirst
from servelab.simulator.speculative import Speculation

__all__ = ["simulated_speedup"]


def simulated_speedup(model: ModelSpec, gpu, batch: int, prompt_len: int, output_len: int,
                      speculation: Speculation, overhead_s: float = costmodel.DEFAULT_STEP_OVERHEAD_S) -> float:
    """Decode throughput with `speculation` over without, simulated: `batch` requests of `prompt_len` arrive
    together and decode `output_len` tokens each under PrefillFirst (so the prefill steps are the same in both
    runs and left out), counted over the decode steps that still hold the whole batch (with speculation the
    sequences finish at different steps); set against speculation.speculative_speedup at about the mean
    context of those steps.

    >>> from servelab.analytic.costmodel import LLAMA3_8B, H100_SXM
    >>> round(simulated_speedup(LLAMA3_8B, H100_SXM, 1, 1024, 64, Speculation(4, 1.0)), 2)   # 5 tokens a step
    4.85
    """
    reqs = Requests([0.0] * batch, [prompt_len] * batch, [output_len] * batch)
    policy = PrefillFirst(max_num_batched_tokens=max(16384, batch * (speculation.k + 1)), max_num_seqs=batch)
    kv = batch * (prompt_len + output_len + speculation.k)
    runs = [simulate(reqs, policy, model, gpu, kv_capacity_tokens=kv, overhead_s=overhead_s, speculation=spec)
            for spec in (None, speculation)]
    return _full_batch_rate(runs[1], batch) / _full_batch_rate(runs[0], batch)


def _full_batch_rate(res, batch: int) -> float:
    """Tokens per second over the decode steps that hold the whole batch: after the last prefill step (the one
    that emitted the last first token), before the first request finishes (speculation's sequences finish at
    different steps, and a drained batch measures the stragglers, not the step)."""
    start = int(res.token_step[res.token_offset].max()) + 1
    steps = np.arange(res.step_seqs.size)
    full = (steps >= start) & (res.step_seqs == batch)
    emitted = np.bincount(res.token_step, minlength=res.step_seqs.size)
    return float(emitted[full].sum() / res.step_duration_s[full].sum())
