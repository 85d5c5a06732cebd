"""servelab.analytic.parallelism and servelab.simulator.parallel: the all-reduces and the KV per TP degree through the
serving model, the pipeline's bubble, the experts' ridge and all-to-all, MLA's KV under DP attention, CUDA-graph
padding and the eager cliff, and the TP decode simulator within 5% of its closed form."""

import math

import numpy as np
import pytest

from servelab.analytic import capacity, costmodel, serving
from servelab.analytic import parallelism as par
from servelab.analytic.costmodel import DEEPSEEK_V3, H100_SXM, H200, LLAMA31_8B, MIXTRAL_8X7B
from servelab.analytic.parallelism import LLAMA31_70B
from servelab.analytic.specs import NVLINK_H100, RDMA_400G
from servelab.simulator import Requests, fixed_lengths, poisson_arrivals
from servelab.simulator.parallel import simulate_tp_decode

G, M8, M70 = H100_SXM, LLAMA31_8B, LLAMA31_70B
SIZES = capacity.cudagraph_capture_sizes(1024, 8192)


def test_the_all_reduces_are_what_the_serving_model_adds_to_a_step():
    f = par.tp_decode(M8, G, 4, 64, 2000)
    assert f.comm_s == pytest.approx(par.tp_comm_s(M8, 64, 4, NVLINK_H100.bandwidth))
    nbytes = 64 * M8.hidden_size * 2
    assert par.tp_comm_s(M8, 64, 4, 1e9, 0.0) == pytest.approx(2 * M8.num_layers * 2 * 3 / 4 * nbytes / 1e9)
    assert par.tp_comm_s(M8, 0, 4, 1e9, 1e-6) == pytest.approx(2 * M8.num_layers * 6e-6)
    assert par.tp_comm_s(M8, 64, 1, 1e9) == 0
    with pytest.raises(ValueError, match="tp"):
        par.tp_comm_s(M8, 64, 0, 1e9)


def test_the_kv_grows_faster_than_the_degree_until_the_heads_run_out():
    kv = {tp: par.kv_tokens_per_degree(M70, G, tp) for tp in (2, 4, 8, 16)}
    assert kv[4] > 2 * kv[2] and kv[8] > 2 * kv[4] and kv[16] < 1.2 * kv[8]
    assert M70.shard(16).num_kv_heads == 1 and M70.shard(8).num_kv_heads == 1
    with pytest.raises(ValueError):
        par.kv_tokens_per_degree(M70, G, 1)                 # 141 GB of weights: no room on one H100
    assert par.kv_tokens_per_degree(M8, G, 1) == costmodel.kv_capacity_tokens(M8, G)
    assert par.tp_decode(M70, G, 4, 16, 2000).kv_capacity == kv[4]


def test_tp_stops_paying_where_the_all_reduces_outgrow_the_read():
    s = {tp: par.tp_decode(M8, G, tp, 64, 2000) for tp in (1, 2, 4, 8)}
    assert s[1].step_s > s[2].step_s > s[4].step_s > s[8].step_s
    assert s[4].step_s - s[8].step_s < s[8].comm_s - s[4].comm_s         # TP8 saves less than its comm adds
    assert par.tp_decode(M70, G, 16, 16, 2000, link=RDMA_400G).step_s > par.tp_decode(M70, G, 8, 16, 2000).step_s


def test_the_bubble_and_the_pipeline():
    assert par.bubble_fraction(4, 4) == pytest.approx(3 / 7) and par.bubble_fraction(1, 3) == 0
    with pytest.raises(ValueError):
        par.bubble_fraction(0, 1)
    tp8 = serving.check(serving.ServingPoint.decode(M70, G, 128, 2000, tp=8))
    pp2 = serving.check(serving.ServingPoint.decode(M70, G, 64, 2000, tp=4, pp=2))
    assert 128 / tp8.step_s > 128 / pp2.step_s                # each batch in flight reads the weights again


