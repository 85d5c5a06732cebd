"""servelab.analytic.workloads: deterministic, in range, and distributed as length_pmf says."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from servelab.analytic import batching, workloads

PARAMS = {
    "constant": dict(length=7),
    "uniform": dict(lo=3, hi=12),
    "geometric": dict(mean=6),
    "lognormal": dict(mu=math.log(8), sigma=0.7, max_len=60),
    "bimodal": dict(short=4, long=30, p_long=0.2),
}


def test_every_distribution_is_covered():
    assert set(PARAMS) == set(workloads.DISTRIBUTIONS)


@pytest.mark.parametrize("dist", sorted(PARAMS))
def test_output_lengths_are_deterministic_ints_in_range(dist):
    a = workloads.output_lengths(500, dist, seed=1, **PARAMS[dist])
    b = workloads.output_lengths(500, dist, seed=1, **PARAMS[dist])
    assert a == b and len(a) == 500
    assert all(type(L) is int and L >= 1 for L in a)
    pmf = workloads.length_pmf(dist, **PARAMS[dist])
    assert max(a) <= len(pmf) and all(pmf[L - 1] > 0 for L in set(a))
    if dist != "constant":
        assert workloads.output_lengths(500, dist, seed=2, **PARAMS[dist]) != a


def test_generators_leave_global_random_state_alone():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    workloads.output_lengths(50, "uniform", seed=0)
    workloads.poisson_arrivals(50, rate=1.0, seed=0)
    assert random.random() == expected


@pytest.mark.parametrize("dist", sorted(PARAMS))
def test_length_pmf_is_a_pmf_and_matches_samples(dist):
    pmf = workloads.length_pmf(dist, **PARAMS[dist])
    assert all(p >= 0 for p in pmf) and math.isclose(sum(pmf), 1.0, abs_tol=1e-9)
    n = 20000
    counts = Counter(workloads.output_lengths(n, dist, seed=3, **PARAMS[dist]))
    total_variation = 0.5 * sum(abs(counts.get(k, 0) / n - p) for k, p in enumerate(pmf, start=1))
    assert total_variation < 0.03, total_variation
    mean = sum(L * c for L, c in counts.items()) / n
    assert math.isclose(mean, batching.pmf_mean(pmf), rel_tol=0.03)


def test_known_pmfs_and_means():
    assert workloads.length_pmf("constant", length=3) == [0.0, 0.0, 1.0]
    assert workloads.length_pmf("uniform", lo=2, hi=3) == [0.0, 0.5, 0.5]
    assert workloads.length_pmf("bimodal", short=1, long=3, p_long=0.25) == [0.75, 0.0, 0.25]
    assert math.isclose(batching.pmf_mean(workloads.length_pmf("geometric", mean=50)), 50, rel_tol=1e-6)
    assert workloads.length_pmf("geometric", mean=1) == [1.0]
    assert workloads.output_lengths(4, "geometric", seed=0, mean=1) == [1, 1, 1, 1]
    assert workloads.output_lengths(3, "constant", seed=0, length=4) == [4, 4, 4]
    assert workloads.output_lengths(0, "uniform", seed=0) == []


def test_caps_are_respected():
    lens = workloads.output_lengths(3000, "geometric", seed=4, mean=50, max_len=20)
    assert max(lens) == 20
    pmf = workloads.length_pmf("geometric", mean=50, max_len=20)
    assert len(pmf) == 20 and math.isclose(pmf[-1], (1 - 1 / 50) ** 19)
    lens = workloads.output_lengths(3000, "lognormal", seed=4, mu=math.log(100), sigma=1.5, max_len=300)
    assert max(lens) == 300 and min(lens) >= 1


def test_poisson_arrivals():
    arrivals = workloads.poisson_arrivals(5000, rate=0.25, seed=8)
    assert arrivals == workloads.poisson_arrivals(5000, rate=0.25, seed=8)
    assert all(type(a) is int and a >= 0 for a in arrivals)
    assert arrivals == sorted(arrivals)
    assert math.isclose(len(arrivals) / arrivals[-1], 0.25, rel_tol=0.05)  # requests per step
    assert workloads.poisson_arrivals(0, rate=1.0, seed=0) == []


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: workloads.output_lengths(5, "zipf", seed=0), "unknown dist 'zipf'"),
        (lambda: workloads.length_pmf("pareto"), "unknown dist"),
        (lambda: workloads.output_lengths(5, "uniform", seed=0, mean=3), "unknown parameter.*mean"),
        (lambda: workloads.output_lengths(-1, "uniform", seed=0), "n must be"),
        (lambda: workloads.output_lengths(5, "constant", seed=0, length=0), "length"),
        (lambda: workloads.output_lengths(5, "uniform", seed=0, lo=5, hi=4), "lo <= hi"),
        (lambda: workloads.output_lengths(5, "geometric", seed=0, mean=0.5), "mean"),
        (lambda: workloads.output_lengths(5, "lognormal", seed=0, sigma=0), "sigma"),
        (lambda: workloads.length_pmf("lognormal", max_len=None), "max_len"),
        (lambda: workloads.output_lengths(5, "bimodal", seed=0, p_long=1.5), "p_long"),
        (lambda: workloads.poisson_arrivals(5, rate=0, seed=0), "rate"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
