# %% ring_owner
def ring_owner(ring, key_hash):
    later = [(point, worker) for point, worker in ring if point >= key_hash]
    pool = later if later else list(ring)
    return min(pool, key=lambda pw: pw[0])[1]
# %% bounded_owner
def bounded_owner(ring, key_hash, loads, load_factor):
    def capacity():
        outstanding = sum(loads) + 1          # the request being placed counts
        return math.ceil(load_factor * outstanding / len(loads))

    def order_from(start):
        size = len(ring)
        return sorted(range(size), key=lambda j: (j - start) % size)

    points = [entry[0] for entry in ring]
    begin = bisect.bisect_left(points, key_hash)
    c = capacity()
    for j in order_from(begin % len(ring)):
        owner = ring[j][1]
        if loads[owner] + 1 <= c:
            return owner
# %% cache_aware_pick
def cache_aware_pick(loads, match_lens, text_len, tree_sizes, cache_threshold=0.3, balance_abs_threshold=64,
                     balance_rel_threshold=1.5):
    lo_i = hi_i = best_i = small_i = 0
    for i in range(len(loads)):
        if loads[i] < loads[lo_i]:
            lo_i = i
        if loads[i] > loads[hi_i]:
            hi_i = i
        if match_lens[i] > match_lens[best_i]:
            best_i = i
        if tree_sizes[i] < tree_sizes[small_i]:
            small_i = i
    lo_load, hi_load = loads[lo_i], loads[hi_i]
    if (hi_load - lo_load) > balance_abs_threshold and hi_load > lo_load * balance_rel_threshold:
        return lo_i
    match_rate = match_lens[best_i] / text_len if text_len != 0 else 0.0
    return best_i if match_rate > cache_threshold else small_i
# %% keys_kept
def keys_kept(n_before, n_after, scheme):
    from fractions import Fraction

    match scheme:
        case "modulo":
            kept = Fraction(min(n_before, n_after), math.lcm(n_before, n_after))
        case "consistent":
            kept = Fraction(n_before, n_after) if n_before < n_after else Fraction(n_after, n_before)
        case _:
            raise ValueError(f"unknown scheme {scheme!r}")
    return float(kept)
