"""The roofline step model: published model sizes, hand-derived step times on a toy model, the SLO arithmetic
(largest chunk, largest batch, admission limit), the traffic of decode attention over a shared prefix, input
checks."""

import dataclasses

import pytest

from servelab.analytic.costmodel import (
    DEFAULT_STEP_OVERHEAD_S,
    H100_SXM,
    H200,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA31_8B,
    GPUSpec,
    ModelSpec,
    activation_bytes,
    cost_from_totals,
    kv_capacity_tokens,
    max_backlog_tokens,
    max_decode_batch,
    max_prefill_chunk,
    shared_prefix_decode_traffic,
    step_cost,
    step_time,
)


def test_llama2_7b_kv_is_512_kib_per_token():
    # 2 (K and V) x 32 layers x 4096 (32 heads x 128) x 2 bytes (fp16)
    assert LLAMA2_7B.kv_bytes_per_token == 2 * 32 * 4096 * 2 == 512 * 1024


def test_llama3_8b_gqa_kv_is_128_kib_per_token():
    # 8 KV heads instead of 32: a quarter of the 7B's KV
    assert LLAMA3_8B.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * 1024


def test_parameter_counts_match_the_published_sizes():
    # the exact counts of the released checkpoints ("6.74B" and "8.03B")
    assert LLAMA2_7B.param_count == 6_738_415_616
    assert LLAMA3_8B.param_count == 8_030_261_248
    assert LLAMA2_7B.weight_bytes == 2 * 6_738_415_616


def test_gpu_figures():
    # rates from the datasheets; memory as the boards report it (nvidia-smi's MiB), not the datasheets' 80 / 141 GB
    assert H100_SXM.peak_flops == 989e12 and H100_SXM.hbm_bandwidth == 3.35e12
    assert H100_SXM.memory_bytes == 81_559 * 2**20
    assert H200.peak_flops == 989e12 and H200.hbm_bandwidth == 4.8e12 and H200.memory_bytes == 143_771 * 2**20
    assert H100_SXM.ridge_flops_per_byte == pytest.approx(295.2, abs=0.1)


# A toy model small enough to price by hand:
#   per layer: q and o are 8x8 (64 each), k and v are 8x4 (32 each) -> 192; MLP 3 x 8 x 16 = 384; total 576
#   matmul params: 2 layers x 576 = 1152
#   all params: 1152 + norms (2 x 2 + 1) x 8 = 40 + embedding and LM head 2 x 10 x 8 = 160 -> 1352
#   weight bytes: 2704; KV per token: 2 x 2 layers x 1 KV head x 4 x 2 bytes = 32
TOY = ModelSpec("toy", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                intermediate_size=16, vocab_size=10)
TOY_GPU = GPUSpec("toy", peak_flops=1e6, hbm_bandwidth=1e4, memory_bytes=1e5)


def test_toy_model_sizes():
    assert TOY.matmul_params == 1152
    assert TOY.param_count == 1352
    assert TOY.weight_bytes == 2704
    assert TOY.kv_bytes_per_token == 32


def test_toy_decode_step_is_memory_bound():
    # one decode over 10 cached tokens: 1 token, 1 sequence, 11 (query, key) pairs, 10 tokens of KV read
    flops = 2 * 1152 * 1 + 2 * 10 * 8 * 1 + 4 * 2 * 2 * 4 * 11     # matmuls + LM head + attention = 3168
    nbytes = 2704 + 10 * 32 + 1 * 32                                # weights + KV read + KV written = 3056
    cost = step_cost(TOY, TOY_GPU, decode_context_lens=[10])
    assert cost.flops == flops == 3168
    assert cost.bytes == nbytes == 3056
    assert cost.bound == "memory"
    # 3056 B / 1e4 B/s = 0.3056 s beats 3168 / 1e6 = 0.003168 s
    assert step_time(TOY, TOY_GPU, decode_context_lens=[10], overhead_s=0.01) == pytest.approx(0.3056 + 0.01)


def test_toy_prefill_chunk_on_a_prefix_is_compute_bound():
    # 100 new tokens on a cached prefix of 20: pairs = 100 x 20 + 100 x 101 / 2 = 7050
    flops = 2 * 1152 * 100 + 2 * 10 * 8 * 1 + 4 * 2 * 2 * 4 * 7050  # 230400 + 160 + 451200 = 681760
    nbytes = 2704 + 20 * 32 + 100 * 32                              # 6544
    cost = step_cost(TOY, TOY_GPU, prefill_tokens=100, prefill_context=20)
    assert (cost.flops, cost.bytes) == (flops, nbytes)
    assert cost.bound == "compute"
    # 0.68176 s of compute against 0.6544 s of memory traffic
    assert step_time(TOY, TOY_GPU, prefill_tokens=100, prefill_context=20, overhead_s=0) == pytest.approx(0.68176)


