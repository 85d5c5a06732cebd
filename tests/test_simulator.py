"""The serving simulator: conservation, the policies' defining behaviours, admission control, metrics,
determinism, errors."""

import random

import numpy as np
import pytest

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B, GPUSpec, ModelSpec, step_time
from servelab.engine.driver import fake_model
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence
from servelab.simulator import (
    BacklogAdmission,
    MixedBudget,
    PrefillFirst,
    Requests,
    ServingState,
    Traced,
    burst_arrivals,
    fixed_lengths,
    lognormal_lengths,
    merge_requests,
    percentiles,
    poisson_arrivals,
    prefill_backlog,
    simulate,
    trace_arrivals,
    uniform_lengths,
)

TOY = ModelSpec("toy", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                intermediate_size=16, vocab_size=10)
TOY_GPU = GPUSpec("toy", peak_flops=1e6, hbm_bandwidth=1e4, memory_bytes=1e5)
POLICIES = [PrefillFirst(max_num_batched_tokens=96, max_num_seqs=8), MixedBudget(max_num_batched_tokens=96,
                                                                                  max_num_seqs=8),
            MixedBudget(max_num_batched_tokens=96, max_num_seqs=8, prefill_order="shortest_first",
                        name="mixed-shortest-first")]


def _workload(n=300, seed=0, rate=40.0):
    return Requests(poisson_arrivals(n, rate, seed=seed), uniform_lengths(n, 1, 120, seed=seed + 1),
                    uniform_lengths(n, 1, 40, seed=seed + 2))


def _request_token_steps(res, i):
    start = res.token_offset[i]
    return res.token_step[start:start + res.requests.output_len[i]]


class Recorder:
    """A policy that delegates to another and keeps each step's (request id, tokens) pairs."""

    def __init__(self, policy):
        self.policy, self.name, self.steps = policy, policy.name, []

    def schedule(self, state):
        ids, tokens = self.policy.schedule(state)
        self.steps.append(list(zip(ids.tolist(), tokens.tolist())))
        return ids, tokens


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize("capacity", [160, 100_000])   # 160 tokens of KV forces preemption
def test_conservation(policy, capacity):
    reqs = _workload()
    res = simulate(reqs, policy, LLAMA3_8B, H100_SXM, kv_capacity_tokens=capacity)
    # every request finishes with exactly its output length, each token at a later step than the last
    assert np.array_equal(res.generated, reqs.output_len)
    assert (res.token_step >= 0).all()                 # every token slot was filled
    for i in range(len(reqs)):
        assert (np.diff(_request_token_steps(res, i)) > 0).all()
    # the KV cache never holds more than its capacity
    assert res.step_kv_used.max() <= capacity
    # without preemption every token is computed exactly once: the prompt, then every output token but
    # the last (sampled, never fed back); recompute adds work on top
    once = int((reqs.prompt_len + reqs.output_len - 1).sum())
    if capacity == 160:
        assert res.preemptions.sum() > 0 and res.step_tokens.sum() > once
    else:
        assert res.preemptions.sum() == 0 and res.step_tokens.sum() == once
    # time only moves forward, and no request is served before it arrives
    assert (res.step_end_s > res.step_start_s).all() and (res.step_start_s[1:] >= res.step_end_s[:-1]).all()
    assert (res.queueing_delay >= 0).all() and (res.ttft > res.queueing_delay).all()
    assert (res.finish_s >= res.first_token_s).all()
    # the vectorised gap views agree with the per-request one (outputs of 1 token are mixed in)
    per_request = [res.gaps(i) for i in range(len(reqs))]
    assert np.array_equal(res.inter_token_gaps(), np.concatenate(per_request))
    assert np.array_equal(res.max_gap, [g.max() if g.size else np.nan for g in per_request], equal_nan=True)


