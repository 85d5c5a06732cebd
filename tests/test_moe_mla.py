"""servelab.analytic.moe_mla and servelab.simulator.moe: int4 bytes with their group scales and 16-bit rest, the
experts a batch touches, a MoE step's weight bytes (the serving model's, written out), the MoE ridge, KV per GPU under
tensor parallelism, and sampled routing within 5% of the closed forms."""

import dataclasses
import math

import pytest

from servelab.analytic import capacity, costmodel, moe_mla, serving
from servelab.analytic.specs import DEEPSEEK_V3, H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, MIXTRAL_8X7B
from servelab.simulator.moe import sample_routing, simulate_moe_decode


def test_int4_bytes_are_half_a_byte_plus_the_group_scales_and_a_16_bit_rest():
    keep = moe_mla.sixteen_bit_params(LLAMA3_8B)
    assert keep == 2 * 128256 * 4096 + 65 * 4096                       # embedding, LM head, norms
    assert moe_mla.int4_weight_bytes(LLAMA3_8B, 128) == pytest.approx(
        (LLAMA3_8B.param_count - keep) * (0.5 + 2.5 / 128) + 2 * keep)
    # groups as wide as the whole model leave (almost) the plain half byte on the matmul weights
    assert moe_mla.int4_weight_bytes(LLAMA3_8B, 1 << 40) == pytest.approx((LLAMA3_8B.param_count - keep) * 0.5
                                                                         + 2 * keep)
    # a MoE's routers stay 16-bit, and MLA's latent and query norms
    assert moe_mla.sixteen_bit_params(MIXTRAL_8X7B) == 2 * 32000 * 4096 + 65 * 4096 + 32 * 4096 * 8
    assert moe_mla.sixteen_bit_params(DEEPSEEK_V3) == (2 * 129280 * 7168 + 123 * 7168 + 61 * (512 + 1536)
                                                       + 58 * 7168 * 256)
    tied = dataclasses.replace(LLAMA3_8B, tie_word_embeddings=True)
    assert moe_mla.sixteen_bit_params(tied) == keep - 128256 * 4096
    with pytest.raises(ValueError, match="group_size"):
        moe_mla.int4_weight_bytes(LLAMA3_8B, 0)


def test_experts_touched_counts_collisions_and_distinct_picks():
    assert moe_mla.experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert moe_mla.experts_touched(256, 8, 0) == 0
    assert moe_mla.experts_touched(8, 8, 3) == 8                       # every token takes every expert
    assert moe_mla.experts_touched(256, 8, 64) < min(256, 64 * 8)
    assert moe_mla.experts_touched(256, 8, 10_000) == pytest.approx(256)
    with pytest.raises(ValueError, match="cannot exceed"):
        moe_mla.experts_touched(8, 9, 1)


@pytest.mark.parametrize("model", [MIXTRAL_8X7B, DEEPSEEK_V3, DEEPSEEK_V3.shard(8), LLAMA3_8B])
def test_a_steps_weight_bytes_are_the_serving_models(model):
    for n in (1, 3, 64, 4096):
        assert moe_mla.step_weight_bytes(model, n) == pytest.approx(model.weight_bytes_read(n), rel=1e-12)
    assert moe_mla.step_weight_bytes(model, 1 << 20) == pytest.approx(model.weight_bytes)


def test_a_moe_ridge_is_found_by_search_where_the_closed_form_sees_none():
    m, g = MIXTRAL_8X7B, H100_SXM
    b = moe_mla.moe_ridge_batch(m, g, 256)
    assert costmodel.step_cost(m, g, decode_context_lens=[256] * b).bound == "compute"
    assert costmodel.step_cost(m, g, decode_context_lens=[256] * (b - 1)).bound == "memory"
    assert capacity.compute_ridge_batch(m, g, 256) == math.inf          # bytes taken as linear in the batch
    # a dense model: the search agrees with chapter 9's closed form
    assert moe_mla.moe_ridge_batch(LLAMA3_8B, g, 256) == capacity.compute_ridge_batch(LLAMA3_8B, g, 256) == 912
    assert moe_mla.moe_ridge_batch(LLAMA3_8B, g, 2048) == math.inf


def test_kv_per_gpu_keeps_the_latent_whole_and_copies_heads_below_one():
    assert moe_mla.kv_bytes_per_gpu(DEEPSEEK_V3, 1) == moe_mla.kv_bytes_per_gpu(DEEPSEEK_V3, 8) == 61 * 576 * 2
    assert moe_mla.kv_bytes_per_gpu(LLAMA3_8B, 16) == 2 * 32 * 1 * 128 * 2
    assert moe_mla.kv_bytes_per_gpu(LLAMA2_7B, 4) == LLAMA2_7B.kv_bytes_per_token / 4
    for m in (DEEPSEEK_V3, LLAMA3_8B, moe_mla.attention_variant(DEEPSEEK_V3, 8)):
        for tp in (1, 2, 8, 16):
            assert moe_mla.kv_bytes_per_gpu(m, tp) == m.shard(tp).kv_bytes_per_token
    gqa, mha = moe_mla.attention_variant(DEEPSEEK_V3, 8), moe_mla.attention_variant(DEEPSEEK_V3, 128)
    assert not gqa.is_mla and gqa.num_experts == 256 and mha.kv_bytes_per_token == 2 * 61 * 128 * 128 * 2
    assert abs(gqa.param_count / DEEPSEEK_V3.param_count - 1) < 0.03      # "the same model size"


def test_sampled_routing_is_within_5_percent_of_the_closed_forms():
    for e, k, n in ((256, 8, 16), (256, 8, 64), (8, 2, 3)):
        r = sample_routing(e, k, n, layers=200, seed=n)
        assert r.touched.mean() == pytest.approx(moe_mla.experts_touched(e, k, n), rel=0.05)
        assert (r.imbalance >= 1).all()
    skewed = sample_routing(256, 8, 64, layers=50, seed=1, skew=1.0)
    even = sample_routing(256, 8, 64, layers=50, seed=1)
    assert skewed.touched.mean() < even.touched.mean() and skewed.imbalance.mean() > even.imbalance.mean()
    point = serving.ServingPoint.decode(DEEPSEEK_V3, H200, 1, 2048, weight_dtype="fp8", tp=8)
    sim = simulate_moe_decode(point.priced_model, point.priced_gpu, 32, 2048, steps=4, seed=2)
    assert sim.step_s.mean() == pytest.approx(sim.expected_step_s, rel=0.05)
    assert sim.weight_bytes.mean() == pytest.approx(point.priced_model.weight_bytes_read(32), rel=0.05)
    dense = simulate_moe_decode(LLAMA3_8B, H100_SXM, 8, 1024, steps=2, seed=1)
    assert (dense.step_s == dense.expected_step_s).all()