def test_toy_mixed_step_adds_up():
    # two decodes (contexts 5 and 7) and chunks of 3 (prefix 0) and 4 (prefix 2) in one step
    tokens, seqs = 2 + 7, 4
    pairs = (5 + 1) + (7 + 1) + (3 * 0 + 3 * 4 // 2) + (4 * 2 + 4 * 5 // 2)  # 6 + 8 + 6 + 18 = 38
    kv_read = 5 + 7 + 0 + 2
    cost = step_cost(TOY, TOY_GPU, prefill_tokens=[3, 4], prefill_context=[0, 2], decode_context_lens=[5, 7])
    assert cost.flops == 2 * 1152 * tokens + 2 * 10 * 8 * seqs + 64 * pairs
    assert cost.bytes == 2704 + 32 * (kv_read + tokens)
    assert cost == cost_from_totals(TOY, TOY_GPU, tokens, seqs, pairs, kv_read)


def test_weights_are_read_once_whatever_the_batch():
    one = step_cost(LLAMA2_7B, H100_SXM, decode_context_lens=[0])
    many = step_cost(LLAMA2_7B, H100_SXM, decode_context_lens=[0] * 64)
    assert many.weight_bytes == one.weight_bytes == LLAMA2_7B.weight_bytes
    assert many.kv_write_bytes == 64 * one.kv_write_bytes
    # batch-1 decode: 13.48 GB / 3.35 TB/s, about 4 ms
    assert step_time(LLAMA2_7B, H100_SXM, decode_context_lens=[0], overhead_s=0) == pytest.approx(4.0e-3, rel=0.01)


def test_default_overhead_is_added():
    cost = step_cost(TOY, TOY_GPU, decode_context_lens=[10])
    assert step_time(TOY, TOY_GPU, decode_context_lens=[10]) == cost.memory_s + DEFAULT_STEP_OVERHEAD_S


def test_kv_capacity_from_memory():
    # activations at the 8,192-token budget: 8192 x (2 x 11008 + 4 x 4096) x 2 B, and 1,024 fp32 rows of 32,000 logits
    act = 8192 * (2 * 11008 + 4 * 4096) * 2 + 1024 * 32000 * 4
    assert activation_bytes(LLAMA2_7B) == act
    # (0.92 x 85,520,809,984 - 13,476,831,232 - act) / 524,288 = 122,913.9...
    assert kv_capacity_tokens(LLAMA2_7B, H100_SXM) == int((0.92 * 85_520_809_984 - 13_476_831_232 - act) // 524_288)
    assert kv_capacity_tokens(LLAMA2_7B, H100_SXM, memory_fraction=1.0) == int(
        (85_520_809_984 - 13_476_831_232 - act) // 524_288)
    # a smaller token budget reserves less for activations, so more KV fits
    smaller = kv_capacity_tokens(LLAMA2_7B, H100_SXM, max_num_batched_tokens=2048)
    assert smaller > kv_capacity_tokens(LLAMA2_7B, H100_SXM)
    with pytest.raises(ValueError, match="leaves no room for KV"):
        kv_capacity_tokens(LLAMA2_7B, dataclasses.replace(H100_SXM, memory_bytes=10e9))
    with pytest.raises(ValueError, match=r"memory_fraction must be in \(0, 1\]"):
        kv_capacity_tokens(LLAMA2_7B, H100_SXM, memory_fraction=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(prefill_tokens=-1), r"prefill_tokens must be >= 0 \(token counts\), got -1"),
    (dict(decode_context_lens=[3, -2]), r"decode_context_lens must be >= 0 \(token counts\), got -2"),
    (dict(prefill_tokens=[4], prefill_context=[-5]), r"prefill_context must be >= 0"),
    (dict(prefill_tokens=[4, 4], prefill_context=[1, 2, 3]), "prefill_context has 3 entries but prefill_tokens has 2"),
    (dict(prefill_tokens=2.5), "prefill_tokens must hold whole token counts"),
    (dict(), "a step must compute at least one token"),
])
def test_step_cost_rejects_bad_counts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        step_cost(TOY, TOY_GPU, **kwargs)


def test_step_time_rejects_negative_overhead():
    with pytest.raises(ValueError, match="overhead_s must be a number >= 0"):
        step_time(TOY, TOY_GPU, prefill_tokens=1, overhead_s=-1e-3)


def test_specs_reject_bad_shapes():
    with pytest.raises(ValueError, match=r"num_heads \(6\) must be a multiple of num_kv_heads \(4\)"):
        dataclasses.replace(TOY, num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match=r"ModelSpec\('toy'\).num_layers must be > 0, got 0"):
        dataclasses.replace(TOY, num_layers=0)
    with pytest.raises(ValueError, match=r"GPUSpec\('toy'\).hbm_bandwidth must be > 0, got -1"):
        dataclasses.replace(TOY_GPU, hbm_bandwidth=-1)


# --------------------------------------------------------------------------------------------------
# SLO arithmetic: the chunk a step-time target allows, the decode batch it allows, the admission limit


def test_llama31_8b_is_llama3_8b_with_a_longer_context():
    same = dataclasses.replace(LLAMA31_8B, name=LLAMA3_8B.name, max_position_embeddings=8192)
    assert same == LLAMA3_8B
    assert (LLAMA3_8B.max_position_embeddings, LLAMA31_8B.max_position_embeddings) == (8192, 131072)
    assert LLAMA31_8B.kv_bytes_per_token == 128 * 1024 and LLAMA31_8B.param_count == 8_030_261_248


@pytest.mark.parametrize("model, gpu, target, decodes, prefix", [
    (LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, 0),
    (LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, 30_000),
    (LLAMA2_7B, H100_SXM, 0.010, [2048] * 16, 0),
    (LLAMA31_8B, H200, 0.2, [4000] * 100, 100_000),
    (LLAMA3_8B, H100_SXM, 0.0054, [], 0),      # barely above a 1-token step: memory-bound chunks fit
])
def test_max_prefill_chunk_is_the_largest_chunk_that_fits(model, gpu, target, decodes, prefix):
    c = max_prefill_chunk(model, gpu, target, decodes, prefix)
    assert c >= 1
    assert step_time(model, gpu, c, decodes, prefix) <= target < step_time(model, gpu, c + 1, decodes, prefix)


def test_max_prefill_chunk_shrinks_with_decodes_and_prefix():
    alone = max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030)
    with_decodes = max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030, [1024] * 32)
    deep = max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.030, [1024] * 32, prefill_context=30_000)
    assert (alone, with_decodes, deep) == (2013, 1980, 957)
    # compute-bound: each decode costs about one token of the chunk, plus its KV reads
    assert 32 <= alone - with_decodes <= 40