def test_mixed_budget_keeps_the_budget_and_decodes_every_running_sequence():
    budget = 64
    reqs = _workload(n=200, seed=3, rate=80.0)
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=budget, max_num_seqs=16), LLAMA3_8B, H100_SXM,
                   kv_capacity_tokens=300)
    assert res.step_tokens.max() <= budget
    assert (res.step_tokens == budget).any()          # the budget is actually the binding limit
    # a running sequence decodes in every step: a request that was never preempted emits its tokens in
    # consecutive steps. (A preempted one leaves `running`, so it may skip steps.)
    never = np.flatnonzero(res.preemptions == 0)
    assert res.preemptions.sum() > 0 and never.size > 100
    for i in never:
        assert (np.diff(_request_token_steps(res, i)) == 1).all()


class DecodeChecker(Recorder):
    """Before each step, note the running sequences that are between decodes; after it, each of them is
    either in the step with exactly one token or was preempted by it."""

    def schedule(self, state):
        running = state.running
        between_decodes = set(running[state.reserved[running] < state.seq_len[running]].tolist())
        ids, tokens = super().schedule(state)
        scheduled = dict(zip(ids.tolist(), tokens.tolist()))
        for i in between_decodes:
            assert scheduled.get(i) == 1 or state.reserved[i] == 0, f"request {i} skipped a decode"
        return ids, tokens


def test_mixed_budget_schedules_every_decode_state_by_state():
    checker = DecodeChecker(MixedBudget(max_num_batched_tokens=48, max_num_seqs=12))
    res = simulate(_workload(n=150, seed=5, rate=100.0), checker, LLAMA3_8B, H100_SXM, kv_capacity_tokens=250)
    assert res.preemptions.sum() > 0
    assert max(sum(n for _, n in step) for step in checker.steps) == 48


def test_prefill_first_matches_the_reference_scheduler():
    """At block size 1 without prefix caching, servelab.schedulers.scheduler is token-granular, like the simulator's
    KV; PrefillFirst must then schedule exactly what it schedules, step by step, preemptions included."""
    rng = random.Random(0)
    preempting_cases = 0
    for _ in range(150):
        n = rng.randint(1, 6)
        prompts = [rng.randint(1, 12) for _ in range(n)]
        outs = [rng.randint(1, 8) for _ in range(n)]
        cap = max(p + o - 1 for p, o in zip(prompts, outs)) + rng.randint(0, 15)
        budget, max_seqs = rng.randint(1, 20), rng.randint(1, 5)

        sch = Scheduler(num_blocks=cap, block_size=1, max_num_batched_tokens=budget, max_num_seqs=max_seqs,
                        enable_prefix_caching=False)
        for i, (p, o) in enumerate(zip(prompts, outs)):
            sch.add(Sequence(list(range(p)), SamplingParams(max_tokens=o, ignore_eos=True), name=i, block_size=1))
        expected = []
        while not sch.is_finished():
            seqs, is_prefill = sch.schedule()
            expected.append([(s.name, s.num_scheduled_tokens) for s in seqs])
            sch.postprocess(seqs, fake_model(seqs), is_prefill)

        recorder = Recorder(PrefillFirst(budget, max_seqs))
        res = simulate(Requests(np.zeros(n), prompts, outs), recorder, TOY, TOY_GPU, kv_capacity_tokens=cap)
        assert recorder.steps == expected
        preempting_cases += res.preemptions.sum() > 0
    assert preempting_cases > 10


def test_step_times_come_from_the_cost_model():
    # one request alone: a prefill step, then decodes over a context that grows by one each step
    res = simulate(Requests([0.0], [300], [4]), PrefillFirst(), LLAMA2_7B, H100_SXM, overhead_s=1e-3)
    durations = res.step_end_s - res.step_start_s
    expected = [step_time(LLAMA2_7B, H100_SXM, prefill_tokens=300, overhead_s=1e-3)]
    expected += [step_time(LLAMA2_7B, H100_SXM, decode_context_lens=[300 + k], overhead_s=1e-3) for k in range(3)]
    assert durations.tolist() == pytest.approx(expected, rel=1e-12)
    assert res.ttft[0] == pytest.approx(expected[0])
    assert res.tpot[0] == pytest.approx(sum(expected[1:]) / 3)
    assert res.gaps(0).tolist() == pytest.approx(expected[1:])


