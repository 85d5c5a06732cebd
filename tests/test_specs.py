"""The serving model's parameters beyond one GPU and a dense model: mixture-of-experts and MLA shapes, tensor and
pipeline parallelism, int4 weights. Totals are checked against the published figures, the expected-experts formula
against sampled routing, and each parallel rule against the quantity it divides."""

import dataclasses

import numpy as np
import pytest

from servelab.analytic import costmodel, serving
from servelab.analytic.serving import Infeasible, ServingPoint, all_reduce_s, check
from servelab.analytic.specs import DEEPSEEK_V3, H100_SXM, LLAMA2_7B, LLAMA3_8B, MIXTRAL_8X7B, NVLINK_H100, ModelSpec


def test_published_sizes():
    # Mixtral of Experts, section 2: 47B parameters, 13B active; DeepSeek-V3 report: 671B, 37B active
    assert round(MIXTRAL_8X7B.param_count / 1e9) == 47 and round(MIXTRAL_8X7B.active_params / 1e9) == 13
    assert round(DEEPSEEK_V3.param_count / 1e9) == 671 and round(DEEPSEEK_V3.active_params / 1e9) in (37, 38)
    # DeepSeek-V2 report, section 2.1: MLA caches (d_c + d_h^R) = 4.5 d_h elements a layer, d_h = 128
    assert DEEPSEEK_V3.kv_bytes_per_token == 61 * 4.5 * 128 * 2
    # a dense model is unchanged: active = total, and its FLOPs use every weight
    assert LLAMA3_8B.active_params == LLAMA3_8B.param_count and not LLAMA3_8B.is_moe and not LLAMA3_8B.is_mla


def test_dense_pricing_is_bitwise_what_it_was():
    """The attention term and the weight reads of a dense model are the same floats as the formula they replaced."""
    for m in (LLAMA2_7B, LLAMA3_8B):
        assert m.attention_flops_per_pair * 12345 == 4.0 * m.num_layers * m.num_heads * m.head_dim * 12345
        assert m.weight_bytes_read(7) == m.weight_bytes
    cost = costmodel.step_cost(LLAMA3_8B, H100_SXM, decode_context_lens=[1000] * 3)
    assert cost.weight_bytes == LLAMA3_8B.weight_bytes


@pytest.mark.parametrize("tokens", [1, 2, 8, 64])
def test_expected_experts_touched_matches_sampled_routing(tokens):
    """E x (1 - (1 - k/E)^n) against routing sampled token by token (k distinct experts each, uniform)."""
    rng = np.random.default_rng(tokens)
    m = MIXTRAL_8X7B
    e, k = m.num_experts, m.experts_per_token
    sampled = np.mean([len({x for _ in range(tokens) for x in rng.choice(e, k, replace=False)})
                       for _ in range(4000)])
    idle_bytes = (m.weight_bytes - m.weight_bytes_read(tokens)) / (m.num_moe_layers * m.expert_params * 2)
    assert abs((e - idle_bytes) - sampled) / sampled < 0.02
    assert m.weight_bytes_read(tokens) <= m.weight_bytes_read(tokens + 1) <= m.weight_bytes


def test_moe_flops_count_active_experts_only():
    cost = costmodel.step_cost(MIXTRAL_8X7B, H100_SXM, prefill_tokens=100)
    assert cost.matmul_flops == 2.0 * MIXTRAL_8X7B.matmul_params * 100
    assert MIXTRAL_8X7B.matmul_params < MIXTRAL_8X7B.param_count / 3


def test_shard_divides_what_tp_splits_and_replicates_kv_heads_below_the_degree():
    s = LLAMA3_8B.shard(2)
    assert (s.num_heads, s.num_kv_heads, s.intermediate_size) == (16, 4, 7168)
    assert s.kv_bytes_per_token == LLAMA3_8B.kv_bytes_per_token / 2
    # 8 KV heads, TP16: one head per GPU, every head on two GPUs, so KV per GPU stops shrinking at TP8
    assert LLAMA3_8B.shard(16).kv_bytes_per_token == LLAMA3_8B.shard(8).kv_bytes_per_token
    # MLA's latent is not split by heads: each GPU holds all of it
    assert DEEPSEEK_V3.shard(8).kv_bytes_per_token == DEEPSEEK_V3.kv_bytes_per_token
    assert LLAMA3_8B.shard(1) is LLAMA3_8B
    with pytest.raises(ValueError, match="does not split 3 ways"):
        LLAMA3_8B.shard(3)
    with pytest.raises(ValueError, match="tp must be an integer"):
        LLAMA3_8B.shard(0)


