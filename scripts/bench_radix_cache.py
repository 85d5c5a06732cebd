"""Operations per second of the reference RadixCache on a long seeded random mix of operations.

    python scripts/bench_radix_cache.py                   # 200k operations, page sizes 1 and 16
    python scripts/bench_radix_cache.py --ops 50000 --seed 1

The workload imitates a server's traffic: a pool of requests built from a few shared "system prompts" plus
private suffixes, drawn with a skew so some prefixes are hot. Each operation is one of
  match  (45%)  match_prefix of a pooled request,
  insert (30%)  insert of a pooled request with fresh KV indices,
  lock   (10%)  match_prefix + inc_lock_ref (a request is admitted),
  unlock (10%)  dec_lock_ref of a random held node (a request finishes),
  evict  (5%)   evict(n) with n up to 128 tokens,
and whenever the tree holds more than --capacity tokens an extra evict brings it back under (as the scheduler
evicts when the allocator runs short). The operations are drawn before the clock starts; only the cache calls
are timed. Nothing asserts on time: the script prints one line per page size.
"""

from __future__ import annotations

import argparse
import random
import time

from servelab.schedulers.radix_cache import RadixCache

OPS = ("match", "insert", "lock", "unlock", "evict")
WEIGHTS = (45, 30, 10, 10, 5)


def make_requests(rng: random.Random, n_requests: int = 4000, n_prompts: int = 40) -> list[tuple[int, ...]]:
    """Token sequences: a shared prompt (16-256 tokens), sometimes a shared few-shot block, then a private suffix."""
    prompts = [tuple(rng.randrange(32000) for _ in range(rng.randrange(16, 257))) for _ in range(n_prompts)]
    shots = [tuple(rng.randrange(32000) for _ in range(rng.randrange(8, 65))) for _ in range(n_prompts)]
    requests = []
    for _ in range(n_requests):
        key = prompts[min(int(rng.expovariate(0.15)), n_prompts - 1)]   # skewed: low prompt ids are hot
        if rng.random() < 0.5:
            key += shots[rng.randrange(n_prompts)]
        key += tuple(rng.randrange(32000) for _ in range(rng.randrange(0, 129)))
        requests.append(key)
    return requests


def run(page_size: int, n_ops: int, seed: int, capacity: int) -> dict:
    rng = random.Random(seed)
    requests = make_requests(rng)
    ops = [(op, rng.randrange(len(requests)), rng.randrange(1, 129))
           for op in rng.choices(OPS, weights=WEIGHTS, k=n_ops)]
    unlock_picks = [rng.random() for _ in range(n_ops)]

    cache = RadixCache(page_size=page_size)
    held = []
    next_kv = 0
    matched = asked = 0
    start = time.perf_counter()
    for i, (op, r, n) in enumerate(ops):
        key = requests[r]
        if op == "match" or op == "lock":
            indices, node = cache.match_prefix(key)
            matched += len(indices)
            asked += len(key)
            if op == "lock":
                cache.inc_lock_ref(node)
                held.append(node)
        elif op == "insert":
            cache.insert(key, range(next_kv, next_kv + len(key)))
            next_kv += len(key)
        elif op == "unlock":
            if held:
                j = int(unlock_picks[i] * len(held))
                held[j], held[-1] = held[-1], held[j]
                cache.dec_lock_ref(held.pop())
        else:
            cache.evict(n)
        over = cache.evictable_size() + cache.protected_size() - capacity
        if over > 0:
            cache.evict(over)
    seconds = time.perf_counter() - start
    return {"page_size": page_size, "ops": n_ops, "seconds": seconds, "ops_per_s": n_ops / seconds,
            "hit_rate": matched / max(asked, 1), "tokens": cache.total_size(), "locked": len(held)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=100_000, help="tokens the tree may hold before evicting")
    parser.add_argument("--page-sizes", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    for page_size in args.page_sizes:
        r = run(page_size, args.ops, args.seed, args.capacity)
        print(f"page_size={r['page_size']:>3}  {r['ops']} ops in {r['seconds']:.2f} s  "
              f"= {r['ops_per_s']:,.0f} ops/s  (token hit rate {r['hit_rate']:.1%}, "
              f"{r['tokens']} tokens cached, {r['locked']} locks held at the end)")


if __name__ == "__main__":
    main()
