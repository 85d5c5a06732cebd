# %% ring_owner
def ring_owner(ring, key_hash):
    return next((owner for spot, owner in ring if spot >= key_hash), ring[0][1])
# %% bounded_owner
def bounded_owner(ring, key_hash, loads, load_factor):
    import itertools

    total = len(ring)
    cap = -(-load_factor * (sum(loads) + 1) / len(loads) // 1)     # ceiling
    first = next((k for k, (spot, _) in enumerate(ring) if spot >= key_hash), total) % total
    walk = itertools.islice(itertools.cycle(ring), first, first + total)
    return next((owner for _, owner in walk if loads[owner] < cap), None)
# %% cache_aware_pick
def cache_aware_pick(loads, match_lens, text_len, tree_sizes, cache_threshold=0.3, balance_abs_threshold=64,
                     balance_rel_threshold=1.5):
    load_arr = np.asarray(loads)
    heavy, light = load_arr.max(), load_arr.min()
    if heavy - light > balance_abs_threshold:
        if heavy > light * balance_rel_threshold:
            return int(np.argmin(load_arr))
    match_arr = np.asarray(match_lens)
    hit = match_arr.max() / text_len if text_len else 0.0
    if hit > cache_threshold:
        return int(np.argmax(match_arr))
    return int(np.argmin(np.asarray(tree_sizes)))
# %% keys_kept
def keys_kept(n_before, n_after, scheme):
    if scheme == "consistent":
        # growing: the newcomers' share of the circle moves; shrinking: the removed workers' keys move
        moved = abs(n_after - n_before) / max(n_before, n_after)
        return 1.0 - moved
    if scheme == "modulo":
        # h mod n == h mod m holds for min(n, m) residues in every block of lcm(n, m) consecutive hashes
        block = math.lcm(n_before, n_after)
        return min(n_before, n_after) / block
    raise ValueError(f"scheme {scheme!r} is neither 'modulo' nor 'consistent'")
