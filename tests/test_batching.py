"""servelab.analytic.batching: lesson Step 1 verbatim, arrivals against a step-by-step simulation, and the
gain formula of question 5 against Monte Carlo with the workload generators."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from servelab.analytic import batching, workloads
from servelab.analytic.batching import naive_continuous, simulate_continuous, simulate_static


def test_lesson_step1_asserts():
    lens = [20, 200, 50, 30]
    assert simulate_static(lens, 2) == (250, [20, 200, 250, 230])
    assert simulate_continuous(lens, 2) == (200, [20, 200, 70, 100])
    assert sum(lens) / (2 * 250) == 0.6 and sum(lens) / (2 * 200) == 0.75
    assert simulate_static([5, 1, 1, 1], 2) == (6, [5, 1, 6, 6])
    assert simulate_continuous([5, 1, 1, 1], 2) == (5, [5, 1, 2, 3])
    rng = random.Random(0)
    for _ in range(300):
        lens = [rng.randint(1, 30) for _ in range(rng.randint(1, 15))]
        B = rng.randint(1, 6)
        got = simulate_continuous(lens, B)
        assert got == naive_continuous(lens, B)
        assert max(max(lens), -(-sum(lens) // B)) <= got[0] <= simulate_static(lens, B)[0]


def test_lesson_utilization_numbers():
    lens = [20, 200, 50, 30]
    assert batching.utilization(lens, 2, simulate_static(lens, 2)[0]) == 0.6
    assert batching.utilization(lens, 2, simulate_continuous(lens, 2)[0]) == 0.75
    assert batching.lower_bound(lens, 2) == 200 == simulate_continuous(lens, 2)[0]


def test_edge_cases():
    for simulate in (simulate_static, simulate_continuous, naive_continuous):
        assert simulate([], 3) == (0, [])
        assert simulate([7], 1) == (7, [7])
        assert simulate([3, 1, 2], 5) == (3, [3, 1, 2])  # B larger than the number of requests
    assert simulate_static([4, 4, 4], 1) == simulate_continuous([4, 4, 4], 1) == (12, [4, 8, 12])
    assert batching.lower_bound([], 2) == 0
    assert batching.lower_bound([5, 5, 5], 2) == 8  # ceil(7.5)
    assert batching.utilization([], 2, 0) == 0.0


def test_continuous_reaches_the_bound_when_the_long_request_comes_first():
    lens = [300] + [20] * 30
    assert simulate_continuous(lens, 4)[0] == batching.lower_bound(lens, 4) == 300
    assert simulate_static(lens, 4)[0] == 300 + 7 * 20


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: simulate_static([1, 2], 0), "B .* >= 1"),
        (lambda: simulate_continuous([1, 2], -1), "B .* >= 1"),
        (lambda: naive_continuous([1, 2], 1.5), "B .* integer"),
        (lambda: simulate_static([1, 0], 2), r"out_lens\[1\] must be >= 1"),
        (lambda: simulate_continuous([3, -2], 2), r"out_lens\[1\] must be >= 1"),
        (lambda: simulate_continuous([3, 2.5], 2), r"out_lens\[1\] must be an integer"),
        (lambda: batching.lower_bound([1], True), "B .* integer"),
        (lambda: batching.utilization([10, 10], 2, 5), "impossible"),
        (lambda: batching.utilization([10], 2, -1), "total_steps"),
        (lambda: batching.simulate_continuous_arrivals([0], [1, 2], 2), "same length"),
        (lambda: batching.simulate_static_arrivals([0, -1], [1, 2], 2), r"arrivals\[1\] must be >= 0"),
        (lambda: batching.simulate_continuous_arrivals([0, 0.5], [1, 2], 2), r"arrivals\[1\] .* integer"),
        (lambda: batching.slot_assignments([1], 1, "dynamic"), "policy"),
        (lambda: batching.expected_max([], 2), "must not be empty"),
        (lambda: batching.expected_max([0.5, 0.6], 2), "sum to 1"),
        (lambda: batching.expected_max([1.5, -0.5], 2), r"pmf\[1\].* >= 0"),
        (lambda: batching.expected_max([1.0], 0), "B .* >= 1"),
        (lambda: batching.constant_pmf(0), "length"),
        (lambda: batching.uniform_pmf(5, 2), "lo <= hi"),
        (lambda: batching.geometric_pmf(0.5), "mean"),
        (lambda: batching.geometric_pmf(10, max_len=0), "max_len"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_inputs_are_not_modified():
    lens, arrivals = [5, 1, 1, 1], [3, 0, 2, 0]
    simulate_static(lens, 2), simulate_continuous(lens, 2), naive_continuous(lens, 2)
    batching.simulate_continuous_arrivals(arrivals, lens, 2)
    batching.simulate_static_arrivals(arrivals, lens, 2)
    assert lens == [5, 1, 1, 1] and arrivals == [3, 0, 2, 0]


def test_slot_assignments_agree_with_the_simulators_and_never_overlap():
    rng = random.Random(11)
    for _ in range(200):
        lens, B = [rng.randint(1, 20) for _ in range(rng.randint(0, 12))], rng.randint(1, 5)
        for policy, simulate in (("static", simulate_static), ("continuous", simulate_continuous)):
            placements = batching.slot_assignments(lens, B, policy)
            assert [p.request for p in placements] == list(range(len(lens)))
            assert [p.finish for p in placements] == simulate(lens, B)[1]
            assert all(p.finish - p.start == lens[p.request] and 0 <= p.slot < B for p in placements)
            for slot in range(B):
                spans = sorted((p.start, p.finish) for p in placements if p.slot == slot)
                assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (lens, B, policy, slot)


# ----------------------------------------------------------------------------------------------------------
# arrivals, checked against step-by-step simulations written independently of the heap formulas


def _step_arrivals(arrivals, lens, B, policy):
    """One decode step at a time. Before each step, admit arrived requests first come first served: into any
    free slot (continuous) or, only when the engine is empty, up to B of them as a batch (static)."""
    n = len(lens)
    waiting = deque(sorted(range(n), key=lambda i: (arrivals[i], i)))
    start, finish, running, t = [None] * n, [None] * n, {}, 0
    while waiting or running:
        if policy == "continuous" or not running:
            while waiting and len(running) < B and arrivals[waiting[0]] <= t:
                i = waiting.popleft()
                start[i], running[i] = t, lens[i]
        t += 1
        for i in list(running):
            running[i] -= 1
            if running[i] == 0:
                finish[i] = t
                del running[i]
    return start, finish


@pytest.mark.parametrize("policy", ["continuous", "static"])
def test_arrivals_match_a_step_by_step_simulation(policy):
    simulate = {"continuous": batching.simulate_continuous_arrivals,
                "static": batching.simulate_static_arrivals}[policy]
    rng = random.Random(7)
    for case in range(300):
        lens = [rng.randint(1, 15) for _ in range(rng.randint(0, 12))]
        arrivals = [rng.randint(0, 40) for _ in lens]
        if case % 2:
            arrivals.sort()
        B = rng.randint(1, 5)
        got = simulate(arrivals, lens, B)
        start, finish = _step_arrivals(arrivals, lens, B, policy)
        assert (got.start, got.finish) == (start, finish), (arrivals, lens, B)
        assert got.delay == [s - a for s, a in zip(start, arrivals)]
        assert min(got.delay, default=0) >= 0
        assert got.total_steps == max(finish, default=0)
        starts_in_fcfs_order = [got.start[i] for i in batching.fcfs_order(arrivals)]
        assert starts_in_fcfs_order == sorted(starts_in_fcfs_order)  # first come, first served


def test_arrivals_docstring_examples_and_special_cases():
    sched = batching.simulate_continuous_arrivals([0, 0, 1, 6], [4, 2, 3, 1], 2)
    assert sched == ([0, 0, 2, 6], [4, 2, 5, 7], [0, 0, 1, 0]) and sched.total_steps == 7
    start, finish, delay = batching.simulate_static_arrivals([0, 0, 1, 6], [4, 2, 3, 1], 2)
    assert (start, finish, delay) == ([0, 0, 4, 7], [4, 2, 7, 8], [0, 0, 3, 1])
    lens = [20, 200, 50, 30]
    assert batching.simulate_continuous_arrivals([0] * 4, lens, 2).finish == simulate_continuous(lens, 2)[1]
    assert batching.simulate_static_arrivals([0] * 4, lens, 2).finish == simulate_static(lens, 2)[1]
    assert batching.simulate_continuous_arrivals([0, 10], [3, 3], 2).start == [0, 10]
    assert batching.simulate_continuous_arrivals([5, 0, 0], [1, 1, 1], 1).start == [5, 0, 1]
    assert batching.simulate_continuous_arrivals([], [], 3) == ([], [], [])
    assert batching.fcfs_order([3, 0, 3, 1]) == [1, 3, 0, 2]


# ----------------------------------------------------------------------------------------------------------
# question 5: E[max of B] and the gain


def test_expected_max_small_cases():
    assert batching.expected_max([0.5, 0.5], 2) == 1.75
    assert batching.expected_max([0.5, 0.5], 1) == batching.pmf_mean([0.5, 0.5]) == 1.5
    assert math.isclose(batching.expected_max(batching.constant_pmf(7), 16), 7.0)
    assert math.isclose(batching.predicted_gain(batching.constant_pmf(7), 16), 1.0)
    # lengths 1..3 uniform, B = 2: P(max = 1) = 1/9, P(max = 2) = 3/9, P(max = 3) = 5/9
    assert math.isclose(batching.expected_max(batching.uniform_pmf(1, 3), 2), (1 + 6 + 15) / 9)
    assert math.isclose(batching.predicted_gain([0.5, 0.5], 2), 1.75 / 1.5)


def test_expected_max_by_enumeration():
    """Against brute force over all B-tuples of a small support."""
    import itertools

    pmf = [0.1, 0.0, 0.3, 0.6]
    for B in (1, 2, 3):
        brute = sum(math.prod(pmf[k - 1] for k in ks) * max(ks)
                    for ks in itertools.product(range(1, 5), repeat=B))
        assert math.isclose(batching.expected_max(pmf, B), brute)


def test_geometric_gain_approaches_the_harmonic_number():
    pmf = batching.geometric_pmf(1000)
    assert math.isclose(batching.pmf_mean(pmf), 1000, rel_tol=1e-6)
    for B in (1, 2, 4, 8, 32):
        assert abs(batching.predicted_gain(pmf, B) - batching.harmonic(B)) < 0.01
    assert round(batching.harmonic(8), 4) == 2.7179
    assert batching.geometric_pmf(2, max_len=3) == [0.5, 0.25, 0.25]


DISTS = [
    ("uniform", dict(lo=1, hi=60)),
    ("geometric", dict(mean=20)),
    ("lognormal", dict(mu=math.log(20), sigma=0.8, max_len=400)),
    ("bimodal", dict(short=5, long=100, p_long=0.1)),
]


@pytest.mark.parametrize("dist, params", DISTS, ids=[d for d, _ in DISTS])
def test_expected_max_matches_monte_carlo(dist, params):
    B, groups = 8, 4000
    lens = workloads.output_lengths(B * groups, dist, seed=5, **params)
    sampled = sum(max(lens[g * B:(g + 1) * B]) for g in range(groups)) / groups
    predicted = batching.expected_max(workloads.length_pmf(dist, **params), B)
    assert math.isclose(sampled, predicted, rel_tol=0.03), (sampled, predicted)


@pytest.mark.parametrize("dist, params", DISTS, ids=[d for d, _ in DISTS])
def test_static_over_continuous_steps_approaches_the_predicted_gain(dist, params):
    B = 8
    lens = workloads.output_lengths(16000, dist, seed=9, **params)
    simulated = simulate_static(lens, B)[0] / simulate_continuous(lens, B)[0]
    predicted = batching.predicted_gain(workloads.length_pmf(dist, **params), B)
    assert math.isclose(simulated, predicted, rel_tol=0.04), (simulated, predicted)
