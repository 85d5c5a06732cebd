# %% ring_owner
def ring_owner(ring, key_hash):
    # walk the points in order; the first one not before the key owns it
    for point, worker in ring:
        if point >= key_hash:
            return worker
    first_point, first_worker = ring[0]
    return first_worker
# %% bounded_owner
def bounded_owner(ring, key_hash, loads, load_factor):
    n_workers = len(loads)
    cap = math.ceil(load_factor * (sum(loads) + 1) / n_workers)
    start = 0
    while start < len(ring) and ring[start][0] < key_hash:
        start += 1
    steps = 0
    pos = start % len(ring)
    while steps < len(ring):
        candidate = ring[pos][1]
        if loads[candidate] < cap:
            return candidate
        pos = (pos + 1) % len(ring)
        steps += 1
    return None
# %% cache_aware_pick
def cache_aware_pick(loads, match_lens, text_len, tree_sizes, cache_threshold=0.3, balance_abs_threshold=64,
                     balance_rel_threshold=1.5):
    def first_index(values, better):
        pick = 0
        for i in range(1, len(values)):
            if better(values[i], values[pick]):
                pick = i
        return pick

    idle = first_index(loads, lambda a, b: a < b)
    busy = first_index(loads, lambda a, b: a > b)
    gap = loads[busy] - loads[idle]
    if gap > balance_abs_threshold and loads[busy] > balance_rel_threshold * loads[idle]:
        return idle
    best = first_index(match_lens, lambda a, b: a > b)
    if text_len > 0 and match_lens[best] / text_len > cache_threshold:
        return best
    return first_index(tree_sizes, lambda a, b: a < b)
# %% keys_kept
def keys_kept(n_before, n_after, scheme):
    if scheme not in ("modulo", "consistent"):
        raise ValueError(f"scheme must be 'modulo' or 'consistent', not {scheme!r}")
    smaller, larger = sorted((n_before, n_after))
    if scheme == "consistent":
        return smaller / larger
    period = n_before * n_after // math.gcd(n_before, n_after)
    return smaller / period
