"""Argument checks shared by the kernels' Python entry points.

A Triton kernel does not check anything: a wrong dtype reads garbage, a block id past the end of the cache
reads another tensor's memory, and neither fails. So every entry point checks its arguments here first and
raises ``TypeError`` (wrong dtype) or ``ValueError`` (wrong shape, device, layout or value) with a message
that names the argument.

Checks on tensor *values* (block ids in range, lengths that fit the block table) copy those tensors to the
host, which waits for the GPU; the entry points run them unless called with ``check_indices=False``
(benchmark loops, CUDA graphs).
"""

from __future__ import annotations

import math

import torch

# The dtypes the kernels are written for: K/V, queries and outputs share one of them.
KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256


def check_dtype(name: str, t: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"{name} must be {names}; got {str(t.dtype).removeprefix('torch.')}")


def check_ndim(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    if t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {layout}; got shape {tuple(t.shape)}")


def check_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    # The kernels load head_dim as one contiguous run; every other dimension goes through a stride.
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1); got strides {t.stride()}")


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        listing = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on one device; got {listing}")
    return first


def check_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check a paged K/V pair and return ``(num_blocks, block_size, num_kv_heads, head_dim)``.

    >>> check_kv_cache(torch.zeros(3, 16, 2, 64), torch.zeros(3, 16, 2, 64))
    (3, 16, 2, 64)
    """
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    check_ndim("k_cache", k_cache, 4, layout)
    check_ndim("v_cache", v_cache, 4, layout)
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache and v_cache must have one shape; got {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    check_dtype("k_cache", k_cache, KV_DTYPES)
    if v_cache.dtype != k_cache.dtype:
        raise TypeError(f"v_cache must have k_cache's dtype {k_cache.dtype}; got {v_cache.dtype}")
    check_last_dim_contiguous("k_cache", k_cache)
    check_last_dim_contiguous("v_cache", v_cache)
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if min(num_blocks, block_size, num_kv_heads, head_dim) == 0:
        raise ValueError(f"k_cache has an empty dimension: {tuple(k_cache.shape)}")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim {head_dim} > {MAX_HEAD_DIM} is not supported (tiles would not fit on chip)")
    return num_blocks, block_size, num_kv_heads, head_dim


def check_queries(q: torch.Tensor, k_cache: torch.Tensor, layout: str) -> tuple[int, int]:
    """Check queries against the cache; return ``(num_q_heads, group)``, group = query heads per KV head."""
    check_ndim("q", q, 3, layout)
    check_last_dim_contiguous("q", q)
    if q.dtype != k_cache.dtype:
        raise TypeError(f"q must have the cache's dtype {k_cache.dtype}; got {q.dtype}")
    num_kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    if q.shape[-1] != head_dim:
        raise ValueError(f"q's head_dim {q.shape[-1]} differs from the cache's {head_dim}")
    num_q_heads = q.shape[1]
    if num_q_heads == 0 or num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads ({num_q_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})")
    return num_q_heads, num_q_heads // num_kv_heads


def check_out(out: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """The output tensor: ``out`` checked against ``q``, or a new one like ``q``."""
    if out is None:
        return torch.empty_like(q)
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must match q ({tuple(q.shape)}, {q.dtype}, {q.device}); "
                         f"got ({tuple(out.shape)}, {out.dtype}, {out.device})")
    check_last_dim_contiguous("out", out)
    return out


def check_block_tables(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_seqs: int) -> None:
    """Shapes and dtypes of ``block_tables [num_seqs, max_blocks]`` and ``seq_lens [num_seqs]`` (both int32)."""
    check_ndim("block_tables", block_tables, 2, "[num_seqs, max_blocks_per_seq]")
    check_dtype("block_tables", block_tables, (torch.int32,))
    check_ndim("seq_lens", seq_lens, 1, "[num_seqs]")
    check_dtype("seq_lens", seq_lens, (torch.int32,))
    if seq_lens.stride(0) != 1 and seq_lens.numel() > 1:
        raise ValueError("seq_lens must be contiguous")
    if block_tables.stride(1) != 1 and block_tables.shape[1] > 1:
        raise ValueError("block_tables rows must be contiguous (stride 1 along max_blocks)")
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(f"block_tables {tuple(block_tables.shape)} and seq_lens {tuple(seq_lens.shape)} "
                         f"must both have num_seqs = {num_seqs} rows")


def check_block_table_values(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int,
                             min_lens: torch.Tensor | int = 1) -> None:
    """Every length in ``[min_lens, max_blocks * block_size]``; every block a sequence uses in ``[0, num_blocks)``.

    Entries past a sequence's last block are never read, so they may hold anything (-1, a stale id).

    >>> bt = torch.tensor([[2, 0], [1, -1]], dtype=torch.int32)
    >>> check_block_table_values(bt, torch.tensor([5, 4], dtype=torch.int32), num_blocks=3, block_size=4)
    >>> check_block_table_values(bt, torch.tensor([5, 5], dtype=torch.int32), num_blocks=3, block_size=4)
    Traceback (most recent call last):
    ...
    ValueError: block_tables[1, 1] = -1 is outside [0, 3), but sequence 1 (length 5) reads it
    """
    lens = seq_lens.detach().to("cpu", torch.int64)
    table = block_tables.detach().to("cpu", torch.int64)
    mins = torch.as_tensor(min_lens).to("cpu", torch.int64).expand_as(lens)
    capacity = table.shape[1] * block_size
    for bad in (lens < mins).nonzero().flatten()[:1].tolist():
        raise ValueError(f"seq_lens[{bad}] = {lens[bad].item()} is below its minimum {mins[bad].item()}")
    for bad in (lens > capacity).nonzero().flatten()[:1].tolist():
        raise ValueError(f"seq_lens[{bad}] = {lens[bad].item()} does not fit its block table "
                         f"({table.shape[1]} blocks of {block_size} = {capacity} tokens)")
    blocks_used = (lens + block_size - 1) // block_size
    used = torch.arange(table.shape[1])[None, :] < blocks_used[:, None]
    out_of_range = used & ((table < 0) | (table >= num_blocks))
    for s, j in out_of_range.nonzero()[:1].tolist():
        raise ValueError(f"block_tables[{s}, {j}] = {table[s, j].item()} is outside [0, {num_blocks}), "
                         f"but sequence {s} (length {lens[s].item()}) reads it")


def check_power_of_two(name: str, value: int, minimum: int) -> None:
    if value < minimum or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {minimum}; got {value}")


def default_scale(head_dim: int, scale: float | None) -> float:
    """The softmax scale, ``1/sqrt(head_dim)`` unless given."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
