# %% prepare_prefill
import numpy as _np


def prepare_prefill(seqs, block_size):
    parts = []
    for s in seqs:
        p = _np.arange(s.num_cached_tokens, s.num_cached_tokens + s.num_scheduled_tokens)
        table = _np.asarray(s.block_table, dtype=_np.int64)
        parts.append((_np.asarray(s.token_ids, dtype=_np.int64)[p], p, table[p // block_size] * block_size
                      + p % block_size))
    empty = _np.zeros(0, dtype=_np.int64)
    ids = _np.concatenate([a for a, _, _ in parts]) if parts else empty
    pos = _np.concatenate([b for _, b, _ in parts]) if parts else empty
    slots = _np.concatenate([c for _, _, c in parts]) if parts else empty
    q_len = _np.array([s.num_scheduled_tokens for s in seqs], dtype=_np.int64)
    k_len = _np.array([s.num_cached_tokens + s.num_scheduled_tokens for s in seqs], dtype=_np.int64)
    cu_q = _np.concatenate([[0], _np.cumsum(q_len)])
    cu_k = _np.concatenate([[0], _np.cumsum(k_len)])

    def T(a):
        return torch.from_numpy(_np.asarray(a, dtype=_np.int64))

    return Batch(input_ids=T(ids), positions=T(pos), slot_mapping=T(slots), cu_seqlens_q=T(cu_q),
                 cu_seqlens_k=T(cu_k), context_lens=T(k_len), block_tables=block_tables(seqs), is_prefill=True,
                 last_rows=T(cu_q[1:] - 1))
# %% prepare_decode
import numpy as _np


def prepare_decode(seqs, block_size):
    b = len(seqs)
    ctx = _np.fromiter((len(s) for s in seqs), dtype=_np.int64, count=b)
    last_pos = ctx - 1
    slot = _np.fromiter((s.block_table[p // block_size] * block_size + p % block_size
                         for s, p in zip(seqs, last_pos.tolist())), dtype=_np.int64, count=b)
    toks = _np.fromiter((s.last_token for s in seqs), dtype=_np.int64, count=b)
    cu = _np.zeros(b + 1, dtype=_np.int64)
    _np.cumsum(ctx, out=cu[1:])
    L = lambda a: torch.as_tensor(a, dtype=torch.long)  # noqa: E731
    return Batch(L(toks), L(last_pos), L(slot), L(_np.arange(b + 1)), L(cu), L(ctx), block_tables(seqs),
                 is_prefill=False, last_rows=L(_np.arange(b)))
# %% paged_attention
def paged_attention(q, k, v, kv_cache, batch):
    bsz = kv_cache.shape[2]
    # write every new token's K/V into its slot, one token at a time
    for row, slot in enumerate(batch.slot_mapping.tolist()):
        kv_cache[0, slot // bsz, slot % bsz] = k[row]
        kv_cache[1, slot // bsz, slot % bsz] = v[row]
    out = torch.empty_like(q)
    q_starts = batch.cu_seqlens_q.tolist()
    for i, n_ctx in enumerate(batch.context_lens.tolist()):
        n_blocks = -(-n_ctx // bsz)
        blocks = batch.block_tables[i, :n_blocks]
        keys = kv_cache[0, blocks].flatten(0, 1)[:n_ctx]        # whole blocks, then cut to the context
        vals = kv_cache[1, blocks].flatten(0, 1)[:n_ctx]
        a, z = q_starts[i], q_starts[i + 1]
        out[a:z] = causal_attention(q[a:z], keys, vals, past=n_ctx - (z - a))
    return out
