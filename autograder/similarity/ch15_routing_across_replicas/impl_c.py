# %% ring_owner
def ring_owner(ring, key_hash):
    lo, hi = 0, len(ring)
    while lo < hi:                     # first index whose point is >= key_hash
        mid = (lo + hi) // 2
        if ring[mid][0] < key_hash:
            lo = mid + 1
        else:
            hi = mid
    return ring[lo if lo < len(ring) else 0][1]
# %% bounded_owner
def bounded_owner(ring, key_hash, loads, load_factor):
    m = sum(loads)
    n = len(loads)
    # a whole number of requests is below ceil(x) exactly when it is below x
    threshold = load_factor * (m + 1) / n
    ahead = [w for p, w in ring if p >= key_hash]
    behind = [w for p, w in ring if p < key_hash]
    seen = set()
    for w in ahead + behind:
        if w in seen:
            continue
        seen.add(w)
        if loads[w] < threshold:
            return w
    return None
# %% cache_aware_pick
def cache_aware_pick(loads, match_lens, text_len, tree_sizes, cache_threshold=0.3, balance_abs_threshold=64,
                     balance_rel_threshold=1.5):
    def argmin(xs):
        return min((x, i) for i, x in enumerate(xs))[1]

    def argmax(xs):
        return min((-x, i) for i, x in enumerate(xs))[1]

    top, bottom = max(loads), min(loads)
    if top > bottom + balance_abs_threshold and top > bottom * balance_rel_threshold:
        return argmin(loads)
    if text_len:
        w = argmax(match_lens)
        if match_lens[w] / text_len > cache_threshold:
            return w
    return argmin(tree_sizes)
# %% keys_kept
def keys_kept(n_before, n_after, scheme):
    rules = {
        "modulo": lambda n, m: min(n, m) * math.gcd(n, m) / (n * m),
        "consistent": lambda n, m: min(n, m) / max(n, m),
    }
    try:
        rule = rules[scheme]
    except KeyError:
        raise ValueError(f"no such scheme: {scheme!r}") from None
    return rule(n_before, n_after)
