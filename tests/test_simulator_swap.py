"""Swap preemption in the simulator: the same tokens as recompute when nothing is preempted, the host pool
conserved, the copy time of a hand-made case equal to the closed form, the fallback to recompute when the host
is full, the crossover against kv_tiers' closed form, and bad parameters."""

import numpy as np
import pytest

from servelab.analytic import kv_tiers
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B
from servelab.simulator import V1, MixedBudget, PrefillFirst, Requests, Swap, Traced, simulate, uniform_lengths
from servelab.simulator.arrivals import poisson_arrivals
from servelab.simulator.preemption import SWAP_SPACE_BYTES

POLICIES = [PrefillFirst(max_num_batched_tokens=96, max_num_seqs=8), MixedBudget(max_num_batched_tokens=96,
                                                                                  max_num_seqs=8),
            MixedBudget(max_num_batched_tokens=96, max_num_seqs=8, prefill_order="shortest_first")]
SWAP = Swap(host_kv_tokens=100_000, link_bandwidth=64e9, copy_latency_s=10e-6, block_size=16)


def _workload(n=120, seed=0):
    return Requests(poisson_arrivals(n, 40.0, seed=seed), uniform_lengths(n, 1, 120, seed=seed + 1),
                    uniform_lengths(n, 1, 40, seed=seed + 2))


IDS = ["prefill-first", "mixed-fcfs", "mixed-shortest-first"]


@pytest.mark.parametrize("policy", POLICIES, ids=IDS)
def test_without_preemption_swap_gives_recompute_s_tokens_and_times(policy):
    reqs = _workload()
    rec = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=100_000)
    swp = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=100_000, preemption=SWAP)
    assert rec.preemptions.sum() == 0 == swp.swaps_out.sum()
    assert np.array_equal(rec.token_step, swp.token_step) and np.array_equal(rec.step_end_s, swp.step_end_s)
    assert not swp.step_swap_s.any() and swp.host_kv_capacity == 100_000 and rec.host_kv_capacity == 0


@pytest.mark.parametrize("policy", POLICIES, ids=IDS)
def test_under_pressure_every_request_finishes_and_every_host_slot_comes_back(policy):
    reqs = _workload()
    swp = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=400, preemption=SWAP)
    rec = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=400)
    assert (swp.generated == reqs.output_len).all() and swp.swaps_out.sum() > 0
    assert np.array_equal(swp.swaps_out, swp.swaps_in)          # every swap-out came back in (the loop asserts
    assert swp.swap_fallbacks.sum() == 0                        # the pool is whole at the end)
    assert swp.preemptions.sum() == swp.swaps_out.sum() + swp.swap_fallbacks.sum() \
        + np.count_nonzero(swp.victim_tokens == 0)             # a victim with no KV yet has nothing to copy
    # the copy time is what the closed form gives for each victim, out and back in
    want = 2 * sum(SWAP.seconds(LLAMA3_8B, c) for c in swp.victim_tokens if c)
    assert swp.swap_s == pytest.approx(want, rel=1e-9)
    assert np.allclose(swp.step_end_s - swp.step_start_s - swp.step_swap_s > 0, True)
    assert rec.summary().keys() < swp.summary().keys() and "swaps" not in rec.summary()


def test_a_hand_made_preemption_costs_the_closed_form_and_resumes_with_one_token():
    # two 60-token prompts, 10 tokens out each, 125 slots of KV: both admitted (120), both decode until the
    # decodes no longer fit; the later one (request 1) is swapped out with its KV and later swapped back in
    reqs = Requests([0.0, 0.0], [60, 60], [10, 10])
    swap = Swap(host_kv_tokens=1000, link_bandwidth=1e9, copy_latency_s=1e-3, block_size=8)
    traced = Traced(MixedBudget(max_num_batched_tokens=256))
    res = simulate(reqs, traced, LLAMA3_8B, H100_SXM, kv_capacity_tokens=125, preemption=swap)
    assert list(res.swaps_out) == [0, 1] and list(res.swaps_in) == [0, 1]
    c = int(res.victim_tokens[0])
    assert c == 62                                      # 60 prompt + 2 decoded tokens with KV
    one_way = kv_tiers.swap_copies(LLAMA3_8B, c, 8) * (1e-3 + kv_tiers.swap_copy_bytes(LLAMA3_8B, 8) / 1e9)
    assert one_way == pytest.approx(8 * 32 * 2 * (1e-3 + 8 * 8 * 128 * 2 / 1e9))   # 8 blocks of 8
    steps = np.flatnonzero(res.step_swap_s)
    assert len(steps) == 2 and np.allclose(res.step_swap_s[steps], one_way)
    resumed = traced.steps[steps[1]]
    assert (1, 1) in resumed                            # back in, it computes only its token without KV
    assert res.step_duration_s[steps[0]] == pytest.approx(res.step_swap_s[steps[0]]
                                                          + res.step_duration_s[steps[0] - 1], rel=0.05)


