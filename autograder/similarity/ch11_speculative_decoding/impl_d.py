# %% fit_drafts
def fit_drafts(wanted, budget):
    def share(rest, left):
        if not rest:
            return []
        first = min(rest[0], left)
        return [first] + share(rest[1:], left - first)

    if len(wanted) > 900:
        result, left = [], max(0, budget - len(wanted))
        for w in wanted:
            result.append(min(w, left))
            left -= result[-1]
        return result
    return share(list(wanted), max(0, budget - len(wanted)))
# %% may_append
def may_append(self, seq):
    drafts = len(seq.draft_token_ids)
    tokens_with_kv_soon = len(seq) + drafts
    capacity = len(seq.block_table) * self.block_size
    while capacity < tokens_with_kv_soon:
        seq.block_table.append(self._allocate_block())
        capacity += self.block_size
# %% rollback
def rollback(self, seq):
    needed = math.ceil(seq.num_cached_tokens / self.block_size)
    surplus = len(seq.block_table) - needed
    if surplus <= 0:
        return 0
    for pos in range(len(seq.block_table) - 1, needed - 1, -1):
        block = self.blocks[seq.block_table[pos]]
        block.ref_count -= 1
        self._deallocate_block(seq.block_table[pos])
    seq.block_table[needed:] = []
    return surplus
# %% expected_tokens_per_step
def expected_tokens_per_step(alpha, k):
    if alpha == 1:
        return k + 1.0
    # geometric series 1 + alpha + ... + alpha**k
    return (alpha ** (k + 1) - 1) / (alpha - 1)
# %% speculative_speedup
def speculative_speedup(model, gpu, batch, context_len, k, alpha, draft=None):
    verify_kwargs = dict(prefill_tokens=[k + 1] * batch, prefill_context=context_len, logit_rows=batch * (k + 1))
    decode_kwargs = dict(decode_context_lens=[context_len] * batch)
    t_verify = costmodel.step_time(model, gpu, **verify_kwargs)
    t_draft = k * costmodel.step_time(draft, gpu, **decode_kwargs) if draft is not None else 0
    t_plain = costmodel.step_time(model, gpu, **decode_kwargs)
    speedup = t_plain / (t_verify + t_draft)
    return speedup * expected_tokens_per_step(alpha, k)
# %% crossover_batch
def crossover_batch(model, gpu, context_len, k, alpha, draft=None, max_batch=4096):
    # double until the speedup is gone, then look only at the last doubling's range
    prev, cur = 0, 1
    while cur <= max_batch and speculative_speedup(model, gpu, cur, context_len, k, alpha, draft) > 1:
        prev, cur = cur, cur * 2
    for n in range(prev + 1, min(cur, max_batch) + 1):
        if speculative_speedup(model, gpu, n, context_len, k, alpha, draft) <= 1:
            return n
    return None
