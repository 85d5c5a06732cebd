# %% prepare_prefill
from itertools import accumulate as _accumulate


def prepare_prefill(seqs, block_size):
    spans = [(s, range(s.num_cached_tokens, s.num_cached_tokens + s.num_scheduled_tokens)) for s in seqs]
    input_ids = [s.token_ids[p] for s, r in spans for p in r]
    positions = [p for _, r in spans for p in r]
    slot_mapping = [s.block_table[p // block_size] * block_size + p % block_size for s, r in spans for p in r]
    q_cum = list(_accumulate((len(r) for _, r in spans), initial=0))
    context = [r.stop for _, r in spans]
    k_cum = list(_accumulate(context, initial=0))
    last_rows = [q_cum[i + 1] - 1 for i in range(len(seqs))]
    fields = dict(input_ids=input_ids, positions=positions, slot_mapping=slot_mapping, cu_seqlens_q=q_cum,
                  cu_seqlens_k=k_cum, context_lens=context, last_rows=last_rows)
    tensors = {name: torch.tensor(vals, dtype=torch.long) for name, vals in fields.items()}
    return Batch(block_tables=block_tables(seqs), is_prefill=True, **tensors)
# %% prepare_decode
def prepare_decode(seqs, block_size):
    rows = []
    for s in seqs:
        n = len(s)
        p = n - 1
        blk, off = divmod(p, block_size)
        rows.append((s.last_token, p, s.block_table[blk] * block_size + off, n))
    ids, pos, slots, ctx = (list(col) for col in zip(*rows)) if rows else ([], [], [], [])
    running, cu_k = 0, [0]
    for n in ctx:
        running += n
        cu_k.append(running)
    long = torch.long
    return Batch(
        input_ids=torch.tensor(ids, dtype=long),
        positions=torch.tensor(pos, dtype=long),
        slot_mapping=torch.tensor(slots, dtype=long),
        cu_seqlens_q=torch.arange(len(seqs) + 1, dtype=long),
        cu_seqlens_k=torch.tensor(cu_k, dtype=long),
        context_lens=torch.tensor(ctx, dtype=long),
        block_tables=block_tables(seqs),
        is_prefill=False,
        last_rows=torch.arange(len(seqs), dtype=long),
    )
# %% paged_attention
def _gather_context(cache_half, table, n_ctx, block_size):
    """The first n_ctx cached rows of one sequence, in position order: [n_ctx, kv_heads, head_dim]."""
    chunks = []
    for j in range((n_ctx + block_size - 1) // block_size):
        take = min(block_size, n_ctx - j * block_size)
        chunks.append(cache_half[int(table[j]), :take])
    return torch.cat(chunks, dim=0)


def paged_attention(q, k, v, kv_cache, batch):
    B = kv_cache.shape[2]
    for name, src in ((0, k), (1, v)):
        flat = kv_cache[name].view(-1, *kv_cache.shape[3:])
        flat[batch.slot_mapping] = src
    outputs = []
    starts = batch.cu_seqlens_q[:-1].tolist()
    stops = batch.cu_seqlens_q[1:].tolist()
    for i, (a, z) in enumerate(zip(starts, stops)):
        n_ctx = int(batch.context_lens[i])
        keys = _gather_context(kv_cache[0], batch.block_tables[i], n_ctx, B)
        vals = _gather_context(kv_cache[1], batch.block_tables[i], n_ctx, B)
        outputs.append(causal_attention(q[a:z], keys, vals, past=n_ctx - (z - a)))
    if not outputs:
        return q.new_empty(q.shape)
    return torch.cat(outputs)
