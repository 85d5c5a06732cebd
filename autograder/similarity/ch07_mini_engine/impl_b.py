# %% prepare_prefill
def prepare_prefill(seqs, block_size):
    starts = torch.tensor([s.num_cached_tokens for s in seqs], dtype=torch.long)
    counts = torch.tensor([s.num_scheduled_tokens for s in seqs], dtype=torch.long)
    ends = starts + counts
    zero = torch.zeros(1, dtype=torch.long)
    cu_q = torch.cat([zero, counts.cumsum(0)])
    cu_k = torch.cat([zero, ends.cumsum(0)])
    pos = torch.cat([torch.arange(int(a), int(b)) for a, b in zip(starts, ends)]).long()
    ids = torch.tensor([t for s in seqs for t in s.token_ids[s.num_cached_tokens:
                                                            s.num_cached_tokens + s.num_scheduled_tokens]],
                       dtype=torch.long)
    tables = block_tables(seqs)
    owner = torch.repeat_interleave(torch.arange(len(seqs)), counts)
    slot = tables[owner, pos // block_size] * block_size + pos % block_size
    return Batch(ids, pos, slot, cu_q, cu_k, ends, tables, is_prefill=True, last_rows=cu_q[1:] - 1)
# %% prepare_decode
def prepare_decode(seqs, block_size):
    lens = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    pos = lens - 1
    tables = block_tables(seqs)
    rows = torch.arange(len(seqs))
    slot = tables[rows, pos // block_size] * block_size + pos % block_size
    ids = torch.tensor([s.last_token for s in seqs], dtype=torch.long)
    cu_k = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)])
    return Batch(ids, pos, slot, torch.arange(len(seqs) + 1, dtype=torch.long), cu_k, lens, tables,
                 is_prefill=False, last_rows=rows.long())
# %% paged_attention
def paged_attention(q, k, v, kv_cache, batch):
    _, num_blocks, block_size = kv_cache.shape[:3]
    keys_flat = kv_cache[0].reshape(num_blocks * block_size, *kv_cache.shape[3:])
    vals_flat = kv_cache[1].reshape(num_blocks * block_size, *kv_cache.shape[3:])
    keys_flat.index_copy_(0, batch.slot_mapping, k)
    vals_flat.index_copy_(0, batch.slot_mapping, v)
    result = torch.zeros_like(q)
    cu = batch.cu_seqlens_q
    for b in range(batch.context_lens.numel()):
        total = int(batch.context_lens[b])
        start, stop = int(cu[b]), int(cu[b + 1])
        p = torch.arange(total)
        flat_idx = batch.block_tables[b][p // block_size] * block_size + p % block_size
        result[start:stop] = causal_attention(q[start:stop], keys_flat.index_select(0, flat_idx),
                                              vals_flat.index_select(0, flat_idx), past=total - (stop - start))
    return result