def _long_prompt_scenario():
    """Four chat requests decoding; at t = 0.2 s an 8000-token prompt arrives."""
    return Requests([0.0, 0.0, 0.0, 0.0, 0.2], [128, 128, 128, 128, 8000], [200, 200, 200, 200, 4])


def test_prefill_first_long_prompt_stalls_every_decode():
    reqs = _long_prompt_scenario()
    res = simulate(reqs, PrefillFirst(max_num_batched_tokens=8192), LLAMA2_7B, H100_SXM)
    durations = res.step_end_s - res.step_start_s
    t_prefill = step_time(LLAMA2_7B, H100_SXM, prefill_tokens=8000)   # ~0.12 s, the whole prompt in one step
    stall = int(np.flatnonzero(res.step_tokens == 8000)[0])
    assert durations[stall] == pytest.approx(t_prefill, rel=1e-12)
    for i in range(4):
        gaps = res.gaps(i)
        # the gap spanning the stall is the prefill step plus the decode step after it ...
        assert gaps.max() == pytest.approx(t_prefill + durations[stall + 1], rel=1e-9)
        # ... so the worst gap jumps above the usual one by the long prefill's step time (plus the ~1 ms
        # the long sequence's 8000 tokens of KV add to each later decode step)
        jump = gaps.max() - np.median(gaps)
        assert t_prefill < jump < t_prefill + 2e-3


def test_chunked_mixed_budget_bounds_the_stall():
    reqs = _long_prompt_scenario()
    budget = 512
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=budget), LLAMA2_7B, H100_SXM)
    t_prefill = step_time(LLAMA2_7B, H100_SXM, prefill_tokens=8000)
    # no step does more than this: a full budget of prefill over the longest prefix, plus every decode
    # over its longest context (the step time only grows with each of these)
    bound = step_time(LLAMA2_7B, H100_SXM, prefill_tokens=budget, prefill_context=8000,
                      decode_context_lens=[8004] + [328] * 4)
    assert (res.step_tokens <= budget).all()
    assert res.step_tokens[res.step_tokens > 100].size >= 8000 // budget   # the prompt went in chunks
    for i in range(4):
        assert res.gaps(i).max() <= bound < t_prefill / 3
    # the price: the long request's first token comes later than with one big prefill step
    big = simulate(reqs, PrefillFirst(max_num_batched_tokens=8192), LLAMA2_7B, H100_SXM)
    assert res.ttft[4] > big.ttft[4]


def test_chunking_alone_does_not_help_prefill_first():
    # nano-vllm chunks, but a part-prefilled prompt keeps every step a prefill step until it is done,
    # so the decodes still wait for all of its chunks
    reqs = _long_prompt_scenario()
    res = simulate(reqs, PrefillFirst(max_num_batched_tokens=512), LLAMA2_7B, H100_SXM)
    t_prefill = step_time(LLAMA2_7B, H100_SXM, prefill_tokens=8000)
    assert all(res.gaps(i).max() > t_prefill for i in range(4))


def test_metrics_on_a_hand_built_run():
    # two requests on the toy GPU, 10 s apart, so they never overlap; every toy step is memory-bound
    reqs = Requests([0.0, 10.0], [10, 1], [3, 1])
    res = simulate(reqs, MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=100, overhead_s=0)
    prefill = step_time(TOY, TOY_GPU, prefill_tokens=10, overhead_s=0)
    d1 = step_time(TOY, TOY_GPU, decode_context_lens=[10], overhead_s=0)
    d2 = step_time(TOY, TOY_GPU, decode_context_lens=[11], overhead_s=0)
    assert res.ttft.tolist() == pytest.approx([prefill, step_time(TOY, TOY_GPU, prefill_tokens=1, overhead_s=0)])
    assert res.tpot[0] == pytest.approx((d1 + d2) / 2) and np.isnan(res.tpot[1])
    assert res.queueing_delay.tolist() == [0.0, 0.0]
    assert res.max_gap[0] == pytest.approx(max(d1, d2)) and np.isnan(res.max_gap[1])
    assert res.inter_token_gaps().tolist() == pytest.approx([d1, d2])
    assert res.duration_s == pytest.approx(res.finish_s[1])
    assert res.throughput() == pytest.approx(4 / res.duration_s)
    # goodput counts the requests meeting both targets; the 1-token request has no TPOT to miss
    assert res.goodput(ttft_s=1.0, tpot_s=1.0) == pytest.approx(2 / res.duration_s)
    assert res.goodput(ttft_s=1.0, tpot_s=d1 / 2) == pytest.approx(1 / res.duration_s)
    # TTFTs: 10-token prompt (2704 + 10 x 32 B) / 1e4 B/s = 0.3024 s, 1-token prompt 0.2736 s
    assert res.ttft.tolist() == pytest.approx([0.3024, 0.2736])
    assert res.goodput(ttft_s=0.29, tpot_s=1.0) == pytest.approx(1 / res.duration_s)
    summary = res.summary(ttft_s=1.0, tpot_s=1.0)
    assert summary["requests"] == 2 and summary["slo_attainment"] == 1.0 and summary["preemptions"] == 0


