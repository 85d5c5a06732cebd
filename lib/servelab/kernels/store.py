"""Write new tokens' K/V into the paged cache through a slot mapping (nano-vllm's ``store_kvcache``).

``slot_mapping[i] = block_id * block_size + offset`` says where token i goes: block ``slot // block_size``,
row ``slot % block_size``. A slot of -1 skips the token (nano-vllm marks tokens whose KV is already cached
this way). Two tokens with one slot is a caller bug; which one lands is unspecified.

Design: one program per TOKENS consecutive tokens, all KV heads at once. A token's
``num_kv_heads * head_dim`` values are one contiguous row of ``key`` and (with the usual cache strides)
one contiguous row of the cache slot, so the program moves them as a [TOKENS, HEADS x D] tile, and K and
V ride in the same program to share the slot load.

>>> import torch
>>> from servelab.kernels.store import store_kvcache
>>> k_cache = torch.zeros(2, 4, 1, 64); v_cache = torch.zeros(2, 4, 1, 64)
>>> key = torch.ones(3, 1, 64); value = 2 * torch.ones(3, 1, 64)
>>> store_kvcache(key, value, k_cache, v_cache, torch.tensor([5, -1, 0], dtype=torch.int32))
>>> k_cache[1, 1, 0, 0].item(), k_cache[0, 0, 0, 0].item(), v_cache[0, 0, 0, 0].item(), k_cache[0, 1].sum().item()
(1.0, 1.0, 2.0, 0.0)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from servelab.kernels.checks import (
    check_dtype,
    check_kv_cache,
    check_last_dim_contiguous,
    check_ndim,
    check_same_device,
)
from servelab.kernels.launch import Launch, padded, run_all

# Elements per program and tensor: 4096 is a token of 32 KV heads x 128, or 4 tokens of 8 x 128.
STORE_TILE_ELEMENTS = 4096
STORE_NUM_WARPS = 4


@triton.jit
def store_kvcache_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, num_tokens,
                         stride_key_t, stride_key_h, stride_value_t, stride_value_h,
                         stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                         NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         TOKENS: tl.constexpr, HEADS_PAD: tl.constexpr, D_PAD: tl.constexpr):
    tokens = tl.program_id(0).to(tl.int64) * TOKENS + tl.arange(0, TOKENS)
    slots = tl.load(slot_mapping_ptr + tokens, mask=tokens < num_tokens, other=-1).to(tl.int64)
    token_mask = slots >= 0  # also false past num_tokens

    # head h, dim d of a token, flattened so one tile holds every head: column c = h * D_PAD + d
    cols = tl.arange(0, HEADS_PAD * D_PAD)
    h = cols // D_PAD
    d = cols % D_PAD
    mask = token_mask[:, None] & ((h < NUM_KV_HEADS) & (d < HEAD_DIM))[None, :]
    block = slots // BLOCK_SIZE
    offset = slots % BLOCK_SIZE

    k = tl.load(key_ptr + (tokens * stride_key_t)[:, None] + (h * stride_key_h + d)[None, :], mask=mask)
    tl.store(k_cache_ptr + (block * stride_kb + offset * stride_ks)[:, None] + (h * stride_kh + d)[None, :],
             k, mask=mask)
    v = tl.load(value_ptr + (tokens * stride_value_t)[:, None] + (h * stride_value_h + d)[None, :], mask=mask)
    tl.store(v_cache_ptr + (block * stride_vb + offset * stride_vs)[:, None] + (h * stride_vh + d)[None, :],
             v, mask=mask)


def plan_store_kvcache(key, value, k_cache, v_cache, slot_mapping, *, check_indices=True):
    """Check the arguments of ``store_kvcache`` and return its ``[Launch]`` without running anything."""
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    for name, t in (("key", key), ("value", value)):
        check_ndim(name, t, 3, "[num_tokens, num_kv_heads, head_dim]")
        check_last_dim_contiguous(name, t)
        if t.shape[1:] != k_cache.shape[2:]:
            raise ValueError(f"{name} has {tuple(t.shape[1:])} heads x head_dim; the cache has "
                             f"{tuple(k_cache.shape[2:])}")
        if t.dtype != k_cache.dtype:
            raise TypeError(f"{name} must have the cache's dtype {k_cache.dtype}; got {t.dtype}")
    check_ndim("slot_mapping", slot_mapping, 1, "[num_tokens]")
    check_dtype("slot_mapping", slot_mapping, (torch.int32, torch.int64))
    num_tokens = key.shape[0]
    if value.shape[0] != num_tokens or slot_mapping.shape[0] != num_tokens:
        raise ValueError(f"key, value and slot_mapping must have one num_tokens; got {key.shape[0]}, "
                         f"{value.shape[0]} and {slot_mapping.shape[0]}")
    if slot_mapping.stride(0) != 1 and num_tokens > 1:
        raise ValueError("slot_mapping must be contiguous")
    check_same_device(key=key, value=value, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping)
    if check_indices and num_tokens:
        slots = slot_mapping.detach().to("cpu", torch.int64)
        bad = ((slots < -1) | (slots >= num_blocks * block_size)).nonzero().flatten()
        if len(bad):
            i = bad[0].item()
            raise ValueError(f"slot_mapping[{i}] = {slots[i].item()} is outside [-1, {num_blocks * block_size}) "
                             f"({num_blocks} blocks of {block_size})")

    heads_pad, d_pad = padded(num_kv_heads, 1), padded(head_dim, 1)
    tokens = max(1, STORE_TILE_ELEMENTS // (heads_pad * d_pad))
    return [Launch(
        store_kvcache_kernel, (triton.cdiv(num_tokens, tokens),),
        (key, value, k_cache, v_cache, slot_mapping, num_tokens, key.stride(0), key.stride(1), value.stride(0),
         value.stride(1), *k_cache.stride()[:3], *v_cache.stride()[:3]),
        dict(NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, TOKENS=tokens,
             HEADS_PAD=heads_pad, D_PAD=d_pad),
        dict(num_warps=STORE_NUM_WARPS))]


def store_kvcache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  slot_mapping: torch.Tensor, *, check_indices: bool = True) -> None:
    """Copy ``key[i]`` and ``value[i]`` into cache slot ``slot_mapping[i]`` (skipped when -1), in place.

    Arguments:
      key, value    [num_tokens, num_kv_heads, head_dim], the cache's dtype
      k_cache, v_cache  [num_blocks, block_size, num_kv_heads, head_dim]
      slot_mapping  int32 or int64 [num_tokens], each -1 or in [0, num_blocks * block_size)
      check_indices check the slots' range (copies slot_mapping to the host)
    """
    run_all(plan_store_kvcache(key, value, k_cache, v_cache, slot_mapping, check_indices=check_indices))
