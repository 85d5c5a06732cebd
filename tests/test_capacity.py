"""servelab.analytic.capacity: the ceilings on running sequences, Little's law's fixed point, the fleet and the knee,
each checked against a value derived by hand from the model's shapes and the GPU's datasheet numbers."""

import dataclasses
import doctest
import math
import random

import pytest

from servelab.analytic import capacity, costmodel
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B
from servelab.simulator import MixedBudget, Requests, fixed_lengths, poisson_arrivals, simulate

KV = 2 * 32 * 8 * 128 * 2          # Llama-3-8B: K and V, 32 layers, 8 KV heads of 128, bf16


def test_kv_ceiling_is_the_free_memory_over_a_sequences_kv():
    free = 0.92 * H100_SXM.memory_bytes - LLAMA3_8B.weight_bytes - costmodel.activation_bytes(LLAMA3_8B)
    assert capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 2048) == int(free // KV) // 2048 == 228
    assert capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 1) == int(free // KV)
    assert capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 10**6) == 0
    with pytest.raises(ValueError, match="context_len"):
        capacity.kv_ceiling(LLAMA3_8B, H100_SXM, 0)


def test_the_ridge_is_the_closed_form_where_it_exists_and_inf_where_it_does_not():
    # at 256 tokens: f = one token's FLOPs at peak, m = one sequence's KV bytes at full bandwidth, w the weights
    flops = 2 * LLAMA3_8B.matmul_params + 2 * 128256 * 4096 + 4 * 32 * 32 * 128 * 257
    f, m, w = flops / 989e12, 257 * KV / 3.35e12, LLAMA3_8B.weight_bytes / 3.35e12
    assert capacity.compute_ridge_batch(LLAMA3_8B, H100_SXM, 256) == math.ceil(w / (f - m)) == 912
    assert capacity.compute_ridge_batch(LLAMA3_8B, H100_SXM, 2048) == math.inf     # 80 us of KV > 16 us of FLOPs
    rng = random.Random(1)
    for _ in range(30):
        model, gpu, ctx = rng.choice([LLAMA2_7B, LLAMA3_8B]), rng.choice([H100_SXM, H200]), rng.randint(0, 600)
        b = capacity.compute_ridge_batch(model, gpu, ctx)
        if b != math.inf:
            assert costmodel.step_cost(model, gpu, decode_context_lens=[ctx] * b).bound == "compute"
            assert b == 1 or costmodel.step_cost(model, gpu, decode_context_lens=[ctx] * (b - 1)).bound == "memory"


def test_cudagraph_sizes_follow_vllms_default_grid():
    sizes = capacity.cudagraph_capture_sizes(1024, 8192)
    assert sizes == [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)] and len(sizes) == 51
    assert capacity.cudagraph_capture_sizes(128, 2048)[-1] == 256              # 2 x max_num_seqs
    assert capacity.cudagraph_capture_sizes(1024, 100)[-1] == 100              # the budget, appended off-stride
    assert 200 in capacity.cudagraph_capture_sizes(200, 2048)                   # max_num_seqs itself
    assert capacity.cudagraph_capture_sizes(1024, 8192, default_max=1024)[-1] == 1024


def test_running_ceilings_names_the_lowest():
    c = capacity.running_ceilings(LLAMA3_8B, H100_SXM, 2048)
    assert (c.binding, c.value, c.compute_ridge) == ("KV cache", 228, math.inf)
    c = capacity.running_ceilings(LLAMA3_8B, H200, 256)
    assert c.binding == "compute ridge" and c.value == c.compute_ridge < 512


def test_the_cuda_graph_batch_is_a_cliff_not_a_ceiling():
    # at 256 tokens on an H100 the largest captured batch (512) is below the ridge (912), and still not what binds:
    # a batch of 513 runs, eagerly
    c = capacity.running_ceilings(LLAMA3_8B, H100_SXM, 256)
    assert c.cudagraph == 512 < c.compute_ridge == c.value and c.binding == "compute ridge"
    assert "CUDA graphs" not in c.as_dict()


def test_step_line_is_the_memory_bound_step():
    a, b = capacity.step_line(LLAMA3_8B, H100_SXM, 1000)
    for n in (1, 10, 100):
        t = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[1000] * n)
        assert math.isclose(t, a + b * n, rel_tol=1e-12)
    assert math.isclose(b, 1001 * KV / 3.35e12)


