# %% fit_drafts
def fit_drafts(wanted, budget):
    from itertools import accumulate
    room = max(budget - len(wanted), 0)
    # running total of drafts asked for, clipped at the room available
    clipped = [min(c, room) for c in accumulate(wanted)]
    return [hi - lo for lo, hi in zip([0] + clipped[:-1], clipped)]
# %% may_append
def may_append(self, seq):
    last_position = len(seq) + len(seq.draft_token_ids) - 1
    last_block_index = last_position // self.block_size
    while last_block_index >= len(seq.block_table):
        new_id = self._allocate_block()
        seq.block_table.append(new_id)
# %% rollback
def rollback(self, seq):
    bs = self.block_size
    kept_blocks = (seq.num_cached_tokens + bs - 1) // bs
    freed = 0
    for _ in range(len(seq.block_table) - kept_blocks):
        bid = seq.block_table.pop()
        blk = self.blocks[bid]
        blk.ref_count = blk.ref_count - 1
        self._deallocate_block(bid)
        freed += 1
    return freed
# %% expected_tokens_per_step
def expected_tokens_per_step(alpha, k):
    # Horner: 1 + a(1 + a(1 + ...))
    acc = 1.0
    for _ in range(k):
        acc = 1.0 + alpha * acc
    return acc
# %% speculative_speedup
def speculative_speedup(model, gpu, batch, context_len, k, alpha, draft=None):
    def plain_step(m):
        return costmodel.step_time(m, gpu, decode_context_lens=[context_len for _ in range(batch)])

    window = k + 1
    verify = costmodel.step_time(model, gpu, prefill_tokens=[window] * batch, prefill_context=context_len,
                                 logit_rows=window * batch)
    cost = verify + (k * plain_step(draft) if draft else 0.0)
    return plain_step(model) * expected_tokens_per_step(alpha, k) / cost
# %% crossover_batch
def crossover_batch(model, gpu, context_len, k, alpha, draft=None, max_batch=4096):
    hits = (n for n in range(1, max_batch + 1)
            if speculative_speedup(model, gpu, n, context_len, k, alpha, draft) <= 1)
    return next(hits, None)
