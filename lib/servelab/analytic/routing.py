"""Routing requests across replicas: hash rings, bounded loads, SGLang's cache-aware rule, and what a resize keeps.

Workers are numbered 0..n-1; a load is a worker's outstanding requests as the router counts them. A ring is a
sorted list of ``(point, worker)`` pairs on [0, 2**64), ``vnodes`` points a worker (:func:`build_ring`); a key is
hashed onto the same circle (:func:`stable_hash`) and belongs to the first point clockwise at or after it.

- :func:`ring_owner`: plain consistent hashing.
- :func:`bounded_owner`: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018): a worker
  takes a key only while its load is below ceil(load_factor x the average load, the key counted).
- :func:`cache_aware_pick`: the rule of SGLang's router (sgl-router ``policies/cache_aware.rs``): shortest queue when
  the loads are imbalanced by both thresholds, else the best prefix match above ``cache_threshold``, else the
  smallest tree. Defaults are the launcher's (``router_args.py`` at commit e46dcd87).
- :func:`keys_kept`: the fraction of keys (so of cached prefixes) that stay on their worker when n workers become m.
- :func:`shared_prefix_hit_rate`, :func:`load_imbalance`: the closed forms the replica simulator is held to.
- Workloads: :func:`shared_prompt_workload`, :func:`multi_turn_workload` (token ids; a token stands for a character
  of the text SGLang's router matches).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random

__all__ = ["BALANCE_ABS_THRESHOLD", "BALANCE_REL_THRESHOLD", "CACHE_THRESHOLD", "Request", "bounded_owner",
           "build_ring", "cache_aware_pick", "keys_kept", "load_imbalance", "multi_turn_workload", "ring_owner",
           "shared_prefix_hit_rate", "shared_prompt_workload", "stable_hash"]

CACHE_THRESHOLD = 0.3          # sglang_router launcher defaults, router_args.py at e46dcd87
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
RING = 2 ** 64


def stable_hash(x) -> int:
    """A 64-bit hash of ``repr(x)`` (a tuple of token ids, a worker's point name) that is the same in every process.

    >>> stable_hash((1, 2, 3)) == stable_hash((1, 2, 3)), 0 <= stable_hash("w0#1") < 2 ** 64
    (True, True)
    """
    return int.from_bytes(hashlib.blake2b(repr(x).encode(), digest_size=8).digest(), "big")


def build_ring(num_replicas: int, vnodes: int) -> list[tuple[int, int]]:
    """The ring: ``vnodes`` points for each worker 0..num_replicas-1 at ``stable_hash(f"w{worker}#{v}")``, sorted."""
    if num_replicas < 1 or vnodes < 1:
        raise ValueError("num_replicas >= 1 and vnodes >= 1")
    return sorted((stable_hash(f"w{w}#{v}"), w) for w in range(num_replicas) for v in range(vnodes))


def _start(ring, key_hash: int) -> int:
    return bisect.bisect_left([p for p, _ in ring], key_hash)


def ring_owner(ring, key_hash: int) -> int:
    """The worker of the first point at or after ``key_hash`` clockwise; past the last point, the first one.

    >>> ring_owner([(10, 0), (20, 1), (30, 2)], 15), ring_owner([(10, 0), (20, 1), (30, 2)], 20)
    (1, 1)
    >>> ring_owner([(10, 0), (20, 1), (30, 2)], 31)    # wraps around
    0
    """
    if not ring:
        raise ValueError("an empty ring has no owner")
    return ring[_start(ring, key_hash) % len(ring)][1]


def bounded_owner(ring, key_hash: int, loads, load_factor: float) -> int:
    """Consistent hashing with bounded loads: walk clockwise from ``key_hash`` to the first worker whose load is
    below cap = ceil(load_factor x (sum(loads) + 1) / len(loads)), the average counting the key being placed.

    With load_factor >= 1 some worker is always below the cap. Example: loads [3, 0, 0], load_factor 1.25: cap =
    ceil(1.25 x 4 / 3) = 2, so a key whose first point is worker 0's walks on to the next worker.

    >>> bounded_owner([(10, 0), (20, 1), (30, 2)], 5, [3, 0, 0], 1.25), bounded_owner([(10, 0)], 5, [3], 1.0)
    (1, 0)
    """
    if not ring:
        raise ValueError("an empty ring has no owner")
    if load_factor < 1:
        raise ValueError(f"load_factor must be >= 1 (c = 1 + epsilon), got {load_factor}")
    cap = math.ceil(load_factor * (sum(loads) + 1) / len(loads))
    i = _start(ring, key_hash)
    for k in range(len(ring)):
        w = ring[(i + k) % len(ring)][1]
        if loads[w] < cap:
            return w
    raise ValueError("no worker below the cap: every worker must have a point on the ring")


def cache_aware_pick(loads, match_lens, text_len: int, tree_sizes, cache_threshold: float = CACHE_THRESHOLD,
                     balance_abs_threshold: float = BALANCE_ABS_THRESHOLD,
                     balance_rel_threshold: float = BALANCE_REL_THRESHOLD) -> int:
    """SGLang's cache-aware choice of a worker for one request.

    loads[w]: outstanding requests of worker w; match_lens[w]: how many leading tokens of the request the router's
    tree for w holds; text_len: the request's length; tree_sizes[w]: tokens in w's tree.
    1. Imbalanced when max - min load > balance_abs_threshold AND max > min x balance_rel_threshold: the
       least-loaded worker.
    2. Else, if the best match rate, max(match_lens) / text_len (0 for an empty request), is above cache_threshold:
       the worker with that best match.
    3. Else the worker with the smallest tree. Ties go to the lowest worker number.

    >>> cache_aware_pick([100, 10], [50, 0], 100, [500, 900])     # 90 > 64 and 100 > 15: imbalanced
    1
    >>> cache_aware_pick([20, 10], [50, 0], 100, [500, 900]), cache_aware_pick([20, 10], [20, 0], 100, [500, 900])
    (0, 0)
    """
    loads = list(loads)
    hi, lo = max(loads), min(loads)
    if hi - lo > balance_abs_threshold and hi > lo * balance_rel_threshold:
        return loads.index(lo)
    best = max(match_lens)
    rate = best / text_len if text_len else 0.0
    if rate > cache_threshold:
        return list(match_lens).index(best)
    return list(tree_sizes).index(min(tree_sizes))


def keys_kept(n_before: int, n_after: int, scheme: str) -> float:
    """Fraction of keys that stay on the same worker when the workers go from n_before to n_after.

    "modulo" (worker = hash mod n): a key stays iff h mod n == h mod m, true for min(n, m) residues out of every
    lcm(n, m). "consistent" (a ring with evenly spread points): the workers added take 1 - n/m of the circle;
    the keys of removed workers move: min(n, m) / max(n, m) stay.

    >>> keys_kept(4, 5, "modulo"), keys_kept(4, 5, "consistent")
    (0.2, 0.8)
    """
    if n_before < 1 or n_after < 1:
        raise ValueError("worker counts must be >= 1")
    lo, hi = min(n_before, n_after), max(n_before, n_after)
    if scheme == "modulo":
        return lo / math.lcm(n_before, n_after)
    if scheme == "consistent":
        return lo / hi
    raise ValueError(f"scheme must be 'modulo' or 'consistent', got {scheme!r}")


def shared_prefix_hit_rate(num_requests: int, num_groups: int, replicas_per_group: int, system_len: int,
                           user_len: int) -> float:
    """Prefix-cache hit rate (cached prompt tokens / prompt tokens) of requests = one of ``num_groups`` system
    prompts of ``system_len`` tokens + ``user_len`` tokens of their own, when each group's requests are spread over
    ``replicas_per_group`` replicas, every one of which has served the group before the rest arrive and never
    evicts: each group misses once per replica it reaches, and every other request hits its system prompt.

    >>> round(shared_prefix_hit_rate(400, 4, 1, 1000, 200), 4), round(shared_prefix_hit_rate(400, 4, 4, 1000, 200), 4)
    (0.825, 0.8)
    """
    misses = num_groups * replicas_per_group
    if misses > num_requests:
        raise ValueError("each group must have at least one request on each of its replicas")
    return system_len * (num_requests - misses) / (num_requests * (system_len + user_len))


def load_imbalance(loads) -> float:
    """max / mean of the workers' loads (1.0 is perfect balance; 0 loads everywhere: 1.0)."""
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


# ------------------------------------------------------------------------------------------------
# workloads (token ids; every generator takes a seed and its own random.Random)


class Request(tuple):
    """(arrival_s, prompt, output) as a tuple: prompt and output are tuples of token ids."""

    __slots__ = ()

    def __new__(cls, arrival_s: float, prompt: tuple, output: tuple):
        return super().__new__(cls, (arrival_s, prompt, output))

    arrival_s = property(lambda self: self[0])
    prompt = property(lambda self: self[1])
    output = property(lambda self: self[2])


def _tokens(rng: random.Random, n: int) -> tuple:
    return tuple(rng.randrange(1, 32000) for _ in range(n))


def shared_prompt_workload(num_requests: int, *, num_groups: int, system_len: int, user_len: int, output_len: int,
                           rate: float, seed: int, hot: float | None = None) -> list[Request]:
    """Requests = one of ``num_groups`` system prompts (``system_len`` tokens) + ``user_len`` tokens of their own,
    Poisson arrivals at ``rate`` a second. A group is drawn uniformly, or group 0 with probability ``hot``."""
    rng = random.Random(seed)
    systems = [_tokens(rng, system_len) for _ in range(num_groups)]
    out, t = [], 0.0
    for _ in range(num_requests):
        t += rng.expovariate(rate)
        g = 0 if hot is not None and rng.random() < hot else rng.randrange(num_groups)
        out.append(Request(t, systems[g] + _tokens(rng, user_len), _tokens(rng, output_len)))
    return out


def multi_turn_workload(num_conversations: int, *, turns: int, first_len: int, user_len: int, output_len: int,
                        think_s: float, rate: float, seed: int) -> list[Request]:
    """Conversations starting as a Poisson stream at ``rate`` a second; turn k's prompt is turn k-1's prompt, its
    answer and ``user_len`` new tokens (the first: ``first_len`` tokens); the next turn arrives ``think_s`` after
    the previous one arrived. Sorted by arrival."""
    rng = random.Random(seed)
    out, t0 = [], 0.0
    for _ in range(num_conversations):
        t0 += rng.expovariate(rate)
        prompt = _tokens(rng, first_len)
        for k in range(turns):
            answer = _tokens(rng, output_len)
            out.append(Request(t0 + k * think_s, prompt, answer))
            prompt = prompt + answer + _tokens(rng, user_len)
    return sorted(out, key=lambda r: r[0])
