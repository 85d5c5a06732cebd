"""The serving model (servelab.analytic.serving): each limit it checks, at its edge, with the message that names it, and
the step it prices agreeing with the cost model's."""

from __future__ import annotations

import dataclasses

import pytest

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA3_8B, LLAMA31_8B
from servelab.analytic.serving import Infeasible, ServingPoint, check

CAP = costmodel.kv_capacity_tokens(LLAMA3_8B, H100_SXM)


def _limits(point):
    with pytest.raises(Infeasible) as info:
        check(point)
    return info.value.limits, str(info.value)


def test_the_board_memory_and_092_give_the_course_kv_capacity():
    assert H100_SXM.memory_bytes == 81_559 * 2 ** 20 and H200.memory_bytes == 143_771 * 2 ** 20
    free = 0.92 * H100_SXM.memory_bytes - LLAMA3_8B.weight_bytes - costmodel.activation_bytes(LLAMA3_8B)
    assert CAP == int(free // LLAMA3_8B.kv_bytes_per_token)
    assert check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 10)).kv_capacity == CAP


def test_kv_capacity_edge_and_message():
    # one decode at context L holds L + 1 tokens once its new token is written; contexts stay within 8,192
    full, rest = divmod(CAP, 8192)
    at_edge = ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(8191,) * full + (rest - 1,))
    assert check(at_edge).kv_tokens == CAP
    over = dataclasses.replace(at_edge, decode_contexts=(8191,) * full + (rest,))
    assert _limits(over) == (("kv",), f"the batch needs {CAP + 1:,} KV tokens; an H100 SXM holds {CAP:,} at 92% of "
                                      "its memory")
    # resident tokens (a sequence between chunks) count too
    assert _limits(dataclasses.replace(at_edge, resident_tokens=1))[0] == ("kv",)


def test_fp8_kv_doubles_the_tokens_that_fit_and_halves_their_reads():
    fp8 = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 100, 2000, kv_dtype="fp8"))
    bf16 = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 100, 2000))
    assert fp8.kv_capacity == costmodel.kv_capacity_tokens(dataclasses.replace(LLAMA3_8B, bytes_per_kv_element=1),
                                                           H100_SXM)
    assert fp8.kv_capacity > 2 * bf16.kv_capacity - 10 and fp8.memory_s < bf16.memory_s


def test_fp8_weights_halve_the_weight_bytes_and_double_the_compute_rate():
    prefill = dict(prefill_chunks=(8192,))
    bf16 = check(ServingPoint(LLAMA3_8B, H100_SXM, **prefill))
    fp8 = check(ServingPoint(LLAMA3_8B, H100_SXM, weight_dtype="fp8", **prefill))
    assert bf16.bound == fp8.bound == "compute" and fp8.compute_s == pytest.approx(bf16.compute_s / 2)
    with pytest.raises(ValueError, match="weight_dtype must be one of"):
        ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(8,), weight_dtype="int3")


def test_context_limit_edge_and_message():
    # Llama-3-8B takes 8,192 positions: a decode at 8,191 cached tokens fills the last one
    assert check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 8191)).max_context == 8192
    assert _limits(ServingPoint.decode(LLAMA3_8B, H100_SXM, 1, 8192)) == (
        ("context",), "a sequence needs a context of 8,193 tokens; Llama-3-8B takes at most 8,192")
    assert check(ServingPoint.decode(LLAMA31_8B, H100_SXM, 1, 57_000)).max_context == 57_001
    # a prefill chunk over a cached prefix reaches prefix + chunk
    assert _limits(ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(193,), prefill_prefix=8000))[0] == ("context",)


def test_max_num_seqs_and_token_budget_edges_and_messages():
    assert check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 64, 100, max_num_seqs=64)).num_seqs == 64
    assert _limits(ServingPoint.decode(LLAMA3_8B, H100_SXM, 65, 100, max_num_seqs=64)) == (
        ("max_num_seqs",), "the step runs 65 sequences; max_num_seqs is 64")
    at_budget = ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(100,) * 192, prefill_chunks=(8000,))
    assert check(at_budget).num_tokens == 8192
    over = dataclasses.replace(at_budget, prefill_chunks=(8001,))
    assert _limits(over) == (("token_budget",), "the step computes 8,193 tokens; the token budget "
                                                 "(max_num_batched_tokens) is 8,192")


def test_every_broken_limit_is_named_at_once():
    limits, text = _limits(ServingPoint.decode(LLAMA3_8B, H100_SXM, 2000, 8192, max_num_batched_tokens=1024))
    assert limits == ("kv", "context", "max_num_seqs", "token_budget")
    assert text.count("; and ") == 3


def test_the_step_is_the_cost_models_step():
    point = ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(100, 2000, 5000), prefill_chunks=(512, 64),
                         prefill_prefix=(0, 1000))
    cost = costmodel.step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=[512, 64], decode_context_lens=[100, 2000, 5000],
                               prefill_context=[0, 1000])
    got = check(point)
    assert (got.compute_s, got.memory_s) == pytest.approx((cost.compute_s, cost.memory_s))
    assert got.step_s == pytest.approx(cost.seconds()) and got.bound == cost.bound


def test_a_verification_needs_k_plus_one_lm_head_rows_and_tokens():
    plain = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 8, 1000))
    verify = check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 8, 1000, draft_tokens=4))
    assert verify.num_tokens == 40 and verify.kv_tokens == 8 * 1005
    chunked = costmodel.step_cost(LLAMA3_8B, H100_SXM, prefill_tokens=[5] * 8, prefill_context=1000)
    lm_head_row = 2.0 * LLAMA3_8B.vocab_size * LLAMA3_8B.hidden_size / H100_SXM.peak_flops
    # as 8 chunks of 5 tokens, plus the 4 more logit rows each verification needs
    assert verify.compute_s == pytest.approx(chunked.compute_s + 8 * 4 * lm_head_row)
    assert verify.compute_s > plain.compute_s


def test_bad_points_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="at least one token"):
        ServingPoint(LLAMA3_8B, H100_SXM)
    with pytest.raises(ValueError, match="one cached length per chunk"):
        ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(4, 4), prefill_prefix=(1,))
    with pytest.raises(ValueError, match=">= 0"):
        ServingPoint.decode(LLAMA3_8B, H100_SXM, 2, -1)
