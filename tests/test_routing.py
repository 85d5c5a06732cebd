"""servelab.analytic.routing and servelab.simulator.replicas: the routers' rules, and the replica simulator within 5%
of the closed forms (the hit rate of a shared system prompt under round-robin and under prefix affinity, the keys a
ring keeps when a replica is added), with every step it runs feasible under the serving model."""

from __future__ import annotations

import math
import random

import pytest

from servelab.analytic import routing, serving
from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
from servelab.simulator.replicas import CacheAware, LeastOutstanding, PrefixHash, RoundRobin, simulate_replicas


def test_the_step_is_priced_as_costmodel_prices_it():
    from servelab.analytic import costmodel
    from servelab.simulator.replicas import step_seconds

    for chunks, prefixes, contexts in (([5000], [0], []), ([1000, 300], [4000, 0], [2000] * 7), ([], [], [900, 1])):
        want = costmodel.step_time(LLAMA31_8B, H100_SXM, prefill_tokens=chunks, decode_context_lens=contexts,
                                   prefill_context=prefixes if chunks else 0)
        assert step_seconds(LLAMA31_8B, H100_SXM, chunks, prefixes, contexts) == pytest.approx(want, rel=1e-12)


def test_ring_owner_is_the_first_point_clockwise_and_wraps():
    ring = [(10, 0), (20, 1), (30, 2)]
    assert [routing.ring_owner(ring, h) for h in (0, 10, 11, 20, 30, 31)] == [0, 0, 1, 1, 2, 0]
    with pytest.raises(ValueError):
        routing.ring_owner([], 5)


def test_bounded_loads_never_pass_the_cap():
    ring = routing.build_ring(5, 32)
    rng = random.Random(3)
    for c in (1.0, 1.25, 2.0):
        loads = [0] * 5
        for _ in range(400):
            cap = math.ceil(c * (sum(loads) + 1) / 5)
            w = routing.bounded_owner(ring, rng.getrandbits(64), loads, c)
            assert loads[w] < cap
            loads[w] += 1
        assert max(loads) <= math.ceil(c * sum(loads) / 5)
    with pytest.raises(ValueError):
        routing.bounded_owner(ring, 1, [0] * 5, 0.9)


def test_cache_aware_rule():
    pick = routing.cache_aware_pick
    assert pick([100, 10], [90, 0], 100, [5, 9]) == 1          # imbalanced by both thresholds
    assert pick([100, 40], [90, 0], 100, [5, 9]) == 0          # 100 < 40 x 1.5: balanced, the match wins
    assert pick([70, 5], [90, 0], 100, [5, 9]) == 1            # 65 > 64 and 70 > 7.5: imbalanced
    assert pick([69, 5], [90, 0], 100, [5, 9]) == 0            # 64 is not above 64: balanced
    assert pick([0, 0], [30, 0], 100, [9, 5]) == 1             # 0.3 is not above 0.3: the smallest tree
    assert pick([0, 0], [0, 0], 0, [9, 5]) == 1                # an empty request matches nothing
    assert pick([0, 0], [31, 0], 100, [5, 9]) == 0


def test_keys_kept_closed_forms():
    assert routing.keys_kept(4, 5, "modulo") == pytest.approx(1 / 5)
    assert routing.keys_kept(4, 8, "modulo") == pytest.approx(1 / 2)
    assert routing.keys_kept(5, 4, "consistent") == pytest.approx(4 / 5)
    with pytest.raises(ValueError):
        routing.keys_kept(4, 5, "random")


def test_a_ring_keeps_n_over_n_plus_one_of_the_keys_within_5_percent():
    rng = random.Random(7)
    keys = [rng.getrandbits(64) for _ in range(20000)]
    for n in (3, 4, 8):
        before, after = routing.build_ring(n, 256), routing.build_ring(n + 1, 256)
        kept = sum(routing.ring_owner(before, k) == routing.ring_owner(after, k) for k in keys) / len(keys)
        assert kept == pytest.approx(routing.keys_kept(n, n + 1, "consistent"), rel=0.05)
        moved = sum(k % n != k % (n + 1) for k in keys) / len(keys)
        assert 1 - moved == pytest.approx(routing.keys_kept(n, n + 1, "modulo"), rel=0.05)


def test_the_simulated_hit_rate_is_the_closed_form_within_5_percent():
    """Slow arrivals (each group's previous request is cached before the next one comes) and no eviction: round-robin
    misses once per group and replica, prefix affinity once per group."""
    reqs = routing.shared_prompt_workload(240, num_groups=4, system_len=1000, user_len=100, output_len=4, rate=4.0,
                                          seed=5)
    rr = simulate_replicas(reqs, RoundRobin(), LLAMA31_8B, H100_SXM, num_replicas=4)
    ring = simulate_replicas(reqs, PrefixHash(prefix_tokens=1000, vnodes=64), LLAMA31_8B, H100_SXM, num_replicas=4)
    ca = simulate_replicas(reqs, CacheAware(), LLAMA31_8B, H100_SXM, num_replicas=4)
    assert rr.hit_rate == pytest.approx(routing.shared_prefix_hit_rate(240, 4, 4, 1000, 100), rel=0.05)
    assert ring.hit_rate == pytest.approx(routing.shared_prefix_hit_rate(240, 4, 1, 1000, 100), rel=0.05)
    assert ca.hit_rate == pytest.approx(routing.shared_prefix_hit_rate(240, 4, 1, 1000, 100), rel=0.05)
    assert list(rr.served) == [60] * 4 and rr.imbalance == pytest.approx(1.0, rel=0.05)   # round-robin's load
    for res in (rr, ring, ca):
        serving.check(res.largest_step)


def test_the_balance_threshold_caps_a_hot_prefix_and_a_resize_keeps_affinity():
    reqs = routing.shared_prompt_workload(400, num_groups=8, system_len=4000, user_len=1000, output_len=256,
                                          rate=60.0, seed=1, hot=0.8)
    hot = simulate_replicas(reqs, CacheAware(balance_abs_threshold=math.inf), LLAMA31_8B, H100_SXM, num_replicas=4)
    fixed = simulate_replicas(reqs, CacheAware(), LLAMA31_8B, H100_SXM, num_replicas=4)
    least = simulate_replicas(reqs, LeastOutstanding(), LLAMA31_8B, H100_SXM, num_replicas=4)
    assert hot.imbalance > 2.5 and fixed.imbalance < hot.imbalance - 1 and fixed.ttft.mean() < hot.ttft.mean() / 5
    assert fixed.hit_rate > hot.hit_rate and least.imbalance < fixed.imbalance   # an overloaded cache evicts
    conv = routing.multi_turn_workload(24, turns=4, first_len=1000, user_len=100, output_len=50, think_s=4.0,
                                       rate=3.0, seed=2)
    mod = simulate_replicas(conv, PrefixHash(prefix_tokens=64), LLAMA31_8B, H100_SXM, num_replicas=4,
                            resize=(8.0, 5))
    ring = simulate_replicas(conv, PrefixHash(prefix_tokens=64, vnodes=128), LLAMA31_8B, H100_SXM, num_replicas=4,
                             resize=(8.0, 5))
    assert ring.hit_rate > mod.hit_rate and len(mod.mean_outstanding) == 5
