"""servelab.simulator.mixed_fast and prefill_fast: simulate's fast forms for a plain MixedBudget and a plain
PrefillFirst give the step loop's result, bit for bit, and are taken only where they apply; costmodel.roofline_s is
cost_from_totals' slower roof exactly."""

import dataclasses
import random
import zlib

import numpy as np
import pytest

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, GPUSpec, ModelSpec
from servelab.simulator import (
    BacklogAdmission,
    Clients,
    MixedBudget,
    PrefillFirst,
    Requests,
    Speculation,
    Swap,
    Traced,
    lognormal_lengths,
    mixed_fast,
    poisson_arrivals,
    prefill_fast,
    simulate,
)

TOY = ModelSpec("toy", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                intermediate_size=16, vocab_size=10)
TOY_GPU = GPUSpec("toy", peak_flops=1e6, hbm_bandwidth=1e4, memory_bytes=1e5)


class LoopMixedBudget(MixedBudget):
    """The same policy, but a subclass: simulate runs it through the general step loop."""


class LoopPrefillFirst(PrefillFirst):
    """The same policy, but a subclass: simulate runs it through the general step loop."""


def _same(a, b) -> list[str]:
    """The SimResult fields that differ (arrays: dtype, shape and every value, NaNs in the same places)."""
    bad = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("requests", "policy"):
            continue
        if isinstance(x, np.ndarray):
            if not (x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")):
                bad.append(f.name)
        elif x != y:
            bad.append(f.name)
    return bad


def _random_case(rng: random.Random, policy_type=MixedBudget):
    n, seed = rng.randint(1, 120), rng.randrange(1000)
    prompt_median, output_median = rng.choice([3, 32, 512]), rng.choice([1, 2, 8, 64])
    requests = Requests(poisson_arrivals(n, rng.choice([1.0, 30.0, 300.0]), seed=seed),
                        lognormal_lengths(n, median=prompt_median, sigma=1.0, seed=seed + 1, high=4 * prompt_median),
                        lognormal_lengths(n, median=output_median, sigma=1.0, seed=seed + 2, high=4 * output_median))
    need = int(requests.max_kv_tokens.max())
    kwargs = {}
    kv = rng.choice([None, need, need + rng.randint(0, 40), 3 * need, 20 * need])   # tight ones preempt a lot
    if kv is not None:
        kwargs["kv_capacity_tokens"] = kv
    if rng.random() < 0.2:
        kwargs["overhead_s"] = rng.choice([0, 1e-3, 2])
    policy = policy_type(rng.choice([1, 4, 8, 16, 64, 512, 2048]), rng.choice([1, 2, 4, 16, 256]))
    return requests, policy, kwargs


@pytest.mark.parametrize("model,gpu", [(LLAMA3_8B, H100_SXM), (LLAMA2_7B, H200), (TOY, TOY_GPU)])
def test_the_fast_form_is_the_step_loop_bit_for_bit(model, gpu):
    # a seed fixed per model (str hashes differ from run to run): some of its draws must be tight enough to preempt
    rng, preemptions = random.Random(zlib.crc32(model.name.encode()) % 1000), 0
    for _ in range(25):
        requests, policy, kwargs = _random_case(rng)
        if model is TOY:
            kwargs.setdefault("kv_capacity_tokens", 20 * int(requests.max_kv_tokens.max()))
        assert mixed_fast.applies(policy, None, None, False, None, None)
        fast = simulate(requests, policy, model, gpu, **kwargs)
        loop = simulate(requests, LoopMixedBudget(policy.max_num_batched_tokens, policy.max_num_seqs), model, gpu,
                        **kwargs)
        assert _same(fast, loop) == [], (policy, kwargs)
        assert fast.summary() == loop.summary() or np.isnan(fast.summary()["tpot_p50_s"])
        preemptions += int(fast.preemptions.sum())
    if model is not TOY:
        assert preemptions > 0                  # the tight KV cases did exercise the preemption path


def test_the_fast_form_matches_traced_on_the_benchmark_workload():
    n = 1000
    requests = Requests(poisson_arrivals(n, 30.0, seed=0),
                        lognormal_lengths(n, median=512, sigma=1.0, seed=1, high=8192),
                        lognormal_lengths(n, median=128, sigma=1.0, seed=2, high=2048))
    for kwargs in ({}, {"kv_capacity_tokens": 30_000}):
        traced = Traced(MixedBudget())
        assert _same(simulate(requests, MixedBudget(), LLAMA3_8B, H100_SXM, **kwargs),
                     simulate(requests, traced, LLAMA3_8B, H100_SXM, **kwargs)) == []


def test_the_fast_form_is_taken_only_for_a_plain_mixed_budget(monkeypatch):
    plain = MixedBudget()
    assert mixed_fast.applies(plain, None, None, False, None, None)
    assert not mixed_fast.applies(LoopMixedBudget(), None, None, False, None, None)
    assert not mixed_fast.applies(Traced(plain), None, None, False, None, None)
    assert not mixed_fast.applies(MixedBudget(prefill_order="shortest_first"), None, None, False, None, None)
    assert not mixed_fast.applies(plain, BacklogAdmission(1000), None, False, None, None)
    assert not mixed_fast.applies(plain, None, Swap(), False, None, None)
    assert not mixed_fast.applies(plain, None, None, True, None, None)
    assert not mixed_fast.applies(plain, None, None, False, Speculation(4, 0.7), None)
    assert not mixed_fast.applies(plain, None, None, False, None, Clients(1.0))

    # a replaced MixedBudget.schedule (a learner's, a grader's block) is what runs, through the step loop
    calls = []
    reference = MixedBudget.schedule

    def schedule(self, state):
        calls.append(1)
        return reference(self, state)

    monkeypatch.setattr(MixedBudget, "schedule", schedule)
    assert not mixed_fast.applies(plain, None, None, False, None, None)
    result = simulate(Requests([0.0, 0.0], [5, 7], [3, 2]), plain, LLAMA3_8B, H100_SXM)
    assert len(calls) == result.step_end_s.size > 0


def test_roofline_s_is_the_slower_roof_of_cost_from_totals():
    rng = random.Random(7)
    for model in (LLAMA2_7B, LLAMA3_8B, TOY):
        for gpu in (H100_SXM, H200, TOY_GPU):
            for _ in range(2000):
                totals = [rng.randrange(0, 10 ** rng.randint(1, 9)) for _ in range(4)]
                cost = costmodel.cost_from_totals(model, gpu, *totals)
                assert costmodel.roofline_s(model, gpu, *totals) == max(cost.compute_s, cost.memory_s)


def _loop_prefill_first(policy: PrefillFirst) -> LoopPrefillFirst:
    return LoopPrefillFirst(policy.max_num_batched_tokens, policy.max_num_seqs)


@pytest.mark.parametrize("model,gpu", [(LLAMA3_8B, H100_SXM), (LLAMA2_7B, H200), (TOY, TOY_GPU)])
def test_the_prefill_first_fast_form_is_the_step_loop_bit_for_bit(model, gpu):
    # chunked first prefills (small budgets), max_num_seqs below the running count (1, 2, 4), tight KV that preempts
    # in and past the decode window, arrivals spread over time; a seed fixed per model
    rng, preemptions = random.Random(zlib.crc32(model.name.encode()) % 1000 + 1), 0
    for _ in range(30):
        requests, policy, kwargs = _random_case(rng, PrefillFirst)
        if model is TOY:
            kwargs.setdefault("kv_capacity_tokens", 20 * int(requests.max_kv_tokens.max()))
        assert prefill_fast.applies(policy, None, None, False, None, None)
        fast = simulate(requests, policy, model, gpu, **kwargs)
        loop = simulate(requests, _loop_prefill_first(policy), model, gpu, **kwargs)
        assert _same(fast, loop) == [], (policy, kwargs)
        assert fast.summary() == loop.summary() or np.isnan(fast.summary()["tpot_p50_s"])
        preemptions += int(fast.preemptions.sum())
    if model is not TOY:
        assert preemptions > 0                  # the tight KV cases did exercise the preemption path


def test_the_prefill_first_fast_form_on_many_tiny_workloads():
    # a few tokens each, KV from exactly the largest request up, budgets and caps from 1: every corner often
    rng, preemptions, cut = random.Random(5), 0, 0
    for _ in range(400):
        n = rng.randint(1, 12)
        arrival = sorted(rng.choice([0.0, 0.0, rng.random() * 0.05, rng.random() * 3]) for _ in range(n))
        requests = Requests(arrival, [rng.randint(1, 6) for _ in range(n)], [rng.randint(1, 6) for _ in range(n)])
        kwargs = {"kv_capacity_tokens": int(requests.max_kv_tokens.max()) + rng.choice([0, 0, 1, 2, 5, 50])}
        if rng.random() < 0.3:
            kwargs["overhead_s"] = rng.choice([0, 2.0])
        policy = PrefillFirst(rng.randint(1, 8), rng.randint(1, 4))
        fast = simulate(requests, policy, LLAMA3_8B, H100_SXM, **kwargs)
        loop = simulate(requests, _loop_prefill_first(policy), LLAMA3_8B, H100_SXM, **kwargs)
        assert _same(fast, loop) == [], (policy, kwargs, requests.prompt_len, requests.output_len)
        preemptions += int(fast.preemptions.sum())
        cut += int((fast.step_tokens == policy.max_num_batched_tokens).sum())
    assert preemptions > 100 and cut > 100


@pytest.mark.parametrize("case", ["one request", "one token each", "KV fits exactly one", "budget 1", "one seq a step",
                                  "window full, tail preempted", "idle gaps"])
def test_the_prefill_first_fast_form_at_the_edges(case):
    same_time = [0.0] * 6
    requests, policy, kwargs = {
        "one request": (Requests([0.5], [7], [5]), PrefillFirst(), {}),
        "one token each": (Requests(same_time, [3, 1, 4, 1, 5, 9], [1] * 6), PrefillFirst(4, 2), {}),
        "KV fits exactly one": (Requests(same_time, [5, 3, 6, 2, 4, 5], [4, 6, 3, 5, 2, 4]), PrefillFirst(8, 4),
                                {"kv_capacity_tokens": 10}),
        "budget 1": (Requests(same_time, [4, 2, 3, 1, 5, 2], [3, 1, 4, 2, 2, 5]), PrefillFirst(1, 3),
                     {"kv_capacity_tokens": 12}),
        "one seq a step": (Requests(same_time, [4, 2, 3, 1, 5, 2], [3, 1, 4, 2, 2, 5]), PrefillFirst(16, 1), {}),
        "window full, tail preempted": (Requests([0.0] * 12, [2] * 12, [9, 3] * 6), PrefillFirst(64, 3),
                                        {"kv_capacity_tokens": 24}),   # the first decode step preempts past it
        "idle gaps": (Requests([0.0, 5.0, 5.0, 20.0], [9, 2, 30, 4], [3, 8, 1, 2]), PrefillFirst(8, 2),
                      {"overhead_s": 0}),
    }[case]
    fast = simulate(requests, policy, LLAMA3_8B, H100_SXM, **kwargs)
    assert _same(fast, simulate(requests, _loop_prefill_first(policy), LLAMA3_8B, H100_SXM, **kwargs)) == []
    assert (fast.generated == requests.output_len).all()
    if case in ("KV fits exactly one", "window full, tail preempted"):
        assert fast.preemptions.sum() > 0


def test_the_prefill_first_fast_form_matches_traced_on_the_benchmark_workload():
    n = 1000
    requests = Requests(poisson_arrivals(n, 30.0, seed=0),
                        lognormal_lengths(n, median=512, sigma=1.0, seed=1, high=8192),
                        lognormal_lengths(n, median=128, sigma=1.0, seed=2, high=2048))
    for policy, kwargs in ((PrefillFirst(), {}), (PrefillFirst(), {"kv_capacity_tokens": 30_000}),
                           (PrefillFirst(4096, 8), {"kv_capacity_tokens": 30_000})):
        fast = simulate(requests, policy, LLAMA3_8B, H100_SXM, **kwargs)
        assert _same(fast, simulate(requests, Traced(policy), LLAMA3_8B, H100_SXM, **kwargs)) == []


def test_the_prefill_first_fast_form_is_taken_only_for_a_plain_prefill_first(monkeypatch):
    plain = PrefillFirst()
    assert prefill_fast.applies(plain, None, None, False, None, None)
    assert prefill_fast.applies(PrefillFirst(512, 8), None, None, False, None, None)
    assert not prefill_fast.applies(LoopPrefillFirst(), None, None, False, None, None)
    assert not prefill_fast.applies(Traced(plain), None, None, False, None, None)
    assert not prefill_fast.applies(MixedBudget(), None, None, False, None, None)
    assert not mixed_fast.applies(plain, None, None, False, None, None)
    assert not prefill_fast.applies(plain, BacklogAdmission(1000), None, False, None, None)
    assert not prefill_fast.applies(plain, None, Swap(), False, None, None)
    assert not prefill_fast.applies(plain, None, None, True, None, None)
    assert not prefill_fast.applies(plain, None, None, False, Speculation(4, 0.7), None)
    assert not prefill_fast.applies(plain, None, None, False, None, Clients(1.0))

    # a replaced PrefillFirst.schedule (a learner's, a grader's block) is what runs, through the step loop
    calls = []
    reference = PrefillFirst.schedule

    def schedule(self, state):
        calls.append(1)
        return reference(self, state)

    monkeypatch.setattr(PrefillFirst, "schedule", schedule)
    assert not prefill_fast.applies(plain, None, None, False, None, None)
    result = simulate(Requests([0.0, 0.0], [5, 7], [3, 2]), plain, LLAMA3_8B, H100_SXM)
    assert len(calls) == result.step_end_s.size > 0
