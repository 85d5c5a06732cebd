"""Several replicas behind a router: each replica has its own radix cache, queue and step loop.

A request (`servelab.analytic.routing.Request`: arrival, prompt and output token ids) is routed once, on arrival,
from the loads the router counts (each replica's outstanding requests: routed, not finished). A replica steps on
its own clock: every running sequence decodes one token, and waiting prompts are admitted first come first served
into the token budget and the KV a running sequence reserves (prompt + output), each prefilled whole in one step over
its cached prefix (`RadixCache.match_prefix`; at least one token is computed); `costmodel.step_time` prices the step.
A prompt enters the cache when its prefill ends, prompt and output when the request finishes; the cache keeps what
the running sequences leave of `kv_capacity_tokens`, evicting LRU leaves.

Routers: `RoundRobin`, `LeastOutstanding`, `PrefixHash` (modulo, ring or bounded loads on a prefix's hash),
`CacheAware` (SGLang's rule, a tree per replica). `resize=(time_s, n)`: from then the router sees n replicas.

>>> from servelab.analytic.costmodel import LLAMA31_8B, H100_SXM
>>> from servelab.analytic.routing import shared_prompt_workload
>>> reqs = shared_prompt_workload(60, num_groups=3, system_len=500, user_len=50, output_len=8, rate=20.0, seed=1)
>>> a = simulate_replicas(reqs, RoundRobin(), LLAMA31_8B, H100_SXM, num_replicas=3)
>>> b = simulate_replicas(reqs, PrefixHash(prefix_tokens=500, vnodes=64), LLAMA31_8B, H100_SXM, num_replicas=3)
>>> bool(b.hit_rate > a.hit_rate)
True
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel, routing
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab.analytic.serving import ServingPoint
from servelab.schedulers.radix_cache import RadixCache

__all__ = ["CacheAware", "LeastOutstanding", "PrefixHash", "ReplicaResult", "RoundRobin", "compare_routers", "report",
           "simulate_replicas", "standard_routers"]


# ------------------------------------------------------------------------------------------------
# routers: pick(prompt, loads) -> replica, resize(n) when the replicas change


class RoundRobin:
    name = "round-robin"

    def __init__(self):
        self.i = 0

    def resize(self, n: int) -> None:
        pass

    def pick(self, prompt, loads) -> int:
        w = self.i % len(loads)
        self.i += 1
        return w


class LeastOutstanding:
    name = "least outstanding"

    def resize(self, n: int) -> None:
        pass

    def pick(self, prompt, loads) -> int:
        return int(np.argmin(loads))


class PrefixHash:
    """Hash of the prompt's first `prefix_tokens` tokens: modulo the replicas (`vnodes=None`), a ring of `vnodes`
    points a replica, or that ring with bounded loads (`load_factor`)."""

    def __init__(self, *, prefix_tokens: int, vnodes: int | None = None, load_factor: float | None = None):
        if load_factor is not None and vnodes is None:
            raise ValueError("bounded loads walk a ring: give vnodes too")
        self.prefix_tokens, self.vnodes, self.load_factor = prefix_tokens, vnodes, load_factor
        self.name = ("hash mod n" if vnodes is None else "consistent hash" if load_factor is None
                     else f"bounded loads c={load_factor:g}")
        self.ring = None

    def resize(self, n: int) -> None:
        self.ring = routing.build_ring(n, self.vnodes) if self.vnodes else None

    def pick(self, prompt, loads) -> int:
        h = routing.stable_hash(tuple(prompt[:self.prefix_tokens]))
        if self.ring is None:
            return h % len(loads)
        if self.load_factor is None:
            return routing.ring_owner(self.ring, h)
        return routing.bounded_owner(self.ring, h, loads, self.load_factor)


class CacheAware:
    """SGLang's cache-aware router: a radix tree per replica of the prompts sent there (never trimmed here),
    `routing.cache_aware_pick` on the loads, the match lengths and the trees' sizes."""

    def __init__(self, *, cache_threshold: float = routing.CACHE_THRESHOLD,
                 balance_abs_threshold: float = routing.BALANCE_ABS_THRESHOLD,
                 balance_rel_threshold: float = routing.BALANCE_REL_THRESHOLD, name: str = "cache-aware"):
        self.knobs = (cache_threshold, balance_abs_threshold, balance_rel_threshold)
        self.name = name
        self.trees: list[RadixCache] = []
        self.sizes: list[int] = []

    def resize(self, n: int) -> None:
        self.trees = self.trees[:n] + [RadixCache() for _ in range(n - len(self.trees))]
        self.sizes = self.sizes[:n] + [0] * (n - len(self.sizes))

    def pick(self, prompt, loads) -> int:
        key, loads = tuple(prompt), list(loads)
        matches = [len(t.match_prefix(key)[0]) for t in self.trees]
        w = routing.cache_aware_pick(loads, matches, len(key), self.sizes, *self.knobs)
        threshold, absolute, relative = self.knobs
        rate = max(matches) / len(key) if key else 0.0
        imbalanced = max(loads) - min(loads) > absolute and max(loads) > min(loads) * relative
        # why: which of the three rules chose, the best match rate, the match length of each replica
        self.last = ("shortest queue" if imbalanced else "cache match" if rate > threshold else "smallest tree",
                     rate, matches)
        self.sizes[w] += len(key) - self.trees[w].insert(key, key)
        return w


