# %% prepare_prefill
class _Builder:
    def __init__(self, block_size):
        self.block_size = block_size
        self.cols = {k: [] for k in ("ids", "pos", "slot")}
        self.cu_q, self.cu_k, self.ctx = [0], [0], []

    def add(self, seq):
        first = seq.num_cached_tokens
        count = seq.num_scheduled_tokens
        p = first
        while p < first + count:
            self.cols["ids"].append(seq.token_ids[p])
            self.cols["pos"].append(p)
            page = seq.block_table[p // self.block_size]
            self.cols["slot"].append(page * self.block_size + (p - (p // self.block_size) * self.block_size))
            p += 1
        self.cu_q.append(self.cu_q[-1] + count)
        self.ctx.append(first + count)
        self.cu_k.append(self.cu_k[-1] + first + count)


def prepare_prefill(seqs, block_size):
    b = _Builder(block_size)
    for s in seqs:
        b.add(s)
    lt = torch.LongTensor
    return Batch(lt(b.cols["ids"]), lt(b.cols["pos"]), lt(b.cols["slot"]), lt(b.cu_q), lt(b.cu_k), lt(b.ctx),
                 block_tables(seqs), is_prefill=True, last_rows=lt(b.cu_q[1:]) - 1)
# %% prepare_decode
def prepare_decode(seqs, block_size):
    ctx = torch.tensor([s.num_tokens for s in seqs], dtype=torch.long)
    positions = ctx - 1
    table = block_tables(seqs)
    which = torch.gather(table, 1, (positions // block_size).unsqueeze(1)).squeeze(1)
    slot_mapping = which * block_size + torch.remainder(positions, block_size)
    cu_k = torch.nn.functional.pad(torch.cumsum(ctx, dim=0), (1, 0))
    steps = torch.arange(len(seqs) + 1, dtype=torch.long)
    return Batch(torch.tensor([s.last_token for s in seqs], dtype=torch.long), positions, slot_mapping, steps,
                 cu_k, ctx, table, is_prefill=False, last_rows=steps[:-1].clone())
# %% paged_attention
def paged_attention(q, k, v, kv_cache, batch):
    two, nb, bs, heads, dim = kv_cache.shape
    slot = batch.slot_mapping
    kv_cache[:, slot // bs, slot % bs] = torch.stack((k, v))
    out = q.clone()
    cu = batch.cu_seqlens_q
    for i in range(len(batch.context_lens)):
        n_ctx = int(batch.context_lens[i].item())
        first, last = int(cu[i].item()), int(cu[i + 1].item())
        pos = torch.arange(n_ctx, device=q.device)
        where = batch.block_tables[i].index_select(0, pos // bs) * bs + pos % bs
        kv = kv_cache.view(two, nb * bs, heads, dim)[:, where]
        out[first:last] = causal_attention(q[first:last], kv[0], kv[1], past=n_ctx - (last - first))
    return out