def test_the_fixed_point_solves_littles_law_and_diverges_at_the_wall():
    a, b = 0.005, 1e-5
    n = capacity.resident_sequences(100, 500, a, b)          # rate L b = 0.5
    assert math.isclose(n, 100 * 500 * 0.005 / 0.5) and math.isclose(n, 100 * 500 * (a + b * n))
    assert capacity.resident_sequences(200, 500, a, b) == math.inf           # exactly on the wall
    assert capacity.resident_sequences(0, 500, a, b) == 0
    with pytest.raises(ValueError, match="rate"):
        capacity.resident_sequences(-1, 500, a, b)


def test_the_simulator_agrees_with_the_fixed_point():
    a, b = capacity.step_line(LLAMA3_8B, H100_SXM, capacity.mean_context(64, 256))
    rate, n = 80.0, 2400
    reqs = Requests(poisson_arrivals(n, rate, seed=3), fixed_lengths(n, 64), fixed_lengths(n, 256))
    res = simulate(reqs, MixedBudget(8192, 1024), LLAMA3_8B, H100_SXM)
    got = capacity.time_weighted_running(res, 10.0, 30.0)
    assert got == pytest.approx(capacity.resident_sequences(rate, 256, a, b), rel=0.04)
    with pytest.raises(ValueError, match="no step starts"):
        capacity.time_weighted_running(res, 1e6, 1e6 + 1)


def test_fleet_prices_each_phase_by_its_own_step():
    plan = capacity.fleet_size(LLAMA3_8B, H100_SXM, 8192e6, 1e6, prompt_len=1024, batch=64)
    prefill_step = costmodel.step_time(LLAMA3_8B, H100_SXM, [1024] * 8)      # 8 prompts fill an 8192 budget
    decode_step = costmodel.step_time(LLAMA3_8B, H100_SXM, decode_context_lens=[1024] * 64)  # 1024 + 0.125/2
    assert math.isclose(plan.prefill_gpu_hours, 1e6 * prefill_step / 3600)
    assert math.isclose(plan.decode_gpu_hours, 1e6 * decode_step / 64 / 3600)
    assert plan.gpus == math.ceil(plan.gpu_hours / 24)
    assert math.isclose(plan.usd_per_million_tokens(2.0), plan.gpu_hours * 2.0 / 8193)
    cached = capacity.fleet_size(LLAMA3_8B, H100_SXM, 8192e6, 1e6, prompt_len=1024, batch=64, cached_prefix=512)
    assert cached.prefill_gpu_hours < 0.6 * plan.prefill_gpu_hours


def test_a_mixed_fleet_prices_each_decode_step_with_the_prompts_it_carries():
    # 20 input tokens per output token, 2000-token prompts, batch 200: each decode step carries two whole prompts
    # (4000 tokens), so a day is 1e6 / 200 steps of exactly this step_cost
    plan = capacity.mixed_fleet_size(LLAMA3_8B, H100_SXM, 20e6, 1e6, prompt_len=2000, batch=200)
    step = costmodel.step_cost(LLAMA3_8B, H100_SXM, [2000, 2000], decode_context_lens=[2050] * 200)
    assert step.bound == "compute"
    assert math.isclose(plan.gpu_hours, 1e6 / 200 * step.seconds(capacity.DEFAULT_STEP_OVERHEAD_S) / 3600)
    decode_flops = (step.flops - costmodel.step_cost(LLAMA3_8B, H100_SXM, [2000, 2000]).flops)
    assert math.isclose(plan.decode_gpu_hours / plan.gpu_hours, decode_flops / step.flops)
    apart = capacity.fleet_size(LLAMA3_8B, H100_SXM, 20e6, 1e6, prompt_len=2000, batch=200)
    assert plan.gpu_hours < 0.85 * apart.gpu_hours      # decode's weight reads ride under the prompts' matmuls
    # a budget too small for what the ratio supplies: the rest is prefilled in steps of its own
    small = capacity.mixed_fleet_size(LLAMA3_8B, H100_SXM, 20e6, 1e6, prompt_len=2000, batch=200, budget=3200)
    carried = costmodel.step_time(LLAMA3_8B, H100_SXM, [2000, 1000], decode_context_lens=[2050] * 200)
    assert small.gpu_hours > plan.gpu_hours
    rest = 1000 * 1e6 / 200 * capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, 2000, 3200)
    # within 1%: the function spreads a prompt's attention pairs evenly over its tokens, the stand-in step does not
    assert math.isclose(small.gpu_hours, (1e6 / 200 * carried + rest) / 3600, rel_tol=1e-2)
    with pytest.raises(ValueError, match="no room for prompt tokens"):
        capacity.mixed_fleet_size(LLAMA3_8B, H100_SXM, 20e6, 1e6, prompt_len=2000, batch=200, budget=200)
    with pytest.raises(ValueError, match="cached_prefix"):
        capacity.mixed_fleet_size(LLAMA3_8B, H100_SXM, 20e6, 1e6, prompt_len=2000, batch=200, cached_prefix=2000)