# ------------------------------------------------------------------------------------------------
# the run


@dataclass(frozen=True)
class ReplicaResult:
    """Per request (in the order given): the replica, its TTFT, its prompt tokens found in the cache. Per replica:
    the time-averaged outstanding requests and the requests served. `largest_step`: the step that held the most KV
    tokens (with the cache's other tokens resident), for `serving.check`."""

    router: str
    replica: np.ndarray
    ttft: np.ndarray
    cached_tokens: np.ndarray
    prompt_tokens: np.ndarray
    mean_outstanding: np.ndarray
    served: np.ndarray
    largest_step: ServingPoint

    @property
    def hit_rate(self) -> float:
        return float(self.cached_tokens.sum() / self.prompt_tokens.sum())

    @property
    def imbalance(self) -> float:
        return routing.load_imbalance(self.mean_outstanding.tolist())

    def ttft_percentile(self, q: float) -> float:
        return float(np.percentile(self.ttft, q))


def step_seconds(model: ModelSpec, gpu: GPUSpec, chunks, prefixes, contexts) -> float:
    """`costmodel.step_time` of prefill `chunks` over their cached `prefixes` and decodes at `contexts`, from the
    four totals it reduces them to (`costmodel.roofline_s`, the simulator's pricing), in Python ints."""
    pairs = sum(c * p + c * (c + 1) // 2 for c, p in zip(chunks, prefixes)) + sum(contexts) + len(contexts)
    seqs = len(chunks) + len(contexts)
    return costmodel.roofline_s(model, gpu, sum(chunks) + len(contexts), seqs, pairs,
                                sum(prefixes) + sum(contexts)) + costmodel.DEFAULT_STEP_OVERHEAD_S


class _Replica:
    def __init__(self):
        self.cache = RadixCache()
        self.waiting: deque[int] = deque()
        self.running: list[list[int]] = []     # [request, context tokens, tokens generated]
        self.reserved = 0                       # KV tokens the running sequences will hold at their end
        self.busy_until = math.inf
        self.prefilled: list[int] = []
        self.outstanding = 0
        self.area = 0.0
        self.since = 0.0


def simulate_replicas(requests, router, model: ModelSpec, gpu: GPUSpec, *, num_replicas: int,
                      kv_capacity_tokens: int | None = None, max_num_batched_tokens: int = 8192,
                      max_num_seqs: int = 256, resize: tuple[float, int] | None = None) -> ReplicaResult:
    """Run `requests` (sorted by arrival) through `router` over replicas of `model` on `gpu`."""
    cap = (costmodel.kv_capacity_tokens(model, gpu, max_num_batched_tokens=max_num_batched_tokens,
                                        max_num_seqs=max_num_seqs)
           if kv_capacity_tokens is None else kv_capacity_tokens)
    n_req = len(requests)
    for q in requests:
        if len(q[1]) + max_num_seqs > max_num_batched_tokens or len(q[1]) + len(q[2]) > cap:
            raise ValueError(f"a prompt of {len(q[1])} tokens (+{len(q[2])} out) does not fit one step beside "
                             f"{max_num_seqs} decodes or the KV cache: chunked prefill is not modelled here")
    reps = [_Replica() for _ in range(max(num_replicas, resize[1] if resize else 0))]
    visible = num_replicas
    router.resize(visible)
    where = np.full(n_req, -1)
    ttft, cached = np.zeros(n_req), np.zeros(n_req, dtype=np.int64)
    largest: tuple[int, ServingPoint] | None = None

    def account(r: _Replica, t: float, delta: int) -> None:
        r.area += r.outstanding * (t - r.since)
        r.since, r.outstanding = t, r.outstanding + delta

    def start(r: _Replica, t: float) -> None:
        nonlocal largest
        contexts = [s[1] for s in r.running]
        chunks, prefixes, r.prefilled = [], [], []
        room = max_num_batched_tokens - len(contexts)
        while r.waiting and len(r.running) + len(r.prefilled) < max_num_seqs:
            i = r.waiting[0]
            prompt = requests[i][1]
            need = len(prompt) + len(requests[i][2])
            if r.reserved + need > cap:
                break
            trim(r, need)                      # the cache gives up what this sequence will hold, then is matched
            hit = min(len(r.cache.match_prefix(prompt)[0]), len(prompt) - 1)
            if r.prefilled and sum(chunks) + len(prompt) - hit > room:
                break
            r.waiting.popleft()
            r.reserved += need
            cached[i] = hit
            chunks.append(len(prompt) - hit)
            prefixes.append(hit)
            r.prefilled.append(i)
        if not contexts and not chunks:
            r.busy_until = math.inf
            return
        r.busy_until = t + step_seconds(model, gpu, chunks, prefixes, contexts)
        kv = sum(contexts) + sum(chunks) + sum(prefixes)
        if largest is None or kv > largest[0]:
            resident = max(0, r.cache.evictable_size() - kv)
            largest = (kv, ServingPoint(model, gpu, decode_contexts=tuple(contexts), prefill_chunks=tuple(chunks),
                                        prefill_prefix=tuple(prefixes), resident_tokens=resident,
                                        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens))

    def trim(r: _Replica, more: int = 0) -> None:
        excess = r.cache.evictable_size() - (cap - r.reserved - more)
        if excess > 0:
            r.cache.evict(excess)

    def remember(r: _Replica, tokens: tuple) -> None:
        r.cache.insert(tokens, tokens)
        trim(r)

    def done(r: _Replica, i: int, t: float) -> None:
        r.reserved -= len(requests[i][1]) + len(requests[i][2])
        remember(r, requests[i][1] + requests[i][2])
        account(r, t, -1)

    def finish_step(r: _Replica, t: float) -> None:
        still = []
        for s in r.running:
            s[1] += 1
            s[2] += 1
            i = s[0]
            if s[2] >= len(requests[i][2]):
                done(r, i, t)
            else:
                still.append(s)
        for i in r.prefilled:
            ttft[i] = t - requests[i][0]
            remember(r, requests[i][1])
            if len(requests[i][2]) <= 1:
                done(r, i, t)
            else:
                still.append([i, len(requests[i][1]), 1])
        r.running, r.prefilled = still, []
        start(r, t)

    nxt = 0
    while True:
        ta = requests[nxt][0] if nxt < n_req else math.inf
        k = min(range(len(reps)), key=lambda j: reps[j].busy_until)
        te = reps[k].busy_until
        if ta == math.inf and te == math.inf:
            break
        if ta <= te:
            if resize and ta >= resize[0] and visible != resize[1]:
                visible = resize[1]
                router.resize(visible)
            w = router.pick(requests[nxt][1], [reps[j].outstanding for j in range(visible)])
            r = reps[w]
            where[nxt] = w
            account(r, ta, +1)
            r.waiting.append(nxt)
            if r.busy_until == math.inf:
                start(r, ta)
            nxt += 1
        else:
            finish_step(reps[k], te)
    end = max(r.since for r in reps)
    for r in reps:
        account(r, end, 0)
    span = end - requests[0][0] if n_req else 1.0
    return ReplicaResult(router=router.name, replica=where, ttft=ttft, cached_tokens=cached,
                         prompt_tokens=np.array([len(q[1]) for q in requests]),
                         mean_outstanding=np.array([r.area / span for r in reps[:max(visible, num_replicas)]]),
                         served=np.bincount(where, minlength=len(reps)), largest_step=largest[1])


def standard_routers(*, prefix_tokens: int = 256, vnodes: int = 64, load_factor: float = 1.25) -> list:
    """The chapter's six routers, fresh: round-robin, least outstanding, hash mod n, consistent hash, bounded
    loads, cache-aware (SGLang's launcher defaults)."""
    return [RoundRobin(), LeastOutstanding(), PrefixHash(prefix_tokens=prefix_tokens),
            PrefixHash(prefix_tokens=prefix_tokens, vnodes=vnodes),
            PrefixHash(prefix_tokens=prefix_tokens, vnodes=vnodes, load_factor=load_factor), CacheAware()]


def compare_routers(requests, routers, model: ModelSpec, gpu: GPUSpec, **knobs) -> dict[str, ReplicaResult]:
    """router name -> its run of `requests` (`simulate_replicas` with the same knobs for each)."""
    return {r.name: simulate_replicas(requests, r, model, gpu, **knobs) for r in routers}


def report(runs: dict[str, ReplicaResult]) -> str:
    """One line a router: hit rate, load imbalance (max / mean of the time-averaged outstanding requests), mean and
    p90 TTFT, and the requests each replica served."""
    lines = [f"{'router':24} {'hit rate':>8} {'imbalance':>9} {'mean TTFT':>11} {'p90 TTFT':>11}  requests per replica"]
    for name, r in runs.items():
        lines.append(f"{name:24} {r.hit_rate:8.1%} {r.imbalance:9.2f} {r.ttft.mean() * 1e3:8.1f} ms "
                     f"{r.ttft_percentile(90) * 1e3:8.1f} ms  {[int(x) for x in r.served]}")
    return "\n".join(lines)
