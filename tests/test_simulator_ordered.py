"""The orders for the two halves of a request's work: `servelab.analytic.ordering` (skip-join MLFQ levels, aging,
predicted lengths) and the simulator's `Ordered` policy and `MixedBudget(aging_rate=...)`."""

from __future__ import annotations

import random

import numpy as np
import pytest

from servelab.analytic import ordering
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B, LLAMA31_8B
from servelab.simulator import (
    MixedBudget,
    Ordered,
    Requests,
    Swap,
    lognormal_lengths,
    merge_requests,
    mixed_fast,
    poisson_arrivals,
    simulate,
)


def _same(a, b):
    for name in ("step_start_s", "step_end_s", "step_tokens", "step_seqs", "token_step", "preemptions"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def _workload(seed: int, n: int = 60) -> Requests:
    rng = np.random.default_rng(seed)
    return Requests(np.sort(rng.uniform(0, 0.5, n)), rng.integers(1, 600, n), rng.integers(1, 80, n))


def test_mlfq_levels_agree_with_the_scalar_rule_at_every_edge():
    rng = random.Random(3)
    for _ in range(5000):
        q, levels = rng.randint(1, 50), rng.randint(1, 9)
        first, served = rng.randint(0, q << levels), rng.randint(0, q << (levels + 1))
        assert ordering.mlfq_levels([first], [served], q, levels)[0] == ordering.mlfq_level(first, served, q, levels)
    # the edges: a first iteration that exactly fills a quantum joins that level; service equal to the quanta so far
    # stays, one token more moves down
    assert ordering.mlfq_entry_level(128, 64, 8) == 1 and ordering.mlfq_entry_level(129, 64, 8) == 2
    assert ordering.mlfq_level(0, 64, 64, 8) == 0 and ordering.mlfq_level(0, 65, 64, 8) == 1
    assert ordering.mlfq_level(0, 64 + 128, 64, 8) == 1 and ordering.mlfq_level(0, 64 + 128 + 1, 64, 8) == 2
    assert ordering.mlfq_level(10**6, 10**9, 1, 3) == 2 and ordering.mlfq_level(5, 10**9, 64, 1) == 0
    with pytest.raises(ValueError, match="first_quantum"):
        ordering.mlfq_level(1, 1, 0, 3)


def test_predicted_lengths_are_the_truth_without_error_and_seeded_with_it():
    out = np.array([1, 10, 100, 1000])
    assert np.array_equal(ordering.predicted_lengths(out, 0.0), out)
    a, b = ordering.predicted_lengths(out, 1.0, seed=5), ordering.predicted_lengths(out, 1.0, seed=5)
    assert np.array_equal(a, b) and not np.array_equal(a, out)
    assert ordering.aged_priority(1000, 0.5, 0.0) == 1000 and ordering.aged_priority(1000, 0.5, 100.0) == 950


@pytest.mark.parametrize("seed", range(6))
def test_ordered_fcfs_makes_mixed_budgets_steps_and_one_mlfq_level_is_fcfs(seed):
    reqs = _workload(seed)
    budget, cap = [8, 64, 512][seed % 3], [2, 4, 16][seed % 3]
    ref = simulate(reqs, MixedBudget(budget, cap), LLAMA3_8B, H100_SXM)
    _same(simulate(reqs, Ordered("fcfs", budget, cap), LLAMA3_8B, H100_SXM), ref)
    _same(simulate(reqs, Ordered("mlfq", budget, cap, levels=1), LLAMA3_8B, H100_SXM), ref)


def test_aging_rate_zero_is_shortest_prompt_first_and_aging_bounds_the_long_prompts_wait():
    n = 500      # chapter 03's workload: a queue of short prompts has formed when the 32K one arrives
    bg = Requests(poisson_arrivals(n, 16.0, seed=21), lognormal_lengths(n, 256, 0.8, seed=22, high=4096),
                  lognormal_lengths(n, 64, 1.5, seed=23, high=4096))
    reqs, (_, long) = merge_requests(bg, Requests([10.0], [32768], [64]))
    spf = simulate(reqs, MixedBudget(2048, 16, prefill_order="shortest_first"), LLAMA31_8B, H100_SXM)
    _same(simulate(reqs, MixedBudget(2048, 16, prefill_order="shortest_first", aging_rate=0.0), LLAMA31_8B,
                   H100_SXM), spf)
    aged = simulate(reqs, MixedBudget(2048, 16, prefill_order="shortest_first", aging_rate=4096.0), LLAMA31_8B,
                    H100_SXM)
    assert spf.ttft[long][0] > 2 * aged.ttft[long][0]      # served only when the stream of short prompts ends
    assert aged.ttft[long][0] < 32768 / 4096 + 4.0        # ahead of every newcomer after 8 s, then a seat
    assert not mixed_fast.applies(MixedBudget(2048, 16, prefill_order="shortest_first", aging_rate=1.0), None, None,
                                  False, None, None)
    with pytest.raises(ValueError, match="aging_rate ages the shortest_first order"):
        MixedBudget(aging_rate=1.0)
    with pytest.raises(ValueError, match="aging_rate must be"):
        MixedBudget(prefill_order="shortest_first", aging_rate=-1.0)


def test_predicted_order_with_the_true_lengths_beats_fcfs_and_the_gain_decays_with_the_error():
    n = 300
    reqs = Requests(poisson_arrivals(n, 16.0, seed=21), lognormal_lengths(n, 256, 0.8, seed=22, high=4096),
                    lognormal_lengths(n, 64, 1.5, seed=23, high=4096))

    def mean_completion(policy):
        res = simulate(reqs, policy, LLAMA31_8B, H100_SXM, preemption=Swap(host_kv_tokens=10**6, block_size=256))
        return float(np.mean(res.finish_s - res.arrival_s))

    fcfs = mean_completion(MixedBudget(2048, 16))
    exact = mean_completion(Ordered("predicted", 2048, 16, predicted_output=reqs.output_len))
    assert exact == mean_completion(Ordered("predicted", 2048, 16,
                                            predicted_output=ordering.predicted_lengths(reqs.output_len, 0.0)))
    noisy = mean_completion(Ordered("predicted", 2048, 16,
                                    predicted_output=ordering.predicted_lengths(reqs.output_len, 2.0, seed=24)))
    assert exact < noisy < fcfs


def test_mlfq_serves_newcomers_first_and_every_request_finishes():
    reqs = _workload(7, 80)
    res = simulate(reqs, Ordered("mlfq", 64, 4, first_quantum=2, levels=4, prompt_tokens_per_step=64), LLAMA3_8B,
                   H100_SXM, kv_capacity_tokens=2000)
    assert (res.generated == reqs.output_len).all() and res.preemptions.sum() > 0
    fcfs = simulate(reqs, MixedBudget(64, 4), LLAMA3_8B, H100_SXM, kv_capacity_tokens=2000)
    assert np.mean(res.ttft) < np.mean(fcfs.ttft)


def test_ordered_refuses_bad_settings():
    for bad, match in ((dict(order="lifo"), "order must be one of"), (dict(levels=0), "levels must be"),
                       (dict(first_quantum=1.5), "first_quantum must be"),
                       (dict(order="predicted"), "predicted_output"),
                       (dict(predicted_output=[1, 2]), "predicted_output"),
                       (dict(max_num_seqs=0), "max_num_seqs")):
        with pytest.raises(ValueError, match=match):
            Ordered(**bad)
