"""Chapter 15's numbers: routers over replicas with their own radix caches, the balance threshold, what a resize
keeps."""

from __future__ import annotations

import functools
import math
import random

import numpy as np

from servelab.analytic import costmodel, routing
from servelab.analytic.costmodel import H100_SXM, LLAMA31_8B
from servelab.analytic.serving import ServingPoint
from servelab.claims.core import Claim

A = "ch15_routing_across_replicas"
M, G, N = LLAMA31_8B, H100_SXM, 4
SHARED = {"num_groups": 8, "system_len": 4000, "user_len": 1000, "output_len": 256, "rate": 60.0, "seed": 1}
HOT = 0.8
MULTI = {"turns": 5, "first_len": 2000, "user_len": 200, "output_len": 200, "think_s": 5.0, "rate": 4.0, "seed": 2}
SWEEP = (16, 64, 128)
NO_BALANCE = "cache-aware, no balance"
SIMULATED = "measured over a simulated run of the replicas"


def workloads() -> dict:
    return {"hot": routing.shared_prompt_workload(400, **SHARED, hot=HOT),
            "shared": routing.shared_prompt_workload(400, **SHARED),
            "multi": routing.multi_turn_workload(60, **MULTI)}


@functools.cache
def runs() -> dict:
    """The chapter's simulated runs, as its cells make them: workload -> router -> ReplicaResult; "sweep" ->
    balance_abs_threshold -> run on the hot workload; "resize" -> router -> (no resize, 4 -> 5, 4 -> 3) hit rates of
    the requests after the resize."""
    from servelab.simulator.replicas import CacheAware, PrefixHash, compare_routers, simulate_replicas, standard_routers

    w = workloads()
    out = {"hot": compare_routers(w["hot"], standard_routers() + [CacheAware(balance_abs_threshold=math.inf,
                                                                               name=NO_BALANCE)], M, G, num_replicas=N),
           "shared": compare_routers(w["shared"], standard_routers(), M, G, num_replicas=N),
           "multi": compare_routers(w["multi"], standard_routers(), M, G, num_replicas=N)}
    out["sweep"] = {a: simulate_replicas(w["hot"], CacheAware(balance_abs_threshold=a), M, G, num_replicas=N)
                    for a in SWEEP}
    conv = w["multi"]
    half = float(np.median([q[0] for q in conv]))
    after = np.array([q[0] >= half for q in conv])
    resized = {}
    for make in (lambda: PrefixHash(prefix_tokens=256), lambda: PrefixHash(prefix_tokens=256, vnodes=64),
                 lambda: CacheAware()):
        rates = []
        for resize in ((half, 5), (half, 3)):
            r = simulate_replicas(conv, make(), M, G, num_replicas=N, resize=resize)
            rates.append(r.cached_tokens[after].sum() / r.prompt_tokens[after].sum())
        base = out["multi"][make().name]
        resized[make().name] = (base.cached_tokens[after].sum() / base.prompt_tokens[after].sum(), *rates)
    out["resize"] = resized
    return out


def ring_kept(n: int = 4, vnodes: int = 256, keys: int = 20000) -> float:
    """Measured: the fraction of `keys` random keys that keep their owner when a ring of n replicas gets one more."""
    rng = random.Random(7)
    hs = [rng.getrandbits(64) for _ in range(keys)]
    before, after = routing.build_ring(n, vnodes), routing.build_ring(n + 1, vnodes)
    return sum(routing.ring_owner(before, h) == routing.ring_owner(after, h) for h in hs) / keys


def saved_ms(cached: int = 4000, prompt: int = 5000) -> float:
    """ms of prefill a cached prefix saves: one step of the whole prompt less one step of the rest over it."""
    return (costmodel.step_time(M, G, prefill_tokens=prompt)
            - costmodel.step_time(M, G, prefill_tokens=prompt - cached, prefill_context=cached)) * 1e3


def drill_values() -> tuple:
    return (routing.keys_kept(8, 9, "modulo"), math.ceil(1.25 * (64 + 1) / 16), saved_ms(7000, 8000),
            routing.shared_prefix_hit_rate(600, 12, 6, 3000, 500))


