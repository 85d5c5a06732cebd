"""Asynchronous scheduling in the simulator (simulate(..., async_scheduling=True)): each step lasts the longer of
its CPU and GPU parts instead of their sum, and each request that stopped at step n costs step n+1 one decode.

The gain is checked against async_scheduler.overlap_speedup on decode-only workloads at three CPU/GPU ratios, and
the wasted decodes are counted against the requests that finish before another step runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.schedulers.async_scheduler import overlap_speedup
from servelab.simulator import MixedBudget, Requests, fixed_lengths, poisson_arrivals, simulate


def _batch(n=64, prompt=16, output=400):
    return Requests(np.zeros(n), fixed_lengths(n, prompt), fixed_lengths(n, output))


@pytest.mark.parametrize("ratio", [0.25, 1.0, 3.0])
def test_overlapping_the_cpu_gains_what_the_formula_says(ratio):
    reqs = _batch()
    gpu = costmodel.step_cost(LLAMA3_8B, H100_SXM, decode_context_lens=[216] * 64)
    cpu_s = ratio * max(gpu.compute_s, gpu.memory_s)          # the CPU's share of a mid-run decode step
    sync = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, overhead_s=cpu_s)
    ahead = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, overhead_s=cpu_s, async_scheduling=True)
    assert (ahead.generated == sync.generated).all() and ahead.step_end_s.size == sync.step_end_s.size
    gain = sync.duration_s / ahead.duration_s
    assert gain == pytest.approx(overlap_speedup(cpu_s, max(gpu.compute_s, gpu.memory_s)), rel=0.03)
    assert gain <= 2.0


def test_each_finish_followed_by_a_step_costs_one_wasted_decode():
    reqs = Requests(poisson_arrivals(300, rate=40.0, seed=3), fixed_lengths(300, 200),
                    np.random.default_rng(3).integers(1, 200, 300))
    sync = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM)
    ahead = simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, async_scheduling=True)
    assert sync.wasted_slots == 0
    # a request's last token comes out at a step; a wasted decode rides in the next one, if the engine ran one
    last = np.array([ahead.token_step[ahead.token_offset[i] + ahead.requests.output_len[i] - 1]
                     for i in range(len(reqs))])
    followed = sum(1 for s in last if s + 1 < ahead.step_end_s.size
                   and ahead.step_start_s[s + 1] == ahead.step_end_s[s])        # no idle gap in between
    assert ahead.wasted_slots == followed and 0 < followed <= len(reqs)
    assert ahead.duration_s < sync.duration_s


def test_async_scheduling_must_be_a_bool():
    with pytest.raises(ValueError, match="async_scheduling"):
        simulate(_batch(2), MixedBudget(), LLAMA3_8B, H100_SXM, async_scheduling="yes")
