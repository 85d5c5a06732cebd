"""servelab.analytic.disaggregation and servelab.simulator.disaggregated: the interference, the one-way KV transfer
and its overlap, the break-even link, the pools, and the two-pool simulator within 5% of the closed forms."""

import math

import numpy as np
import pytest

from servelab.analytic import costmodel, kv_tiers
from servelab.analytic import disaggregation as dg
from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA31_8B
from servelab.simulator import Requests, fixed_lengths, poisson_arrivals
from servelab.simulator.disaggregated import simulate_split

M, G = LLAMA31_8B, H100_SXM


def test_the_stretch_is_one_roofline_step_over_the_decode_step():
    mixed = costmodel.step_time(M, G, prefill_tokens=4000, decode_context_lens=[4000] * 32)
    alone = costmodel.step_time(M, G, decode_context_lens=[4000] * 32)
    assert dg.tpot_stretch(M, G, 4000, 32, 4000) == pytest.approx(mixed / alone)
    assert dg.tpot_stretch(M, G, 1, 32, 4000) < 1.01 < dg.tpot_stretch(M, G, 1024, 32, 4000)


def test_the_transfer_is_one_way_and_the_overlap_hides_all_but_the_last_layer():
    nbytes = dg.kv_transfer_bytes(M, 8000)
    assert nbytes == 32 * 8 * 128 * 2 * 2 * 8000                       # layers x heads x dim x K,V x bytes x tokens
    whole = dg.exposed_transfer_s(M, G, 8000, 50e9, layerwise=False)
    assert whole == pytest.approx(nbytes / 50e9)                        # one crossing, not chapter 8's two
    assert dg.exposed_transfer_s(M, G, 8000, 50e9) == pytest.approx(whole / 32)
    # a link slower than the prefill: what exceeds its compute is exposed
    compute = costmodel.step_time(LLAMA2_7B, G, prefill_tokens=4000, overhead_s=0.0)
    slow = dg.exposed_transfer_s(LLAMA2_7B, G, 4000, 5e9)
    assert slow == pytest.approx(dg.kv_transfer_bytes(LLAMA2_7B, 4000) / 5e9 - 31 / 32 * compute)
    assert dg.exposed_transfer_s(M, G, 0, 50e9) == 0
    assert kv_tiers.PCIE_GEN5_X16 in dg.LINKS
    assert dg.RDMA_400G.bandwidth == 400e9 / 8


def test_the_break_even_bandwidth_gives_the_budget_back():
    for p, budget, layerwise in ((8000, 0.010, True), (8000, 0.010, False), (4000, 0.0005, True), (2000, 0.05, True)):
        bw = dg.break_even_bandwidth(M, G, p, budget, layerwise)
        assert dg.exposed_transfer_s(M, G, p, bw, layerwise) == pytest.approx(budget)
        assert dg.exposed_transfer_s(M, G, p, bw * 0.99, layerwise) > budget


def test_the_pools_are_the_fewest_that_meet_both_targets():
    args = (M, G, 100.0, 4000, 256, 0.2, 0.012, 50e9)
    n_p, n_d = dg.pd_pools(*args)
    assert (n_p, n_d) == (8, 8)
    assert dg.split_ttft(M, G, 100 / n_p, 4000, 50e9) <= 0.2 < dg.split_ttft(M, G, 100 / (n_p - 1), 4000, 50e9)
    assert dg.decode_tpot(M, G, 100 / n_d, 4000, 256)[0] <= 0.012 < dg.decode_tpot(M, G, 100 / (n_d - 1), 4000, 256)[0]
    with pytest.raises(ValueError, match="TTFT target"):
        dg.pd_pools(M, G, 10.0, 8000, 256, 0.1, 0.03, 50e9)
    assert dg.split_ttft(M, G, 100.0, 4000, 50e9) == math.inf


def test_mixed_wins_short_prompts_and_split_wins_long_ones_at_a_tight_tpot():
    short = dg.goodput_per_gpu(M, G, 100.0, 1000, 256, 0.2, 0.012, 50e9)
    long = dg.goodput_per_gpu(M, G, 100.0, 4000, 256, 0.2, 0.012, 50e9)
    assert short[1] > short[0] and long[0] > long[1]


def test_the_simulator_is_within_five_percent_of_the_closed_forms():
    """A prefill pool at utilization 0.6 (M/D/1 converges in a short run there) and one decode GPU."""
    n, rate = 1500, 10.0
    reqs = Requests(poisson_arrivals(n, rate, seed=1), fixed_lengths(n, 4000), fixed_lengths(n, 128))
    res = simulate_split(reqs, M, G, prefill_gpus=2, decode_gpus=1, link_bandwidth=50e9, seed=1)
    warm = slice(n // 10, None)
    ttft = dg.split_ttft(M, G, rate / 2, 4000, 50e9)
    tpot = dg.decode_tpot(M, G, rate, 4000, 128)[0]
    assert res.ttft[warm].mean() == pytest.approx(ttft, rel=0.05)
    assert np.nanmean(res.tpot[warm]) == pytest.approx(tpot, rel=0.05)
    assert res.peak_kv_tokens.max() <= costmodel.kv_capacity_tokens(M, G)


def test_the_simulator_alone_is_prefill_then_transfer():
    one = simulate_split(Requests([0.0], [4000], [5]), M, G, prefill_gpus=1, decode_gpus=1, link_bandwidth=50e9,
                         layerwise=False)
    assert one.ttft[0] == pytest.approx(dg.prefill_s(M, G, 4000) + dg.kv_transfer_bytes(M, 4000) / 50e9)
    steps = [costmodel.step_time(M, G, decode_context_lens=[4000 + k]) for k in range(4)]
    assert one.tpot[0] == pytest.approx(sum(steps) / 4)
    with pytest.raises(ValueError, match="prefill_gpus"):
        simulate_split(Requests([0.0], [10], [2]), M, G, prefill_gpus=0, decode_gpus=1, link_bandwidth=1e9)