def test_max_prefill_chunk_is_zero_when_nothing_fits():
    # a LLaMA-2-7B step is at least 4.5 ms (weights at 3.35 TB/s plus overhead)
    assert max_prefill_chunk(LLAMA2_7B, H100_SXM, 0.004) == 0
    # 32 decodes over 2048 tokens already take 14.8 ms
    assert max_prefill_chunk(LLAMA2_7B, H100_SXM, 0.012, [2048] * 32) == 0
    # the toy model by hand: 1 token = 2704 + 32 B written -> 0.2736 s; 2 tokens 0.2768 s
    assert max_prefill_chunk(TOY, TOY_GPU, 0.2750, overhead_s=0) == 1
    assert max_prefill_chunk(TOY, TOY_GPU, 0.2736, overhead_s=0) == 1
    assert max_prefill_chunk(TOY, TOY_GPU, 0.2735, overhead_s=0) == 0


def test_max_decode_batch():
    assert max_decode_batch(LLAMA2_7B, H100_SXM, 0.012, 2048) == 23
    assert step_time(LLAMA2_7B, H100_SXM, decode_context_lens=[2048] * 23) <= 0.012
    assert step_time(LLAMA2_7B, H100_SXM, decode_context_lens=[2048] * 24) > 0.012
    # GQA's quarter-size KV lets Llama-3-8B hold a much larger batch under the same target
    assert max_decode_batch(LLAMA3_8B, H100_SXM, 0.012, 2048) == 83
    # the H200's bandwidth moves the same bytes faster
    assert max_decode_batch(LLAMA2_7B, H200, 0.012, 2048) > 23
    assert max_decode_batch(LLAMA2_7B, H100_SXM, 0.004, 2048) == 0


def test_max_backlog_tokens():
    assert max_backlog_tokens(2048, 48, 0.030, 1.0) == 2000 * 32
    # 0.3 / 0.1 is 2.9999999999999996 in floating point: still 3 steps, 2 after the one in flight
    assert max_backlog_tokens(100, 0, 0.1, 0.3) == 200
    assert max_backlog_tokens(2048, 48, 0.030, 0.059) == 0          # one step fits: it is the one in flight
    assert max_backlog_tokens(2048, 48, 0.030, 0.010) == 0          # not even one
    assert max_backlog_tokens(2048, 2048, 0.030, 1.0) == 0          # the decodes take the whole budget


