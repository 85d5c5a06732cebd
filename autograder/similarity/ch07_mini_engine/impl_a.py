# %% prepare_prefill
def prepare_prefill(seqs, block_size):
    def slot_of(seq, p):
        return seq.block_table[p // block_size] * block_size + p % block_size

    tokens, where, slots, ctx_lens, last = [], [], [], [], []
    q_bounds, k_bounds = [0], [0]
    for seq in seqs:
        lo = seq.num_cached_tokens
        hi = lo + seq.num_scheduled_tokens
        for p in range(lo, hi):
            tokens.append(seq.token_ids[p])
            where.append(p)
            slots.append(slot_of(seq, p))
        q_bounds.append(len(tokens))
        k_bounds.append(k_bounds[-1] + hi)
        ctx_lens.append(hi)
        last.append(len(tokens) - 1)
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return Batch(input_ids=as_long(tokens), positions=as_long(where), slot_mapping=as_long(slots),
                 cu_seqlens_q=as_long(q_bounds), cu_seqlens_k=as_long(k_bounds), context_lens=as_long(ctx_lens),
                 block_tables=block_tables(seqs), is_prefill=True, last_rows=as_long(last))
# %% prepare_decode
def prepare_decode(seqs, block_size):
    n = len(seqs)
    ids = torch.empty(n, dtype=torch.long)
    pos = torch.empty(n, dtype=torch.long)
    slots = torch.empty(n, dtype=torch.long)
    for i, seq in enumerate(seqs):
        p = len(seq) - 1
        ids[i] = seq.last_token
        pos[i] = p
        slots[i] = seq.block_table[p // block_size] * block_size + p % block_size
    ctx = pos + 1
    cu_k = torch.zeros(n + 1, dtype=torch.long)
    cu_k[1:] = torch.cumsum(ctx, 0)
    return Batch(input_ids=ids, positions=pos, slot_mapping=slots, cu_seqlens_q=torch.arange(n + 1),
                 cu_seqlens_k=cu_k, context_lens=ctx, block_tables=block_tables(seqs), is_prefill=False,
                 last_rows=torch.arange(n))
# %% paged_attention
def paged_attention(q, k, v, kv_cache, batch):
    bs = kv_cache.shape[2]
    blk = batch.slot_mapping // bs
    off = batch.slot_mapping % bs
    kv_cache[0, blk, off] = k
    kv_cache[1, blk, off] = v
    pieces = []
    bounds = batch.cu_seqlens_q.tolist()
    for i, ctx in enumerate(batch.context_lens.tolist()):
        positions = torch.arange(ctx)
        table = batch.block_tables[i]
        pb, po = table[positions // bs], positions % bs
        keys = kv_cache[0, pb, po]
        values = kv_cache[1, pb, po]
        rows = q[bounds[i]:bounds[i + 1]]
        pieces.append(causal_attention(rows, keys, values, past=ctx - rows.shape[0]))
    return torch.cat(pieces, dim=0) if pieces else torch.empty_like(q)
