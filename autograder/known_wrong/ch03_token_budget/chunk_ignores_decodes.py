"""The chunk bound ignored the decodes' share: the chunk is sized as if it had the step to itself."""

REPLACE = {
    "max_chunk": '''
def max_chunk(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=DEFAULT_STEP_OVERHEAD_S):
    def fits(c):
        # the chunk's own step time against the target
        return costmodel.step_time(model, gpu, prefill_tokens=c, prefill_context=prefix,
                                   overhead_s=overhead_s) <= tpot_target_s

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
''',
}
FAILS = ["test_max_chunk"]
MESSAGE = "Pitfall: the chunk bound ignored the decodes' share"