@pytest.mark.parametrize("call, message", [
    (lambda: max_backlog_tokens(0, 0, 0.03, 1.0), r"budget must be an integer >= 1 \(tokens per step\), got 0"),
    (lambda: max_backlog_tokens(2048, 3000, 0.03, 1.0), r"the decodes alone \(3000 tokens\) do not fit in the budget"),
    (lambda: max_backlog_tokens(2048, -1, 0.03, 1.0), "num_decodes must be an integer >= 0, got -1"),
    (lambda: max_backlog_tokens(2048, 0, 0.0, 1.0), "step_s must be a finite number of seconds > 0, got 0.0"),
    (lambda: max_backlog_tokens(2048, 0, 0.03, -1.0), "ttft_target_s must be a finite number of seconds > 0"),
    (lambda: max_prefill_chunk(LLAMA3_8B, H100_SXM, -0.01), "step_target_s must be a finite number of seconds > 0"),
    (lambda: max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.03, [-5]), r"decode_context_lens must be >= 0"),
    (lambda: max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.03, [], prefill_context=[1, 2]),
     "prefill_context must be one integer"),
    (lambda: max_prefill_chunk(LLAMA3_8B, H100_SXM, 0.03, overhead_s=-1), "overhead_s must be a number >= 0"),
    (lambda: max_decode_batch(LLAMA3_8B, H100_SXM, 0.03, context_len=-1), r"context_len must be >= 0"),
    (lambda: max_decode_batch(LLAMA3_8B, H100_SXM, float("inf"), 10), "step_target_s must be a finite number"),
])
def test_slo_arithmetic_rejects_bad_parameters(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_shared_prefix_read_once_saves_bytes_not_flops():
    # Llama-3-8B's attention (32 query / 8 KV heads of 128, bf16): 64 sequences on a 4096-token prefix, 256 own
    kv_token, q_and_out = 2 * 8 * 128 * 2, 2 * 64 * 32 * 128 * 2
    per_seq = shared_prefix_decode_traffic(4096, [256] * 64, 32, 8, 128, 2, prefix_once=False)
    once = shared_prefix_decode_traffic(4096, [256] * 64, 32, 8, 128, 2)
    flops = 4 * 32 * 128 * 64 * (4096 + 256)
    assert per_seq == (64 * (4096 + 256) * kv_token + q_and_out, flops)
    assert once == ((4096 + 64 * 256) * kv_token + q_and_out, flops)
    # read per sequence, the intensity is about GROUP (4) FLOPs per byte whatever the batch; read once, it grows
    # with the batch
    intensity = [(lambda b, f: f / b)(*shared_prefix_decode_traffic(4096, [256] * n, 32, 8, 128, 2, once))
                 for once in (False, True) for n in (1, 8, 64)]
    assert all(3.9 < x < 4.0 for x in intensity[:3])
    assert intensity[3] == intensity[0] and intensity[3] < intensity[4] < intensity[5]
    # no prefix, or one sequence: the two kernels read the same bytes
    assert shared_prefix_decode_traffic(0, [10, 6], 4, 2, 64, 2) == (10240, 16384) == \
        shared_prefix_decode_traffic(0, [10, 6], 4, 2, 64, 2, prefix_once=False)


@pytest.mark.parametrize("args, message", [
    ((-1, [2], 4, 2, 8, 2), r"prefix_len must be >= 0"),
    ((4, [], 4, 2, 8, 2), "suffix_lens must hold one entry per sequence"),
    ((4, [2], 4, 3, 8, 2), r"num_q_heads \(4\) must be a multiple of num_kv_heads \(3\)"),
    ((4, [2], 4, 0, 8, 2), "num_kv_heads must be an integer >= 1"),
    ((4, [2], 4, 2, 8, 0), "bytes_per_element must be a number > 0"),
])
def test_shared_prefix_decode_traffic_rejects_bad_parameters(args, message):
    with pytest.raises(ValueError, match=message):
        shared_prefix_decode_traffic(*args)


def test_step_cost_counts_pairs_exactly_past_int64():
    """A chunk of 5e9 tokens has c * (c + 1) / 2 = 1.25e19 causal pairs, past int64: the count is exact, so
    step_time agrees with max_prefill_chunk's own pricing out there (a search without a cap goes that far)."""
    c, p = 5_000_000_000, 3_000_000_000
    cost = step_cost(LLAMA2_7B, H100_SXM, prefill_tokens=[c], prefill_context=[p])
    pairs = c * p + c * (c + 1) // 2
    assert pairs > 2**63
    want = cost_from_totals(LLAMA2_7B, H100_SXM, num_tokens=c, num_seqs=1, attention_pairs=pairs, kv_read_tokens=p)
    assert cost.attention_flops == want.attention_flops > 0
    assert cost.seconds(0.0) == want.seconds(0.0)
    target = step_time(LLAMA2_7B, H100_SXM, prefill_tokens=c, overhead_s=0.0)
    assert max_prefill_chunk(LLAMA2_7B, H100_SXM, target, overhead_s=0.0) == c