def test_bad_shapes_say_what_is_wrong():
    with pytest.raises(ValueError, match="experts_per_token <= num_experts"):
        dataclasses.replace(MIXTRAL_8X7B, experts_per_token=9)
    with pytest.raises(ValueError, match="need num_experts > 0"):
        dataclasses.replace(LLAMA3_8B, experts_per_token=2)
    with pytest.raises(ValueError, match="MLA"):
        dataclasses.replace(LLAMA3_8B, v_head_dim=128)
    with pytest.raises(ValueError, match="integer >= 0"):
        ModelSpec("x", 2, 64, 4, 4, 16, 128, 100, num_experts=-1)


def test_tensor_parallel_point():
    one = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=64, context=2000))
    two = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=64, context=2000, tp=2))
    assert one.comm_s == 0 and two.comm_s > 0
    # each GPU reads half the weights and half the KV: the memory roof halves
    assert two.memory_s == pytest.approx(one.memory_s / 2, rel=0.01)
    # two all-reduces a layer, each of 64 tokens x 4096 x 2 bytes
    assert two.comm_s == pytest.approx(2 * 32 * all_reduce_s(64 * 4096 * 2, 2))
    assert two.step_s == pytest.approx(max(two.compute_s, two.memory_s) + two.comm_s + 0.5e-3)
    # half the weights per GPU leaves more than twice the room for KV
    assert two.kv_capacity > 2 * one.kv_capacity


def test_all_reduce_ring_formula_edges():
    assert all_reduce_s(1e6, 1) == 0.0
    assert all_reduce_s(0, 4, NVLINK_H100, latency_s=0) == 0
    assert all_reduce_s(8e6, 8, latency_s=0) == pytest.approx(2 * 7 / 8 * 8e6 / NVLINK_H100.bandwidth)
    with pytest.raises(ValueError, match="gpus"):
        all_reduce_s(1, 0)


def test_pipeline_point_holds_a_share_of_layers():
    one = check(ServingPoint.decode(LLAMA2_7B, H100_SXM, batch=16, context=2000))
    two = check(ServingPoint.decode(LLAMA2_7B, H100_SXM, batch=16, context=2000, pp=2))
    assert two.kv_capacity > 2 * one.kv_capacity
    assert two.stage_s == pytest.approx(two.step_s / 2)
    assert two.step_s > one.step_s       # a pipeline does not shorten a batch's pass, it adds the hand-offs
    with pytest.raises(ValueError, match="do not split"):
        ServingPoint.decode(LLAMA2_7B, H100_SXM, batch=1, context=10, pp=3)


def test_kv_limit_names_the_whole_group():
    with pytest.raises(Infeasible, match=r"2 H100 SXM GPUs \(TP2 x PP1\) hold"):
        check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=1000, context=2000, tp=2))


def test_int4_weights():
    bf16 = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=1, context=100))
    int4 = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=1, context=100, weight_dtype="int4"))
    assert int4.memory_s < bf16.memory_s / 3                  # a quarter of the weight bytes, plus the KV
    assert int4.compute_s == bf16.compute_s                   # W4A16 computes in 16 bits
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        ServingPoint.decode(LLAMA3_8B, H100_SXM, batch=1, context=100, kv_dtype="int4")
    assert serving.WEIGHT_DTYPE_BYTES["int4"] == 0.5


def test_moe_and_mla_points_run():
    ok = check(ServingPoint.decode(DEEPSEEK_V3, H100_SXM, batch=32, context=4000, tp=16, weight_dtype="fp8"))
    assert ok.kv_capacity > 32 * 4001 and ok.bound == "memory"
    with pytest.raises(Infeasible, match="no room for KV") as e:
        check(ServingPoint.decode(DEEPSEEK_V3, H100_SXM, batch=1, context=100, tp=8))   # 1.34 TB on 8 x 85 GB
    assert e.value.limits == ("weights",)