def test_queueing_delay_counts_waiting_for_a_slot():
    # max_num_seqs=1: the second request waits for the first to finish
    res = simulate(Requests([0.0, 0.0], [10, 10], [2, 2]), MixedBudget(max_num_seqs=1), TOY, TOY_GPU,
                   kv_capacity_tokens=100)
    assert res.queueing_delay[0] == 0.0
    assert res.queueing_delay[1] == pytest.approx(res.finish_s[0])


def test_percentiles_ignore_nan():
    assert percentiles([1.0, np.nan, 3.0], qs=(50,)) == {50: 2.0}
    assert np.isnan(percentiles([np.nan])[99])


def test_deterministic_under_a_seed():
    def run(seed):
        n = 200
        reqs = Requests(poisson_arrivals(n, 30.0, seed=seed), lognormal_lengths(n, 64, 1.0, seed=seed + 1, high=400),
                        lognormal_lengths(n, 16, 1.0, seed=seed + 2, high=100))
        return simulate(reqs, MixedBudget(max_num_batched_tokens=256), LLAMA3_8B, H100_SXM, kv_capacity_tokens=2000)

    a, b, c = run(7), run(7), run(8)
    assert np.array_equal(a.token_step, b.token_step) and np.array_equal(a.step_end_s, b.step_end_s)
    assert np.array_equal(a.ttft, b.ttft)
    assert not np.array_equal(a.requests.arrival_s, c.requests.arrival_s)


def test_arrival_processes():
    times = poisson_arrivals(20_000, rate=50.0, seed=1)
    assert (np.diff(times) >= 0).all()
    assert np.diff(times).mean() == pytest.approx(1 / 50.0, rel=0.03)
    assert np.array_equal(times, poisson_arrivals(20_000, rate=50.0, seed=1))
    assert burst_arrivals(5, burst_size=2, interval_s=1.5, start_s=1.0).tolist() == [1.0, 1.0, 2.5, 2.5, 4.0]
    assert trace_arrivals([3, 1, 2]).tolist() == [1.0, 2.0, 3.0]
    lengths = lognormal_lengths(10_000, median=200, sigma=0.8, seed=0, low=4, high=2000)
    assert lengths.min() >= 4 and lengths.max() <= 2000
    assert np.median(lengths) == pytest.approx(200, rel=0.05)
    assert fixed_lengths(3, 7).tolist() == [7, 7, 7]
    u = uniform_lengths(1000, 5, 6, seed=0)
    assert set(u.tolist()) == {5, 6}