def ch15() -> list[Claim]:
    """The headline, the walkthrough's thresholds, the sweep, the resize and the drills."""
    r = runs()
    hot, shared, multi = r["hot"], r["shared"], r["multi"]
    nb, ca, rr = hot[NO_BALANCE], hot["cache-aware"], hot["round-robin"]
    ring = shared["consistent hash"]
    src = "SGLang router launcher default (router_args.py at e46dcd87)"
    d1, d2, d3, d4 = drill_values()
    out = [
        Claim(A, "cell-03", "share of requests on the hot prefix", HOT, "When {:.0%} of the requests", None,
              "a workload parameter"),
        Claim(A, "cell-03", "requests on the hot replica without balance", int(nb.served.max()), "sends {} of 400",
              None, SIMULATED),
        Claim(A, "cell-03", "mean TTFT without balance, s", float(nb.ttft.mean()), "mean TTFT at {:.2f} s",
              nb.largest_step),
        Claim(A, "cell-03", "hit rate without balance", nb.hit_rate, "keeps only {:.1%}", None, SIMULATED),
        Claim(A, "cell-03", "mean TTFT with SGLang's thresholds, ms", float(ca.ttft.mean()) * 1e3,
              "brings the mean TTFT to {:.0f} ms", ca.largest_step),
        Claim(A, "cell-03", "hit rate with SGLang's thresholds", ca.hit_rate, "with a {:.1%} hit rate", None,
              SIMULATED),
        Claim(A, "cell-03", "round-robin's mean TTFT, ms", float(rr.ttft.mean()) * 1e3, "gets {:.1f} ms here",
              rr.largest_step),
        Claim(A, "cell-05", "cache threshold", routing.CACHE_THRESHOLD, "defaults are {}", None, src),
        Claim(A, "cell-05", "absolute balance threshold", routing.BALANCE_ABS_THRESHOLD, ", {} and", None, src),
        Claim(A, "cell-05", "relative balance threshold", routing.BALANCE_REL_THRESHOLD, "and {} (older", None, src),
        Claim(A, "cell-03", "the absolute threshold in the headline", routing.BALANCE_ABS_THRESHOLD,
              "by more than {} requests", None, src),
        Claim(A, "cell-03", "the relative threshold in the headline", routing.BALANCE_REL_THRESHOLD,
              "by more than {}x", None, src),
        Claim(A, "cell-26", "the absolute threshold in the interview", routing.BALANCE_ABS_THRESHOLD,
              "more than {} outstanding", None, src),
        Claim(A, "cell-26", "the relative threshold in the interview", routing.BALANCE_REL_THRESHOLD,
              "by more than {}x", None, src),
        Claim(A, "cell-26", "the cache threshold in the interview", routing.CACHE_THRESHOLD,
              "more than {:.0%} of the", None, src),
        Claim(A, "cell-10", "requests on the ring's busiest replica", int(ring.served.max()), "gives one replica {} of",
              None, SIMULATED),
        Claim(A, "cell-10", "its mean TTFT, s", float(ring.ttft.mean()), "a mean TTFT of {:.1f} s", ring.largest_step),
        Claim(A, "cell-10", "multi-turn hit rate, cache-aware", multi["cache-aware"].hit_rate,
              "cache-aware routing hits {:.1%}", None, SIMULATED),
        Claim(A, "cell-10", "multi-turn hit rate, round-robin", multi["round-robin"].hit_rate,
              "against round-robin's {:.1%}", None, SIMULATED),
        *_sweep_and_resize(r),
        Claim(A, "cell-27", "drill 1", d1, "drill_1 = {:.4f}", None, "a fraction of hashes, no step"),
        Claim(A, "cell-27", "drill 2", d2, "drill_2 = {}", None, "a count of requests, no step"),
        Claim(A, "cell-27", "drill 3", d3, "drill_3 = {:.1f} ms", ServingPoint(M, G, prefill_chunks=(8000,))),
        Claim(A, "cell-27", "drill 4", d4, "drill_4 = {:.4f}", None, "a closed-form hit rate, no step"),
        Claim(A, "cell-26", "prefill a 4K hit saves, ms", saved_ms(), "saves {:.0f} ms of prefill",
              ServingPoint(M, G, prefill_chunks=(5000,))),
        Claim(A, "cell-26", "share of traffic on the hot prefix in the interview", HOT, "With {:.0%} of the traffic",
              None, "a workload parameter"),
        Claim(A, "cell-26", "hot-prefix TTFT without balance in the interview, s", float(nb.ttft.mean()),
              "mean TTFT of {:.1f} s", nb.largest_step),
        Claim(A, "cell-26", "and with the thresholds, ms", float(ca.ttft.mean()) * 1e3, "and {:.0f} ms with",
              ca.largest_step),
        Claim(A, "cell-26", "modulo keeps, 4 -> 5", routing.keys_kept(4, 5, "modulo"), "keeps {:.0%} of the keys",
              None, "a fraction of hashes, no step"),
    ]
    return out


def _sweep_and_resize(r: dict) -> list[Claim]:
    sweep, resize = r["sweep"], r["resize"]
    return [
        Claim(A, "cell-18", "TTFT at an absolute threshold of 16, ms", float(sweep[16].ttft.mean()) * 1e3,
              "16 requests the mean TTFT is\n{:.1f} ms", sweep[16].largest_step),
        Claim(A, "cell-18", "TTFT at 128, s", float(sweep[128].ttft.mean()), "with 128 it is {:.2f} s",
              sweep[128].largest_step),
        Claim(A, "cell-18", "hit rate at 16", sweep[16].hit_rate, "and the hit rate {:.1%};", None, SIMULATED),
        Claim(A, "cell-18", "hit rate at 128", sweep[128].hit_rate, "and {:.1%}, because", None, SIMULATED),
        Claim(A, "cell-23", "ring keeps, measured", ring_kept(), "kept {:.1%} of 20,000", None,
              "random keys on a ring, no step"),
        Claim(A, "cell-23", "hit rate after 4 -> 5, hash mod n", resize["hash mod n"][1], "hash mod n falls to {:.1%}",
              None, SIMULATED),
        Claim(A, "cell-23", "hit rate after 4 -> 5, ring", resize["consistent hash"][1], "the ring keeps {:.1%}", None,
              SIMULATED),
        Claim(A, "cell-23", "hit rate after 4 -> 5, cache-aware", resize["cache-aware"][1],
              "cache-aware routing {:.1%}", None, SIMULATED),
        Claim(A, "cell-23", "hit rate with no resize", resize["cache-aware"][0], "({:.1%} with no resize)", None,
              SIMULATED),
    ]
