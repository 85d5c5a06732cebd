"""servelab.analytic.queueing: the closed forms against their definitions and against simulated queues.

The waits of single-server FCFS queues with Poisson arrivals are simulated with Lindley's recursion
(W[i] = max(0, W[i-1] + S[i-1] - A[i])): the Pollaczek-Khinchine mean agrees within 3%, the tail approximation's
p99 within 5% for exponential service (where it is exact) and within 20% for deterministic and log-normal
service (it overstates M/D/1's tail and understates a log-normal's), at 70% utilization.
"""

from __future__ import annotations

import doctest
import math
import random

import numpy as np
import pytest

from servelab.analytic import queueing
from servelab.analytic.queueing import (
    admit_by_deadline,
    dead_requests,
    drain_time,
    mg1_mean_wait,
    retry_after,
    retry_delay,
    ttft_quantile,
    utilization_limit,
    wait_quantile,
)


def lindley(service: np.ndarray, interarrival: np.ndarray) -> np.ndarray:
    w = np.zeros(service.size)
    for i in range(1, service.size):
        w[i] = max(0.0, w[i - 1] + service[i - 1] - interarrival[i])
    return w[2000:]


@pytest.mark.parametrize("kind, tolerance", [("exponential", 0.05), ("deterministic", 0.20), ("lognormal", 0.20)])
def test_the_mean_and_the_p99_wait_agree_with_a_simulated_queue(kind, tolerance):
    rng, rho, n = np.random.default_rng(1), 0.7, 200_000
    sigma = 0.8
    service = {"exponential": rng.exponential(1.0, n), "deterministic": np.ones(n),
               "lognormal": rng.lognormal(-sigma ** 2 / 2, sigma, n)}[kind]           # mean 1 in each case
    cv2 = {"exponential": 1.0, "deterministic": 0.0, "lognormal": math.exp(sigma ** 2) - 1}[kind]
    w = lindley(service, rng.exponential(1 / rho, n))
    mean = mg1_mean_wait(rho, 1.0, cv2)
    assert w.mean() == pytest.approx(mean, rel=0.03)
    assert np.quantile(w, 0.99) == pytest.approx(wait_quantile(0.99, rho, mean), rel=tolerance)


def test_the_closed_forms_are_their_definitions():
    assert mg1_mean_wait(0.5, 2.0, 1.0) == pytest.approx(0.5 / (1 / 2.0 - 0.5 / 2.0))    # M/M/1: rho / (mu - lam)
    assert wait_quantile(0.99, 0.005, 1.0) == 0.0                                        # 99.5% find it idle
    w = wait_quantile(0.9, 0.6, 0.75)
    assert 0.6 * math.exp(-0.6 * w / 0.75) == pytest.approx(0.1)                         # P(W > w_q) = 1 - q
    assert ttft_quantile(0.99, 0.7, 0.1) == pytest.approx(wait_quantile(0.99, 0.7, mg1_mean_wait(0.7, 0.1)) + 0.1)


def test_the_utilization_limit_meets_the_target_and_falls_with_variance():
    rho = utilization_limit(0.8, 0.1)
    assert ttft_quantile(0.99, rho, 0.1) <= 0.8 < ttft_quantile(0.99, rho + 1e-6, 0.1)
    limits = [utilization_limit(0.8, 0.1, cv2) for cv2 in (0.0, 0.5, 1.0, 2.0)]
    assert limits == sorted(limits, reverse=True) and limits[0] > 0.69 and limits[-1] < 0.4
    assert utilization_limit(0.05, 0.1) == 0.0                                            # a prefill alone is late
    assert utilization_limit(0.8, 0.1, q=0.9) > rho                                       # a looser quantile


def test_a_spike_drains_and_leaves_dead_requests_as_derived():
    assert drain_time(20, 5, 10, 60) == 120.0 and drain_time(8, 5, 10, 60) == 0.0
    assert drain_time(20, 10, 10, 60) == math.inf
    # by hand: the backlog passes 30 s x 10/s = 300 at t = 30 s; 20/s arrive dead until the spike ends (600),
    # then 5/s for the 60 s the drain takes from 600 back to 300 (300)
    assert dead_requests(20, 5, 10, 60, 30) == 900.0
    assert dead_requests(20, 5, 10, 60, 60) == 0.0                                       # the peak wait is 60 s
    # a step-by-step simulation of the same spike (one-second ticks, FCFS) counts the same dead requests
    backlog, dead = 0.0, 0.0
    for t in range(600):
        rate = 20 if t < 60 else 5
        if backlog > 30 * 10:
            dead += rate
        backlog = max(0.0, backlog + rate - 10)
    assert dead == pytest.approx(900, rel=0.03)


def test_admission_by_deadline_and_backoff():
    assert admit_by_deadline(0, 10_000, 10_000, 1.0) and not admit_by_deadline(1, 10_000, 10_000, 1.0)
    assert [retry_delay(a, 1.0, 5.0) for a in range(4)] == [1.0, 2.0, 4.0, 5.0]
    rng = random.Random(0)
    draws = [retry_delay(3, 1.0, 100.0, rng) for _ in range(2000)]
    assert 0 <= min(draws) and max(draws) <= 8.0 and np.mean(draws) == pytest.approx(4.0, rel=0.05)


def test_retry_after_rounds_the_drain_to_the_line_up_and_adds_the_servers_jitter():
    assert retry_after(50_000, 20_000, 12_000) == 3                      # 2.5 s, rounded up
    assert retry_after(44_000, 20_000, 12_000) == 2                      # exactly 2 s stays 2
    assert retry_after(10_000, 20_000, 12_000) == retry_after(0, 0, 1.0) == queueing.MIN_RETRY_AFTER_S == 1
    assert retry_after(50_000, 20_000, 12_000, jitter_s=5.0) == 3        # no generator: no jitter
    rng = random.Random(0)
    draws = [retry_after(44_000, 20_000, 12_000, 4.0, rng) for _ in range(2000)]
    assert set(draws) == {3, 4, 5, 6} and all(isinstance(d, int) for d in draws)
    assert retry_after(44_000, 20_000, 12_000, 4.0, random.Random(3)) == \
        math.ceil(2.0 + random.Random(3).uniform(0.0, 4.0))
    with pytest.raises(ValueError, match="prefill_tokens_per_s"):
        retry_after(1, 0, 0.0)
    with pytest.raises(ValueError, match="jitter_s"):
        retry_after(1, 0, 1.0, -1.0)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="rho"):
        mg1_mean_wait(1.0, 0.1)
    with pytest.raises(ValueError, match="service_s must be > 0"):
        utilization_limit(1.0, 0.0)
    with pytest.raises(ValueError, match="never drains"):
        dead_requests(20, 10, 10, 60, 30)
    with pytest.raises(ValueError, match="attempt"):
        retry_delay(-1, 1.0, 2.0)


def test_the_module_examples_hold():
    assert doctest.testmod(queueing).failed == 0
