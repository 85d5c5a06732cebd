# %% fit_drafts
def fit_drafts(wanted, budget):
    spare = max(0, budget - len(wanted))
    out = []
    for want in wanted:
        take = want if want <= spare else spare
        spare -= take
        out.append(take)
    return out
# %% may_append
def may_append(self, seq):
    positions = len(seq) + len(seq.draft_token_ids)
    blocks_needed = math.ceil(positions / self.block_size)
    missing = blocks_needed - len(seq.block_table)
    for _ in range(missing):
        seq.block_table.append(self._allocate_block())
# %% rollback
def rollback(self, seq):
    keep = math.ceil(seq.num_cached_tokens / self.block_size)
    extra = seq.block_table[keep:]
    del seq.block_table[keep:]
    for block_id in reversed(extra):
        self.blocks[block_id].ref_count -= 1
        self._deallocate_block(block_id)
    return len(extra)
# %% expected_tokens_per_step
def expected_tokens_per_step(alpha, k):
    total = 0.0
    p = 1.0
    for _ in range(k + 1):
        total += p
        p *= alpha
    return total
# %% speculative_speedup
def speculative_speedup(model, gpu, batch, context_len, k, alpha, draft=None):
    decodes = [context_len] * batch
    baseline = costmodel.step_time(model, gpu, decode_context_lens=decodes)
    rows = (k + 1) * batch
    verify_s = costmodel.step_time(model, gpu, prefill_tokens=[k + 1] * batch, prefill_context=context_len,
                                   logit_rows=rows)
    draft_s = 0.0 if draft is None else k * costmodel.step_time(draft, gpu, decode_context_lens=decodes)
    gained = expected_tokens_per_step(alpha, k)
    return gained * baseline / (verify_s + draft_s)
# %% crossover_batch
def crossover_batch(model, gpu, context_len, k, alpha, draft=None, max_batch=4096):
    setup = dict(model=model, gpu=gpu, context_len=context_len, k=k, alpha=alpha, draft=draft)
    batch = 1
    while batch <= max_batch:
        worth_it = speculative_speedup(batch=batch, **setup) > 1
        if not worth_it:
            return batch
        batch += 1
    return None