@pytest.mark.parametrize("make, message", [
    (lambda: poisson_arrivals(10, rate=-1.0), r"rate must be a finite number > 0 \(requests per second\), got -1.0"),
    (lambda: poisson_arrivals(10, rate=0), "rate must be a finite number > 0"),
    (lambda: poisson_arrivals(-1, rate=1.0), "n must be an integer >= 0, got -1"),
    (lambda: burst_arrivals(4, burst_size=0, interval_s=1.0), "burst_size must be an integer >= 1"),
    (lambda: trace_arrivals([0.0, -1.0]), "trace arrival times must be finite and >= 0"),
    (lambda: uniform_lengths(4, 10, 5), r"high \(5\) must be >= low \(10\)"),
    (lambda: fixed_lengths(4, 0), r"length must be an integer >= 1 \(tokens\), got 0"),
    (lambda: Requests([0.0, 1.0], [1, 2, 3], [1, 1]), "one entry per request, got 2, 3 and 2"),
    (lambda: Requests([1.0, 0.0], [1, 1], [1, 1]), r"arrival_s must be sorted \(non-decreasing\)"),
    (lambda: Requests([0.0], [0], [1]), r"prompt_len must hold integers >= 1"),
    (lambda: Requests([0.0], [1], [2.5]), r"output_len must hold integers >= 1"),
    (lambda: PrefillFirst(max_num_batched_tokens=0), r"PrefillFirst: max_num_batched_tokens \(the token budget\) "
                                                     r"must be an integer >= 1, got 0"),
    (lambda: MixedBudget(max_num_batched_tokens=0), r"MixedBudget: max_num_batched_tokens \(the token budget\)"),
    (lambda: MixedBudget(max_num_seqs=0), "MixedBudget: max_num_seqs must be an integer >= 1, got 0"),
    (lambda: MixedBudget(prefill_order="lifo"),
     r"MixedBudget: prefill_order must be one of \('fcfs', 'shortest_first'\)"),
    (lambda: BacklogAdmission(-1), "max_backlog_tokens must be an integer >= 0, got -1"),
    (lambda: merge_requests(), "merge_requests needs at least one Requests"),
])
def test_bad_parameters_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_request_longer_than_the_kv_cache_is_rejected():
    reqs = Requests([0.0, 0.0], [10, 90], [5, 20])
    with pytest.raises(ValueError, match=r"request 1 needs 109 tokens of KV \(prompt 90 \+ output 20 - 1\) but the "
                                         r"KV cache holds 100: it could never finish"):
        simulate(reqs, MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=100)
    # exactly at capacity is fine: the last token never needs a slot
    simulate(Requests([0.0], [90], [11]), MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=100)
    with pytest.raises(ValueError, match="no requests to simulate"):
        simulate(Requests([], [], []), MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=100)
    with pytest.raises(ValueError, match="kv_capacity_tokens must be an integer >= 1, got 0"):
        simulate(reqs, MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=0)
    with pytest.raises(ValueError, match="overhead_s must be a number >= 0"):
        simulate(reqs, MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=200, overhead_s=-1.0)


def test_kv_capacity_defaults_to_what_fits_next_to_the_weights():
    res = simulate(Requests([0.0], [10], [2]), MixedBudget(), LLAMA2_7B, H100_SXM)
    assert res.kv_capacity == costmodel.kv_capacity_tokens(LLAMA2_7B, H100_SXM, 0.92) == 122_913


# --------------------------------------------------------------------------------------------------
# chapter 03 additions: Traced, shortest-first prefill, admission control, merged workloads


def test_traced_records_every_step():
    traced = Traced(MixedBudget(max_num_batched_tokens=8))
    res = simulate(Requests([0.0, 0.0, 0.0], [6, 5, 3], [4, 4, 4]), traced, LLAMA3_8B, H100_SXM)
    assert traced.name == "mixed-budget" and len(traced.steps) == res.step_end_s.size
    assert traced.steps[:2] == [[(0, 6), (1, 2)], [(0, 1), (1, 3), (2, 3)]]
    assert [sum(n for _, n in step) for step in traced.steps] == res.step_tokens.tolist()


def test_a_policy_may_return_lists():
    class Lists:
        name = "lists"

        def __init__(self):
            self.inner = MixedBudget(max_num_batched_tokens=32)

        def schedule(self, state):
            ids, tokens = self.inner.schedule(state)
            return ids.tolist(), tokens.tolist()

    reqs = _workload(n=60)
    a = simulate(reqs, Lists(), LLAMA3_8B, H100_SXM)
    b = simulate(reqs, MixedBudget(max_num_batched_tokens=32), LLAMA3_8B, H100_SXM)
    assert np.array_equal(a.step_end_s, b.step_end_s) and np.array_equal(a.token_step, b.token_step)


