"""GPUs that only decode: requests join holding their prompts' KV and decode together, one token each a step (chapter
14's decode GPUs, chapter 16's tensor-parallel group), each step priced by the caller."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def decode_pool(ready: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                step_s: Callable[[int, int], float]) -> tuple[np.ndarray, int, float]:
    """Request i joins at the first step boundary from `ready[i]` holding `prompt[i]` tokens of KV and makes its
    remaining `output[i] - 1` tokens, one a step; every step runs every sequence held, and `step_s(b, kv)` prices a
    step of `b` sequences holding `kv` tokens before it. When nothing is held the clock jumps to the next request.
    Returns (finish times: `ready` for a request of one token or none; the peak KV held, tokens, this step's new ones
    included; the time-weighted mean number of sequences while busy)."""
    order = np.argsort(ready, kind="stable")
    order = order[output[order] > 1]
    finish = np.where(output <= 1, ready, np.nan).astype(float)
    ctx = np.empty(0, dtype=np.int64)
    left = np.empty(0, dtype=np.int64)
    who = np.empty(0, dtype=np.int64)
    now, k, peak, busy, weighted = 0.0, 0, 0, 0.0, 0.0
    while k < order.size or who.size:
        if not who.size and ready[order[k]] > now:
            now = ready[order[k]]
        j = k
        while j < order.size and ready[order[j]] <= now:
            j += 1
        new = order[k:j]
        k = j
        ctx = np.concatenate([ctx, prompt[new]])
        left = np.concatenate([left, output[new] - 1])
        who = np.concatenate([who, new])
        b, total = who.size, int(ctx.sum())
        step = step_s(b, total)
        peak = max(peak, total + b)
        busy += step
        weighted += step * b
        now += step
        ctx += 1
        left -= 1
        gone = left == 0
        if gone.any():
            finish[who[gone]] = now
            keep = ~gone
            ctx, left, who = ctx[keep], left[keep], who[keep]
    return finish, peak, (weighted / busy if busy else 0.0)
