# %% fit_drafts
def fit_drafts(wanted, budget):
    import numpy as np
    asks = np.asarray(wanted, dtype=np.int64)
    room = max(0, budget - asks.size)
    ends = np.minimum(np.cumsum(asks), room)
    starts = np.concatenate(([0], ends[:-1]))
    return [int(x) for x in ends - starts]
# %% may_append
def may_append(self, seq):
    """One block per block_size positions, counting the last token's and every draft's."""
    span = len(seq) + len(seq.draft_token_ids)
    have = len(seq.block_table)
    need = span // self.block_size + (span % self.block_size > 0)
    seq.block_table.extend(self._allocate_block() for _ in range(have, need))
# %% rollback
def rollback(self, seq):
    table = seq.block_table
    limit = -(-seq.num_cached_tokens // self.block_size)
    count = 0
    while len(table) > limit:
        victim = table[-1]
        del table[-1]
        self.blocks[victim].ref_count -= 1
        self._deallocate_block(victim)
        count += 1
    return count
# %% expected_tokens_per_step
def expected_tokens_per_step(alpha, k):
    return float(sum(alpha ** i for i in range(k + 1)))
# %% speculative_speedup
def speculative_speedup(model, gpu, batch, context_len, k, alpha, draft=None):
    """Tokens per second with speculation over tokens per second without."""
    st = costmodel.step_time
    lens = [context_len] * batch
    rate_plain = batch / st(model, gpu, decode_context_lens=lens)
    spec_step = st(model, gpu, prefill_tokens=[k + 1] * batch, prefill_context=context_len,
                   logit_rows=batch * (k + 1))
    if draft is not None:
        for _ in range(k):
            spec_step += st(draft, gpu, decode_context_lens=lens)
    rate_spec = batch * expected_tokens_per_step(alpha, k) / spec_step
    return rate_spec / rate_plain
# %% crossover_batch
def crossover_batch(model, gpu, context_len, k, alpha, draft=None, max_batch=4096):
    found = None
    for size in range(max_batch, 0, -1):       # scan down; the last hit seen is the smallest
        if speculative_speedup(model, gpu, size, context_len, k, alpha, draft) <= 1:
            found = size
    return found
