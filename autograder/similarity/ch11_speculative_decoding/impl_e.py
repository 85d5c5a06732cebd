# %% fit_drafts
def fit_drafts(wanted, budget):
    kept = [0] * len(wanted)
    pool = budget - len(wanted)
    i = 0
    while pool > 0 and i < len(wanted):
        kept[i] = min(wanted[i], pool)
        pool -= kept[i]
        i += 1
    return kept
# %% may_append
def may_append(self, seq):
    size = self.block_size
    # the verification step writes KV for positions num_cached .. len(seq) + drafts - 1
    top = len(seq) + len(seq.draft_token_ids)
    want = (top + size - 1) // size
    new_blocks = [self._allocate_block() for _ in range(max(0, want - len(seq.block_table)))]
    seq.block_table += new_blocks
# %% rollback
def rollback(self, seq):
    def release(block_id):
        b = self.blocks[block_id]
        b.ref_count -= 1
        self._deallocate_block(b.block_id)

    n_keep = seq.num_cached_tokens // self.block_size + (1 if seq.num_cached_tokens % self.block_size else 0)
    dropped = 0
    while seq.block_table[n_keep:]:
        release(seq.block_table.pop())
        dropped += 1
    return dropped
# %% expected_tokens_per_step
def expected_tokens_per_step(alpha, k):
    import math as _m
    return float(k + 1) if alpha == 1 else _m.fsum(alpha ** j for j in range(k + 1))
# %% speculative_speedup
def speculative_speedup(model, gpu, batch, context_len, k, alpha, draft=None):
    ctx = [context_len] * batch

    def time_of(m, **kw):
        return costmodel.step_time(m, gpu, **kw)

    numerator = expected_tokens_per_step(alpha, k) * time_of(model, decode_context_lens=ctx)
    denominator = time_of(model, prefill_tokens=[k + 1] * batch, prefill_context=context_len,
                          logit_rows=(k + 1) * batch)
    if draft:
        denominator += k * time_of(draft, decode_context_lens=ctx)
    return numerator / denominator
# %% crossover_batch
def crossover_batch(model, gpu, context_len, k, alpha, draft=None, max_batch=4096):
    def no_gain(b):
        return speculative_speedup(model, gpu, b, context_len, k, alpha, draft) <= 1

    candidates = list(filter(no_gain, range(1, max_batch + 1))) if max_batch < 64 else None
    if candidates is not None:
        return candidates[0] if candidates else None
    for b in range(1, max_batch + 1):
        if no_gain(b):
            return b
    return None