def _long_then_short():
    """A 32K-token prompt, then ten 256-token prompts right behind it."""
    return Requests(np.array([0.0] + [0.001] * 10), np.array([32768] + [256] * 10), np.array([16] * 11))


def test_shortest_first_lets_short_prompts_overtake_a_long_one():
    reqs = _long_then_short()
    fcfs = simulate(reqs, MixedBudget(max_num_batched_tokens=2048), LLAMA31_8B, H100_SXM)
    spf = simulate(reqs, MixedBudget(max_num_batched_tokens=2048, prefill_order="shortest_first"), LLAMA31_8B,
                   H100_SXM)
    prefill_32k = sum(step_time(LLAMA31_8B, H100_SXM, prefill_tokens=2048, prefill_context=p)
                      for p in range(0, 32768, 2048))
    # FCFS: every short request waits for the whole long prefill
    assert (fcfs.ttft[1:] > prefill_32k).all()
    # shortest first: the short prompts go through in the next steps; the long one loses a few steps
    assert (spf.ttft[1:] < 0.1).all()
    assert fcfs.ttft[0] < spf.ttft[0] < fcfs.ttft[0] + 0.1
    # the budget still holds, and every running sequence still advances every step
    assert spf.step_tokens.max() <= 2048
    assert all((np.diff(_request_token_steps(spf, i)) == 1).all() for i in range(len(reqs)))


def test_shortest_first_is_fcfs_when_prompts_are_equal():
    n = 80
    reqs = Requests(poisson_arrivals(n, 50.0, seed=2), fixed_lengths(n, 300), uniform_lengths(n, 1, 30, seed=3))
    a = simulate(reqs, MixedBudget(max_num_batched_tokens=512), LLAMA3_8B, H100_SXM)
    b = simulate(reqs, MixedBudget(max_num_batched_tokens=512, prefill_order="shortest_first"), LLAMA3_8B, H100_SXM)
    assert np.array_equal(a.token_step, b.token_step)


def test_prefill_backlog_counts_prompt_work_only():
    state = ServingState(np.array([10, 20, 30, 5]), np.array([4, 4, 4, 4]), kv_capacity=1000)
    state.waiting.extend([0, 1, 2, 3])
    assert prefill_backlog(state) == 65
    # 0 admitted and decoding (its prompt done), 1 admitted with 12 of 20 computed
    for i in (0, 1):
        state.waiting.remove(i)
        state.admit(i)
    state.running = np.array([0, 1])
    state.computed[0], state.seq_len[0], state.computed[1] = 10, 11, 12
    assert prefill_backlog(state) == (20 - 12) + 30 + 5


def test_rejected_requests_are_never_served():
    reqs = Requests([0.0, 0.0, 0.0, 0.0], [100, 5000, 100, 100], [4, 4, 4, 1])
    res = simulate(reqs, MixedBudget(max_num_batched_tokens=512), LLAMA3_8B, H100_SXM,
                   admission=lambda state, i: state.prompt_len[i] < 1000)
    assert res.rejected.tolist() == [False, True, False, False] and res.served.tolist() == [True, False, True, True]
    assert res.generated.tolist() == [4, 0, 4, 1]
    assert (res.token_step[res.token_offset[1]:res.token_offset[2]] == -1).all()
    assert np.isnan([res.ttft[1], res.tpot[1], res.max_gap[1], res.queueing_delay[1], res.finish_s[1]]).all()
    assert np.isnan(res.gaps(1)).all() and res.token_times(1).size == 4
    assert not np.isnan(res.ttft[[0, 2, 3]]).any()
    # the served ones are exactly what a run without the rejected request gives
    alone = simulate(Requests([0.0, 0.0, 0.0], [100, 100, 100], [4, 4, 1]), MixedBudget(max_num_batched_tokens=512),
                     LLAMA3_8B, H100_SXM)
    assert res.ttft[[0, 2, 3]].tolist() == alone.ttft.tolist()
    assert np.array_equal(res.inter_token_gaps(), alone.inter_token_gaps())
    assert res.throughput() == pytest.approx(9 / res.duration_s)
    # a rejected request meets no SLO, however loose, but counts in the attainment's denominator
    assert res.slo_met(1e9, 1e9).tolist() == [True, False, True, True]
    assert res.goodput(1e9, 1e9) == pytest.approx(3 / res.duration_s)
    assert res.goodput_tokens(1e9, 1e9) == pytest.approx(9 / res.duration_s)
    summary = res.summary(1e9, 1e9)
    assert summary["rejected"] == 1 and summary["slo_attainment"] == 0.75