def test_a_full_host_pool_falls_back_to_recompute():
    reqs = Requests([0.0, 0.0], [60, 60], [10, 10])
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=256), LLAMA3_8B, H100_SXM, kv_capacity_tokens=125,
                   preemption=Swap(host_kv_tokens=63, block_size=8))      # 62 tokens take 8 blocks = 64 slots
    assert res.swaps_out.sum() == 0 and list(res.swap_fallbacks) == [0, 1] and not res.step_swap_s.any()
    rec = simulate(reqs, MixedBudget(max_num_batched_tokens=256), LLAMA3_8B, H100_SXM, kv_capacity_tokens=125)
    assert np.array_equal(res.token_step, rec.token_step)
    roomy = simulate(reqs, MixedBudget(max_num_batched_tokens=256), LLAMA3_8B, H100_SXM, kv_capacity_tokens=125,
                     preemption=Swap(host_kv_tokens=64, block_size=8))
    assert roomy.swaps_out.sum() == 1


def test_the_string_swap_means_the_documented_defaults():
    res = simulate(Requests([0.0], [10], [3]), MixedBudget(), LLAMA3_8B, H100_SXM, preemption="swap")
    assert res.host_kv_capacity == SWAP_SPACE_BYTES // LLAMA3_8B.kv_bytes_per_token == 32768
    assert Swap() == Swap(None, kv_tiers.PCIE_GEN5_X16.bandwidth, kv_tiers.DEFAULT_COPY_LATENCY_S, 16)


def test_the_crossover_copy_latency_matches_the_closed_form():
    # one long victim (6050 tokens of KV), recomputed alone in a compute-bound step or swapped out and back in
    reqs = Requests([0.0, 0.0], [6000, 6000], [200, 200])
    policy = MixedBudget(max_num_batched_tokens=16384)
    rec = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=12100)
    (c,) = rec.victim_tokens

    def extra_s(latency):
        swp = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=12100,
                       preemption=Swap(host_kv_tokens=10_000, copy_latency_s=latency))
        return swp.duration_s - rec.duration_s

    lo, hi = 0.0, 1e-5
    assert extra_s(lo) < 0 < extra_s(hi)
    for _ in range(18):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if extra_s(mid) < 0 else (lo, mid)
    copies = kv_tiers.swap_copies(LLAMA3_8B, int(c), 16)
    closed = (kv_tiers.recompute_time(LLAMA3_8B, H100_SXM, int(c), mfu=1.0) / 2
              - copies * kv_tiers.swap_copy_bytes(LLAMA3_8B, 16) / kv_tiers.PCIE_GEN5_X16.bandwidth) / copies
    assert lo == pytest.approx(closed, rel=0.10)


@pytest.mark.parametrize("kwargs, match", [
    (dict(host_kv_tokens=-1), "host_kv_tokens"), (dict(host_kv_tokens=1.5), "host_kv_tokens"),
    (dict(link_bandwidth=0), "link_bandwidth"), (dict(link_bandwidth=float("inf")), "link_bandwidth"),
    (dict(copy_latency_s=-1e-6), "copy_latency_s"), (dict(block_size=0), "block_size"),
    (dict(block_size=True), "block_size"),
])
def test_bad_swap_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Swap(**kwargs)


def test_bad_preemption_arguments_are_refused():
    reqs = Requests([0.0], [10], [3])
    for bad in ("Swap", "", None, 3):
        with pytest.raises(ValueError, match="preemption must be"):
            simulate(reqs, MixedBudget(), LLAMA3_8B, H100_SXM, preemption=bad)
    with pytest.raises(ValueError, match="recompute only"):
        simulate(reqs, V1(), LLAMA3_8B, H100_SXM, preemption="swap")
