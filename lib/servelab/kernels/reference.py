"""Plain torch references for the kernels: gather each sequence's K/V, then attention in float64.

Written to be obviously right rather than fast: a Python loop over sequences, the block table applied with
indexing, GQA by repeating KV heads, softmax in float64. The tests and the benchmark compare the Triton
kernels with these. Attention results are float64 (compare before rounding to the kernel's dtype).

>>> import torch
>>> k = torch.randn(2, 4, 1, 8); v = torch.randn(2, 4, 1, 8)
>>> out = ref_paged_decode(torch.randn(1, 2, 8), k, v, torch.tensor([[1, 0]], dtype=torch.int32),
...                        torch.tensor([6], dtype=torch.int32))
>>> out.shape, out.dtype
(torch.Size([1, 2, 8]), torch.float64)
"""

from __future__ import annotations

import math

import torch


def gather_kv(cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ``seq_len`` tokens of one sequence, ``[seq_len, num_kv_heads, head_dim]``, in order.

    >>> cache = torch.arange(6.).reshape(3, 2, 1, 1)            # 3 blocks of 2 slots
    >>> gather_kv(cache, torch.tensor([2, 0]), 3).flatten().tolist()
    [4.0, 5.0, 0.0]
    """
    block_size = cache.shape[1]
    num_blocks = -(-seq_len // block_size)
    blocks = block_table_row[:num_blocks].long()
    return cache[blocks].reshape(-1, *cache.shape[2:])[:seq_len]


def attention_f64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, q_positions: torch.Tensor):
    """Softmax attention in float64 with a causal mask by position; GQA by repeating KV heads.

    q [n, Hq, D]; k, v [L, Hkv, D] for key positions 0..L-1; query i sees keys at positions <= q_positions[i].
    Returns [n, Hq, D] float64.
    """
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,lhd->hnl", q.double(), k) * scale
    key_positions = torch.arange(k.shape[0], device=q.device)
    visible = key_positions[None, :] <= q_positions.to(q.device)[:, None]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hnl,lhd->nhd", torch.softmax(scores, dim=-1), v)


def ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale=None) -> torch.Tensor:
    """What ``paged_decode`` (and ``split_kv_decode``) compute: ``[num_seqs, num_q_heads, head_dim]`` float64."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for s, seq_len in enumerate(seq_lens.tolist()):
        k = gather_kv(k_cache, block_tables[s], seq_len)
        v = gather_kv(v_cache, block_tables[s], seq_len)
        out[s] = attention_f64(q[s:s + 1], k, v, scale, torch.tensor([seq_len - 1]))[0]
    return out


def ref_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu_seqlens_q, scale=None) -> torch.Tensor:
    """What ``prefill_attention`` computes: ``[total_q_tokens, num_q_heads, head_dim]`` float64."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    cu = cu_seqlens_q.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        first, last = cu[s], cu[s + 1]
        if first == last:
            continue
        ctx_len = seq_len - (last - first)
        k = gather_kv(k_cache, block_tables[s], seq_len)
        v = gather_kv(v_cache, block_tables[s], seq_len)
        out[first:last] = attention_f64(q[first:last], k, v, scale, ctx_len + torch.arange(last - first))
    return out


def ref_store_kvcache(key, value, k_cache, v_cache, slot_mapping) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``store_kvcache`` leaves in the caches, as new tensors (the inputs are not modified)."""
    k_new, v_new = k_cache.clone(), v_cache.clone()
    block_size = k_cache.shape[1]
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_new[slot // block_size, slot % block_size] = key[i]
            v_new[slot // block_size, slot % block_size] = value[i]
    return k_new, v_new