def test_a_prompt_longer_than_the_budget_is_chunked_on_its_prefix():
    per_token = capacity.prefill_s_per_token(LLAMA3_8B, H100_SXM, 3000, budget=2048)
    steps = (costmodel.step_time(LLAMA3_8B, H100_SXM, 2048)
             + costmodel.step_time(LLAMA3_8B, H100_SXM, 952, prefill_context=2048))
    assert math.isclose(per_token, steps / 3000)


def test_prefill_share_ratio_inverts_the_share():
    r = capacity.prefill_share_ratio(0.75, 2e-5, 1e-4)
    assert math.isclose(r * 2e-5 / (r * 2e-5 + 1e-4), 0.75) and math.isclose(r, 15.0)
    with pytest.raises(ValueError, match="share"):
        capacity.prefill_share_ratio(1.0, 1e-5, 1e-4)


def test_the_knee_is_the_first_compute_bound_budget():
    for d, ctx in ((0, 0), (64, 2048), (16, 512)):
        k = capacity.budget_knee(LLAMA3_8B, H100_SXM, d, ctx) - d
        assert costmodel.step_cost(LLAMA3_8B, H100_SXM, k, [ctx] * d).bound == "compute"
        assert k == 1 or costmodel.step_cost(LLAMA3_8B, H100_SXM, k - 1, [ctx] * d).bound == "memory"
    assert capacity.budget_knee(LLAMA3_8B, H100_SXM, 1024, 16) == 1024
    # a derated GPU moves the knee by alpha / beta: earlier when FLOPs fall further short than bandwidth
    slow = dataclasses.replace(H100_SXM, peak_flops=0.5 * H100_SXM.peak_flops)
    assert capacity.budget_knee(LLAMA3_8B, slow, 64, 2048) < capacity.budget_knee(LLAMA3_8B, H100_SXM, 64, 2048)


def test_the_worked_examples_in_the_docstrings_hold():
    assert doctest.testmod(capacity).failed == 0


def test_the_compute_line_is_the_compute_bound_step():
    o, f = capacity.compute_line(LLAMA3_8B, H100_SXM, 300)
    for n in (1, 100, 3000):
        cost = costmodel.step_cost(LLAMA3_8B, H100_SXM, decode_context_lens=[300] * n)
        assert o + f * n == pytest.approx(cost.compute_s + costmodel.DEFAULT_STEP_OVERHEAD_S)


def test_the_steady_state_ends_at_the_first_of_the_cap_the_cache_and_the_two_walls():
    lim = capacity.steady_state_limits(LLAMA3_8B, H100_SXM, 64, 512)
    ctx = capacity.mean_context(64, 512)
    lines = (capacity.step_line(LLAMA3_8B, H100_SXM, ctx), capacity.compute_line(LLAMA3_8B, H100_SXM, ctx))
    # at the cap's rate the fixed point is exactly the cap; at the cache's, the cache is full
    assert capacity.resident_at(lim.max_num_seqs, 512, lines) == pytest.approx(1024)
    assert capacity.resident_at(lim.kv, 512, lines) * ctx == pytest.approx(costmodel.kv_capacity_tokens(LLAMA3_8B,
                                                                                                       H100_SXM))
    # the memory line alone diverges later than the compute line: f > b at this context
    assert lim.max_num_seqs < lim.kv < lim.compute_wall < lim.memory_wall and lim.first == "max_num_seqs"
    assert capacity.resident_at(lim.compute_wall * 1.001, 512, lines) == math.inf
