"""servelab.analytic.kv_tiers: recompute vs swap, worked examples (the module's doctests), values derived by hand from
the model shapes, and bad parameters."""

import doctest
import math
import random

import pytest

from servelab.analytic import kv_tiers as K
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B


def test_the_docstrings_worked_examples():
    assert doctest.testmod(K).failed == 0


def test_the_link_figures():
    assert K.PCIE_GEN5_X16.bandwidth == 53e9                 # what pinned copies reach: within 50-55 GB/s
    assert 50e9 <= K.PCIE_GEN5_X16.bandwidth <= 55e9 < K.PCIE_GEN5_X16_RAW.bandwidth
    assert K.PCIE_GEN5_X16_RAW.bandwidth == pytest.approx(63.015e9, rel=1e-4)   # 32 GT/s x 16 x 128/130 / 8


def test_recompute_time_is_the_prefill_s_flops_at_the_stated_fraction_of_peak():
    n = 1000
    matmul = 2 * LLAMA3_8B.matmul_params * n
    attention = 4 * 32 * 32 * 128 * (n * (n + 1) // 2)
    lm_head = 2 * LLAMA3_8B.vocab_size * LLAMA3_8B.hidden_size
    assert K.recompute_time(LLAMA3_8B, H100_SXM, n, mfu=0.4) == pytest.approx(
        (matmul + attention + lm_head) / (0.4 * 989e12), rel=1e-12)
    assert K.recompute_time(LLAMA3_8B, H200, n) == K.recompute_time(LLAMA3_8B, H100_SXM, n)   # same compute


def test_the_break_even_bandwidth_is_a_round_trip_of_kv_bytes_over_recompute_seconds_per_token():
    for model in (LLAMA2_7B, LLAMA3_8B):
        per_token_s = K.recompute_time(model, H100_SXM, 1024) / 1024
        # out at preemption and back in at resumption, against one recompute
        assert K.break_even_bandwidth(model, H100_SXM) == pytest.approx(2 * model.kv_bytes_per_token / per_token_s)
    assert K.break_even_bandwidth(LLAMA3_8B, H100_SXM) == pytest.approx(9.11e9, rel=1e-3)
    assert K.break_even_bandwidth(LLAMA2_7B, H100_SXM) == pytest.approx(39.2e9, rel=1e-3)
    # GQA: a quarter of the KV for a little more compute, so about a quarter of the break-even
    ratio = K.break_even_bandwidth(LLAMA3_8B, H100_SXM) / K.break_even_bandwidth(LLAMA2_7B, H100_SXM)
    assert 0.2 < ratio < 0.25
    # the link is above both: per token, a round trip at full link speed is cheaper than recomputing
    assert K.PCIE_GEN5_X16.bandwidth / K.break_even_bandwidth(LLAMA2_7B, H100_SXM) == pytest.approx(1.35, abs=0.01)


def test_copy_sizes_counts_and_times_by_hand():
    # one block of one layer's K: block_size x kv_heads x head_dim x 2 bytes
    assert K.swap_copy_bytes(LLAMA2_7B, 16) == 16 * 32 * 128 * 2
    assert K.swap_copy_bytes(LLAMA3_8B, 32) == 32 * 8 * 128 * 2
    assert K.swap_copies(LLAMA3_8B, 0, 16) == 0
    assert K.swap_copies(LLAMA3_8B, 16, 16) == 64 and K.swap_copies(LLAMA3_8B, 17, 16) == 128
    # all copies together carry the whole blocks' KV: copies x copy bytes = blocks x block_size x KV per token
    rng = random.Random(0)
    for _ in range(150):
        model = rng.choice([LLAMA2_7B, LLAMA3_8B])
        tokens, bs = rng.randint(0, 20000), rng.choice([1, 8, 16, 32, 64, 256])
        bw, lat = rng.uniform(1e9, 100e9), rng.choice([0.0, rng.uniform(0, 50e-6)])
        copies = K.swap_copies(model, tokens, bs)
        assert copies * K.swap_copy_bytes(model, bs) == math.ceil(tokens / bs) * bs * model.kv_bytes_per_token
        t = K.swap_time(model, tokens, bs, bw, lat)
        assert t == pytest.approx(copies * lat + copies * K.swap_copy_bytes(model, bs) / bw, rel=1e-12)
        if tokens:
            eff = K.effective_copy_bandwidth(K.swap_copy_bytes(model, bs), bw, lat)
            assert t == pytest.approx(copies * K.swap_copy_bytes(model, bs) / eff, rel=1e-12)


def test_effective_bandwidth_and_the_smallest_copy_that_reaches_a_target():
    assert K.effective_copy_bandwidth(1e6, 64e9, 0.0) == pytest.approx(64e9)
    assert K.effective_copy_bandwidth(64e3, 64e9, 1e-6) == pytest.approx(32e9)   # latency = transfer time
    for target in (1e9, 4.56e9, 19.6e9, 40e9):
        s = K.break_even_copy_bytes(target, 64e9, 10e-6)
        assert K.effective_copy_bandwidth(s, 64e9, 10e-6) == pytest.approx(target)
    assert K.break_even_copy_bytes(64e9, 64e9) == math.inf
    # 16-token blocks fall below the break-even at 10 us a copy for both models; Llama-3-8B's 64-token blocks do
    # not, LLaMA-2-7B's need over 180 tokens (its round trip breaks even near the link's own bandwidth)
    link = K.PCIE_GEN5_X16.bandwidth
    for model in (LLAMA2_7B, LLAMA3_8B):
        be = K.break_even_bandwidth(model, H100_SXM)
        assert K.effective_copy_bandwidth(K.swap_copy_bytes(model, 16), link) < be
    assert K.effective_copy_bandwidth(K.swap_copy_bytes(LLAMA3_8B, 64), link) > K.break_even_bandwidth(LLAMA3_8B,
                                                                                                        H100_SXM)
    assert K.effective_copy_bandwidth(K.swap_copy_bytes(LLAMA2_7B, 180), link) < K.break_even_bandwidth(LLAMA2_7B,
                                                                                                        H100_SXM)
    assert K.effective_copy_bandwidth(K.swap_copy_bytes(LLAMA2_7B, 192), link) > K.break_even_bandwidth(LLAMA2_7B,
                                                                                                        H100_SXM)


@pytest.mark.parametrize("call, match", [
    (lambda: K.recompute_time(LLAMA3_8B, H100_SXM, 0), "tokens"),
    (lambda: K.recompute_time(LLAMA3_8B, H100_SXM, 10, mfu=0), "mfu"),
    (lambda: K.recompute_time(LLAMA3_8B, H100_SXM, 10, mfu=1.5), "mfu"),
    (lambda: K.break_even_bandwidth(LLAMA3_8B, H100_SXM, tokens=2.5), "tokens"),
    (lambda: K.swap_copy_bytes(LLAMA3_8B, 0), "block_size"),
    (lambda: K.swap_copies(LLAMA3_8B, -1, 16), "tokens"),
    (lambda: K.swap_time(LLAMA3_8B, 100, 16, 0.0), "link_bandwidth"),
    (lambda: K.swap_time(LLAMA3_8B, 100, 16, 64e9, -1.0), "copy_latency_s"),
    (lambda: K.effective_copy_bandwidth(0, 64e9), "copy_bytes"),
    (lambda: K.effective_copy_bandwidth(1e5, float("nan")), "link_bandwidth"),
    (lambda: K.break_even_copy_bytes(-1.0, 64e9), "target_bandwidth"),
    (lambda: K.LinkSpec("bad", 0, "none"), "bandwidth"),
])
def test_bad_parameters_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