def test_everyone_rejected():
    res = simulate(Requests([0.0, 1.0], [10, 10], [2, 2]), MixedBudget(), LLAMA3_8B, H100_SXM,
                   admission=lambda state, i: False)
    assert res.step_end_s.size == 0 and res.rejected.all() and np.isnan(res.ttft).all()
    assert res.summary()["rejected"] == 2


def test_backlog_admission_keeps_admitted_requests_within_the_ttft_target():
    """The admission rule of chapter 03 on an overloaded server: what it admits meets the TTFT target (it is
    a bound: each step prefills at least budget - decodes tokens and lasts at most the sized step)."""
    from servelab.analytic.costmodel import max_backlog_tokens, max_prefill_chunk

    tpot, ttft, decoders = 0.030, 1.0, 64
    chunk = max_prefill_chunk(LLAMA3_8B, H100_SXM, tpot, [2048] * decoders, prefill_context=4000)
    step = step_time(LLAMA3_8B, H100_SXM, prefill_tokens=chunk, prefill_context=4000,
                     decode_context_lens=[2048] * decoders)
    limit = max_backlog_tokens(decoders + chunk, decoders, step, ttft)
    n = 400
    reqs = Requests(poisson_arrivals(n, 100.0, seed=4), lognormal_lengths(n, 1000, 0.5, seed=5, high=4000),
                    lognormal_lengths(n, 16, 0.5, seed=6, high=128))
    policy = MixedBudget(max_num_batched_tokens=decoders + chunk, max_num_seqs=decoders)
    everyone = simulate(reqs, policy, LLAMA3_8B, H100_SXM)
    ruled = simulate(reqs, policy, LLAMA3_8B, H100_SXM, admission=BacklogAdmission(limit))
    assert ruled.step_seqs.max() <= decoders and ruled.step_duration_s.max() <= tpot
    assert np.nanmax(everyone.ttft) > 2 * ttft                  # overload: the queue grows without the rule
    assert 0.1 < ruled.rejected.mean() < 0.9
    assert np.nanmax(ruled.ttft) <= ttft
    assert ruled.goodput(ttft, tpot) > 2 * everyone.goodput(ttft, tpot)


def test_admission_must_be_callable():
    with pytest.raises(ValueError, match="admission must be a callable"):
        simulate(Requests([0.0], [10], [2]), MixedBudget(), TOY, TOY_GPU, kv_capacity_tokens=100, admission=5)


def test_merge_requests():
    a = Requests([0.0, 2.0], [10, 20], [1, 2])
    b = Requests([1.0, 2.0], [30, 40], [3, 4])
    merged, (ia, ib) = merge_requests(a, b)
    assert merged.arrival_s.tolist() == [0.0, 1.0, 2.0, 2.0]
    assert merged.prompt_len.tolist() == [10, 30, 20, 40]          # ties: the first part first
    assert ia.tolist() == [0, 2] and ib.tolist() == [1, 3]
    assert merged.output_len[ib].tolist() == [3, 4]


def test_gap_timeline_matches_the_per_request_gaps():
    res = simulate(_workload(n=50), MixedBudget(max_num_batched_tokens=64), LLAMA3_8B, H100_SXM)
    times, gaps = res.gap_timeline([3, 7])
    expected_gaps = np.concatenate([res.gaps(3), res.gaps(7)])
    expected_times = np.concatenate([res.token_times(3)[1:], res.token_times(7)[1:]])
    assert np.array_equal(gaps, expected_gaps) and np.array_equal(times, expected_times)
    all_times, all_gaps = res.gap_timeline()
    assert np.array_equal(np.sort(all_gaps), np.sort(res.inter_token_gaps()))
    assert res.step_duration_s.tolist() == (res.step_end_s - res.step_start_s).tolist()
