# %% ring_owner
def ring_owner(ring, key_hash):
    idx = bisect.bisect_left(ring, key_hash, key=lambda entry: entry[0])
    if idx == len(ring):
        idx = 0          # nothing at or after the key: wrap around
    return ring[idx][1]
# %% bounded_owner
def bounded_owner(ring, key_hash, loads, load_factor):
    average = (sum(loads) + 1) / len(loads)
    limit = math.ceil(average * load_factor)
    idx = bisect.bisect_left(ring, key_hash, key=lambda entry: entry[0])
    clockwise = ring[idx:] + ring[:idx]
    for _, w in clockwise:
        if loads[w] < limit:
            return w
    raise RuntimeError("every worker is at its cap")
# %% cache_aware_pick
def cache_aware_pick(loads, match_lens, text_len, tree_sizes, cache_threshold=0.3, balance_abs_threshold=64,
                     balance_rel_threshold=1.5):
    workers = range(len(loads))
    least = min(workers, key=lambda w: loads[w])
    most = max(workers, key=lambda w: loads[w])
    imbalanced = (loads[most] - loads[least] > balance_abs_threshold
                  and loads[most] > loads[least] * balance_rel_threshold)
    if imbalanced:
        return least
    matcher = max(workers, key=lambda w: match_lens[w])
    ratio = 0.0 if text_len == 0 else match_lens[matcher] / text_len
    if ratio > cache_threshold:
        return matcher
    return min(workers, key=lambda w: tree_sizes[w])
# %% keys_kept
def keys_kept(n_before, n_after, scheme):
    if scheme == "modulo":
        period = math.lcm(n_before, n_after)
        same = sum(1 for h in range(period) if h % n_before == h % n_after)
        return same / period
    elif scheme == "consistent":
        if n_after >= n_before:
            return n_before / n_after        # the newcomers take (m - n) / m of the circle
        return n_after / n_before            # only the removed workers' keys move
    else:
        raise ValueError("unknown hashing scheme: " + repr(scheme))