def test_experts_move_the_ridge_and_the_all_to_all_counts_both_ways():
    ridge = G.ridge_flops_per_byte
    assert par.expert_ridge_tokens(DEEPSEEK_V3, G) == math.ceil(ridge * 256 / 8)
    assert par.expert_ridge_tokens(MIXTRAL_8X7B, G) == math.ceil(ridge * 8 / 2)
    with pytest.raises(ValueError, match="no experts"):
        par.expert_ridge_tokens(M8, G)
    assert par.all_to_all_bytes(10, 100, 2, 4) == 2 * 10 * 2 * 0.75 * 100 * 2
    assert par.all_to_all_bytes(10, 100, 2, 1) == 0 and par.all_to_all_s(DEEPSEEK_V3, 10, 1) == 0
    assert par.all_to_all_s(DEEPSEEK_V3, 128, 8) > par.all_to_all_s(DEEPSEEK_V3, 128, 2)


def test_dp_attention_holds_mlas_latent_once_per_gpu():
    d = serving.priced(DEEPSEEK_V3, H200, "fp8")[0]
    tp, dp = par.mla_group_kv_tokens(d, H200, 8, False), par.mla_group_kv_tokens(d, H200, 8, True)
    assert tp == costmodel.kv_capacity_tokens(d.shard(8), H200) and dp > 5 * tp
    assert par.weights_per_gpu(d, 8, True) > par.weights_per_gpu(d, 8, False)
    with pytest.raises(ValueError, match="no room"):
        par.mla_group_kv_tokens(DEEPSEEK_V3, H200, 8, False)          # bf16: 168 GB of weights a GPU


def test_a_batch_pads_up_and_runs_eagerly_above_the_largest_graph():
    assert par.pad_to_graph(257, SIZES) == 272 and par.pad_to_graph(512, SIZES) == 512
    assert par.pad_to_graph(513, SIZES) is None and par.pad_to_graph(3, [8, 4, 2]) == 4
    full, eager = par.graph_step(M8, G, 512, 512, SIZES), par.graph_step(M8, G, 513, 512, SIZES)
    assert eager.padded is None and eager.step_s - full.step_s > par.launch_overhead_s(M8, "eager") * 0.9
    piece = par.graph_step(M8, G, 512, 512, SIZES, "piecewise")
    assert piece.step_s - full.step_s == pytest.approx(par.launch_overhead_s(M8, "piecewise"))
    padded = par.graph_step(M8, G, 257, 512, SIZES)
    point = serving.ServingPoint(M8, G, decode_contexts=(512,) * 257 + (0,) * 15)
    assert padded.step_s == pytest.approx(serving.check(point).step_s)
    assert par.graph_captures(SIZES, M8) == len(SIZES) * (M8.num_layers + 2)
    with pytest.raises(ValueError, match="mode"):
        par.launch_overhead_s(M8, "cudagraph")


def test_the_simulator_is_within_five_percent_of_the_closed_form():
    n = 1200
    for tp, rate in ((1, 20.0), (4, 60.0)):
        reqs = Requests(poisson_arrivals(n, rate, seed=3), fixed_lengths(n, 2000), fixed_lengths(n, 128))
        res = simulate_tp_decode(reqs, M8, G, tp=tp)
        tpot, running = par.tp_decode_tpot(M8, G, tp, rate, 2000, 128)
        assert np.nanmean(res.tpot[n // 10:]) == pytest.approx(tpot, rel=0.05)
        assert res.peak_kv_tokens <= par.tp_decode(M8, G, tp, 1, 2000).kv_capacity


def test_the_simulator_steps_are_the_serving_models():
    one = simulate_tp_decode(Requests([0.0], [1000], [3]), M8, G, tp=4)
    steps = [par.tp_decode(M8, G, 4, 1, c).step_s for c in (1000, 1001)]
    assert one.tpot[0] == pytest.approx(sum(steps) / 2)
    eager = simulate_tp_decode(Requests([0.0] * 3, [100] * 3, [2] * 3), M8, G, tp=1, capture_sizes=[1, 2])
    assert eager.eager_steps == 1
    assert eager.tpot[0] == pytest.approx(par.graph_step(M8, G, 3, 100, [1, 2]).step_s)
    with pytest.raises(ValueError, match="tp"):
        simulate_tp_decode(Requests([0.0], [10], [2]), M8, G, tp=0)
    assert math.isinf(par.tp_decode_tpot(M8, G, 1, 1e6, 2000, 128)[0])
