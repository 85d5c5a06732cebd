"""Around the kernels a learner writes in chapter 6: their launchers, stage 1 of split-KV, a decode step's
traffic, two walks through the tile loop, and the roofline picture.

The chapter's exercise kernels are simpler than the production ones in this package: head_dim is a power
of two, K and V share one layout, a tile is a fixed number of key positions. The learner writes the
``@triton.jit`` bodies; the launchers here fix the grid and the arguments, exactly as the notebook's
locked cells do, so that the hidden checks launch a learner's kernel the way the notebook does.

- ``store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_token,
  stride_head, stride_block, stride_slot, stride_kv_head, BLOCK_SIZE, HEAD_DIM)``: grid
  (num_tokens, num_kv_heads); see :func:`launch_store_kv`.
- ``decode_kernel(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale,
  stride_q_seq, stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head, GROUP, BLOCK_H,
  HEAD_DIM, BLOCK_SIZE, TILE)``: grid (num_seqs, num_kv_heads); see :func:`launch_decode`.
- ``merge_kernel(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
  NUM_SPLITS, SPLITS_PAD, HEAD_DIM)``: grid (num_seqs, num_q_heads), after :func:`split_kv_partials`;
  see :func:`launch_merge`.

>>> decode_traffic([4096] * 64, num_q_heads=32, num_kv_heads=8, head_dim=128, bytes_per_element=2)
(1074790400, 4294967296)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from servelab.analytic.costmodel import H200, GPUSpec
from servelab.kernels.checks import (
    check_block_table_values,
    check_block_tables,
    check_kv_cache,
    check_queries,
    check_same_device,
    default_scale,
)
from servelab.kernels.launch import LOG2E, dtype_constexprs, interpreted, padded
from servelab.kernels.tiles import attend_tiles

# Key positions per loop iteration in the exercise kernels: the smallest tile tl.dot takes on Hopper for
# 16-bit inputs, and few enough positions that the interpreter runs each iteration in milliseconds.
EXERCISE_TILE = 16
LN2 = math.log(2.0)


# --------------------------------------------------------------------------------------------------------
# argument checks the exercise kernels rely on


def _check_exercise_layout(kernel, head_dim: int, dtype: torch.dtype, **tensors: torch.Tensor) -> None:
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise ValueError(f"the exercise kernels take a head_dim that is a power of two >= 16; got {head_dim}")
    if dtype == torch.bfloat16 and interpreted(kernel):
        raise TypeError("Triton's interpreter computes bf16 arithmetic wrong: use float16 or float32 on the CPU")
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")


def _check_same_layout(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    if a.shape != b.shape or a.stride() != b.stride() or a.dtype != b.dtype:
        raise ValueError(f"{a_name} and {b_name} must have one shape, layout and dtype; got {tuple(a.shape)} "
                         f"{a.stride()} {a.dtype} and {tuple(b.shape)} {b.stride()} {b.dtype}")


# --------------------------------------------------------------------------------------------------------
# inputs: a paged batch in which every slot no token owns is NaN


@dataclass
class PagedBatch:
    """A decode batch in a paged cache. ``owner[(block, slot)] = (seq, position)`` for every slot a block-table
    entry of a sequence covers, past its length too (those positions read NaN)."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    owner: dict = field(repr=False, default_factory=dict)

    @property
    def args(self) -> tuple[torch.Tensor, ...]:
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens


def make_paged_batch(seq_lens: Sequence[int], *, block_size: int, num_q_heads: int, num_kv_heads: int,
                     head_dim: int, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0,
                     table_width: int | None = None, q_scale: float = 1.0) -> PagedBatch:
    """Random-normal queries, keys and values in shuffled cache blocks, and NaN wherever nothing was written.

    Each sequence's row of the block table has ``table_width`` entries (default: one more than the longest
    sequence needs). The entries past a sequence's blocks point at blocks of their own, all NaN, and block 0
    is never used, so a kernel that reads a key past a sequence's end, or through an entry past its blocks,
    or through a masked-off entry loaded as 0, gets NaN. ``q_scale`` multiplies the queries (large scores).

    >>> b = make_paged_batch([5, 1], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=16)
    >>> b.block_tables.shape, b.k_cache.shape       # 2 sequences x 3 entries, each entry its own block
    (torch.Size([2, 3]), torch.Size([8, 4, 1, 16]))
    >>> int((~b.k_cache.isnan()).all(-1).sum())    # 5 + 1 tokens written; every other slot is NaN
    6
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_needed = [-(-int(n) // block_size) for n in seq_lens]
    width = table_width if table_width is not None else max(blocks_needed, default=0) + 1
    if width < max(blocks_needed, default=0):
        raise ValueError(f"table_width {width} is narrower than the {max(blocks_needed)} blocks a sequence needs")
    num_blocks = 1 + width * len(seq_lens) + 1          # block 0, every table entry its own block, one spare
    ids = (1 + torch.randperm(num_blocks - 1, generator=gen)).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    block_tables = torch.tensor(ids[:width * len(seq_lens)], dtype=torch.int32).reshape(len(seq_lens), width)
    owner = {}
    for s, n in enumerate(int(n) for n in seq_lens):
        for j in range(width):
            for slot in range(block_size):
                owner[(int(block_tables[s, j]), slot)] = (s, j * block_size + slot)
        pos = torch.arange(n)
        blocks, slots = block_tables[s, pos // block_size].long(), pos % block_size
        k_cache[blocks, slots] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v_cache[blocks, slots] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
    q = (torch.randn(len(seq_lens), num_q_heads, head_dim, generator=gen) * q_scale).to(dtype)
    lens = torch.tensor([int(n) for n in seq_lens], dtype=torch.int32)
    return PagedBatch(q.to(device), k_cache.to(device), v_cache.to(device), block_tables.to(device),
                      lens.to(device), owner)


# --------------------------------------------------------------------------------------------------------
# launchers: what the notebook's locked cells do


def launch_store_kv(kernel, key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slot_mapping: torch.Tensor) -> None:
    """Run ``kernel`` (a ``store_kv_kernel``) on grid (num_tokens, num_kv_heads): token t's K and V of head h
    go to cache block ``slot_mapping[t] // block_size``, row ``slot_mapping[t] % block_size``; slot -1 skips."""
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    _check_same_layout("key", key, "value", value)
    _check_same_layout("k_cache", k_cache, "v_cache", v_cache)
    if key.dim() != 3 or key.shape[1:] != k_cache.shape[2:] or key.dtype != k_cache.dtype:
        raise ValueError(f"key must be [num_tokens, {num_kv_heads}, {head_dim}] {k_cache.dtype}; got "
                         f"{tuple(key.shape)} {key.dtype}")
    if slot_mapping.shape != (key.shape[0],) or slot_mapping.dtype != torch.int32:
        raise ValueError(f"slot_mapping must be int32 [{key.shape[0]}]; got {slot_mapping.dtype} "
                         f"{tuple(slot_mapping.shape)}")
    check_same_device(key=key, value=value, k_cache=k_cache, v_cache=v_cache, slot_mapping=slot_mapping)
    _check_exercise_layout(kernel, head_dim, key.dtype, key=key, k_cache=k_cache, slot_mapping=slot_mapping)
    if key.shape[0] == 0:
        return
    kernel[(key.shape[0], num_kv_heads)](
        key, value, k_cache, v_cache, slot_mapping, key.stride(0), key.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_SIZE=block_size, HEAD_DIM=head_dim)


def launch_decode(kernel, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                  seq_lens: torch.Tensor, *, scale: float | None = None, tile: int = EXERCISE_TILE,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Run ``kernel`` (a ``decode_kernel``) on grid (num_seqs, num_kv_heads) and return ``out`` like ``q``
    (a new tensor unless ``out``, contiguous like q, is given).

    Program (s, g) computes the query heads ``g * GROUP ... g * GROUP + GROUP - 1`` of sequence s, the rows of
    a BLOCK_H x HEAD_DIM tile (BLOCK_H = GROUP padded to a power of two >= 16: the smallest M of a tensor-core
    MMA tile).
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    _, group = check_queries(q, k_cache, "[num_seqs, num_q_heads, head_dim]")
    _check_same_layout("k_cache", k_cache, "v_cache", v_cache)
    check_block_tables(block_tables, seq_lens, q.shape[0])
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens)
    _check_exercise_layout(kernel, head_dim, q.dtype, q=q, k_cache=k_cache, block_tables=block_tables)
    if tile < 16 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 16; got {tile}")
    check_block_table_values(block_tables, seq_lens, num_blocks, block_size, min_lens=1)
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous tensor like q ({tuple(q.shape)}, {q.dtype}, {q.device})")
    if q.shape[0] == 0:
        return out
    kernel[(q.shape[0], num_kv_heads)](
        out, q, k_cache, v_cache, block_tables, seq_lens, default_scale(head_dim, scale),
        q.stride(0), q.stride(1), block_tables.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        GROUP=group, BLOCK_H=padded(group), HEAD_DIM=head_dim, BLOCK_SIZE=block_size, TILE=tile)
    return out


def launch_merge(kernel, part_out: torch.Tensor, part_max: torch.Tensor, part_sum: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
    """Run ``kernel`` (a ``merge_kernel``) on grid (num_seqs, num_q_heads): it fills ``out`` and returns it.

    part_out [num_seqs, num_q_heads, num_splits, head_dim] fp32 holds each split's normalised output,
    part_max and part_sum [num_seqs, num_q_heads, num_splits] fp32 its largest score and its sum of
    exp(score - max) (an empty split: 0, -inf and 0), as :func:`split_kv_partials` writes them.
    """
    num_seqs, num_q_heads, num_splits, head_dim = part_out.shape
    if part_max.shape != part_out.shape[:3] or part_sum.shape != part_out.shape[:3]:
        raise ValueError(f"part_max and part_sum must be {tuple(part_out.shape[:3])}; got {tuple(part_max.shape)} "
                         f"and {tuple(part_sum.shape)}")
    if any(t.dtype != torch.float32 for t in (part_out, part_max, part_sum)):
        raise TypeError("the partials are float32")
    if out.shape != (num_seqs, num_q_heads, head_dim) or out.stride(-1) != 1:
        raise ValueError(f"out must be [{num_seqs}, {num_q_heads}, {head_dim}] with a contiguous last dimension")
    check_same_device(part_out=part_out, part_max=part_max, part_sum=part_sum, out=out)
    _check_exercise_layout(kernel, head_dim, out.dtype, part_out=part_out, part_max=part_max, part_sum=part_sum)
    if num_seqs * num_q_heads == 0:
        return out
    kernel[(num_seqs, num_q_heads)](
        out, part_out, part_max, part_sum, out.stride(0), out.stride(1),
        NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim)
    return out


# --------------------------------------------------------------------------------------------------------
# stage 1 of split-KV, given: each split's partial softmax state


@triton.jit
def split_partials_kernel(part_out_ptr, part_max_ptr, part_sum_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                          block_tables_ptr, seq_lens_ptr, scale_log2, stride_qs, stride_qh, stride_bt,
                          stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                          NUM_SPLITS: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                          BLOCK_SIZE: tl.constexpr, BLOCK_H: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr,
                          UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_q_heads = tl.num_programs(1) * GROUP
    seq_len = tl.load(seq_lens_ptr + seq)
    split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), TILE) * TILE
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D_PAD)
    d_mask = offs_d < HEAD_DIM
    h_mask = offs_h < GROUP
    heads = kv_head * GROUP + offs_h
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                mask=h_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    acc = tl.zeros([BLOCK_H, D_PAD], dtype=tl.float32)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc, m_i, l_i = attend_tiles(acc, m_i, l_i, q, offs_h, k_cache_ptr, v_cache_ptr,
                                 block_tables_ptr + seq.to(tl.int64) * stride_bt, kv_head, start, end, scale_log2,
                                 stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, offs_d, d_mask,
                                 BLOCK_SIZE, TILE, False, UPCAST, DOT_PRECISION, NUM_STAGES)
    # attend_tiles keeps scores in log2 units (scale * log2(e)); the partials are in natural units:
    # max = m * ln(2), and sum(exp2(s2 - m)) is already sum(exp(s - max)). An empty split: 0, -inf, 0.
    has_keys = l_i > 0
    o = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    row = (seq * num_q_heads + heads).to(tl.int64) * NUM_SPLITS + split
    tl.store(part_max_ptr + row, m_i * 0.6931471805599453, mask=h_mask)
    tl.store(part_sum_ptr + row, l_i, mask=h_mask)
    tl.store(part_out_ptr + row[:, None] * HEAD_DIM + offs_d[None, :], o, mask=h_mask[:, None] & d_mask[None, :])


def split_bounds(seq_len: int, num_splits: int, tile: int = EXERCISE_TILE) -> list[tuple[int, int]]:
    """The key positions ``[start, end)`` of each split of a sequence, as ``split_partials_kernel`` cuts it:
    whole tiles of ``ceil(seq_len / num_splits)`` positions rounded up; short sequences leave splits empty.

    >>> split_bounds(40, 3)
    [(0, 16), (16, 32), (32, 40)]
    >>> split_bounds(5, 3)
    [(0, 5), (5, 5), (5, 5)]
    """
    per_split = -(-seq_len // num_splits)
    split_len = -(-per_split // tile) * tile
    return [(min(j * split_len, seq_len), min((j + 1) * split_len, seq_len)) for j in range(num_splits)]


def split_kv_partials(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                      seq_lens: torch.Tensor, num_splits: int, *, scale: float | None = None,
                      tile: int = EXERCISE_TILE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stage 1 of split-KV decode: ``(part_out, part_max, part_sum)``, one entry per (sequence, query head,
    split), each split covering :func:`split_bounds`'s keys of its sequence.

    part_out [num_seqs, num_q_heads, num_splits, head_dim]: the split's softmax-weighted values, normalised
    by its own sum; part_max: the split's largest scaled score; part_sum: the sum of exp(score - part_max)
    over its keys. An empty split stores 0, -inf and 0.
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    num_q_heads, group = check_queries(q, k_cache, "[num_seqs, num_q_heads, head_dim]")
    check_block_tables(block_tables, seq_lens, q.shape[0])
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens)
    if not 1 <= num_splits <= 64:
        raise ValueError(f"num_splits must be in [1, 64]; got {num_splits}")
    check_block_table_values(block_tables, seq_lens, num_blocks, block_size, min_lens=1)
    num_seqs = q.shape[0]
    part_out = torch.zeros(num_seqs, num_q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
    part_max = torch.full((num_seqs, num_q_heads, num_splits), float("-inf"), dtype=torch.float32, device=q.device)
    part_sum = torch.zeros(num_seqs, num_q_heads, num_splits, dtype=torch.float32, device=q.device)
    if num_seqs == 0:
        return part_out, part_max, part_sum
    split_partials_kernel[(num_seqs, num_kv_heads, num_splits)](
        part_out, part_max, part_sum, q, k_cache, v_cache, block_tables, seq_lens,
        default_scale(head_dim, scale) * LOG2E, q.stride(0), q.stride(1), block_tables.stride(0),
        *k_cache.stride()[:3], *v_cache.stride()[:3],
        NUM_SPLITS=num_splits, GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, BLOCK_H=padded(group),
        D_PAD=padded(head_dim), TILE=tile, NUM_STAGES=2, **dtype_constexprs(split_partials_kernel, q.dtype))
    return part_out, part_max, part_sum


def ref_merge(part_out: torch.Tensor, part_max: torch.Tensor, part_sum: torch.Tensor) -> torch.Tensor:
    """What ``merge_kernel`` computes, in float64: ``sum_j w_j o_j / sum_j w_j`` with
    ``w_j = part_sum_j * exp(part_max_j - max_i part_max_i)``.

    >>> o = torch.tensor([[[[1.0], [3.0]]]]); m = torch.tensor([[[0.0, 2.0]]]); l = torch.tensor([[[1.0, 1.0]]])
    >>> round(ref_merge(o, m, l).item(), 4)       # weights 1 : e^2
    2.7616
    """
    m = part_max.double()
    top = m.max(dim=-1, keepdim=True).values
    w = part_sum.double() * torch.exp(m - top)
    return (w[..., None] * part_out.double()).sum(-2) / w.sum(-1)[..., None]


# --------------------------------------------------------------------------------------------------------
# the roofline of a decode step


def decode_traffic(seq_lens: Sequence[int], num_q_heads: int, num_kv_heads: int, head_dim: int,
                   bytes_per_element: int) -> tuple[int, int]:
    """``(bytes, flops)`` of one layer's decode attention: one new query token per sequence.

    Bytes: every cached key and value once (2 x tokens x num_kv_heads x head_dim elements), the queries read
    and the outputs written (2 x num_seqs x num_q_heads x head_dim); the block table and lengths (4 bytes per
    block) are left out. FLOPs: a multiply-add (2 FLOPs) per element of q.k and of p.v, for every query head
    and key: 4 x num_q_heads x head_dim x tokens. A prefix that several sequences share is counted once per
    sequence, as this chapter's kernel reads it; ``servelab.analytic.costmodel.shared_prefix_decode_traffic`` counts a
    kernel that reads it once for the batch.
    """
    tokens = sum(int(n) for n in seq_lens)
    kv = 2 * tokens * num_kv_heads * head_dim * bytes_per_element
    q_and_out = 2 * len(seq_lens) * num_q_heads * head_dim * bytes_per_element
    return kv + q_and_out, 4 * num_q_heads * head_dim * tokens


def roofline_time_s(nbytes: float, flops: float, gpu: GPUSpec = H200) -> tuple[float, float]:
    """``(memory_s, compute_s)``: the time at the GPU's HBM bandwidth and at its peak dense FLOP/s."""
    return nbytes / gpu.hbm_bandwidth, flops / gpu.peak_flops


def plot_roofline(points: dict[str, tuple[float, float]], gpu: GPUSpec = H200, ax=None):
    """Log-log roofline of ``gpu``: attainable FLOP/s = min(peak, bandwidth x intensity), with ``points``
    ``{label: (flops, bytes)}`` placed at their intensity on the roof. Returns the figure."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
    else:
        fig = ax.figure
    ridge = gpu.peak_flops / gpu.hbm_bandwidth
    intensities = [f / b for f, b in points.values()]
    lo = min([0.5, *intensities]) / 2
    hi = max([ridge * 20, *intensities]) * 2
    xs = [lo, ridge, hi]
    ax.plot(xs, [min(gpu.peak_flops, gpu.hbm_bandwidth * x) / 1e12 for x in xs], color="black", lw=2)
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/byte", (ridge, gpu.peak_flops / 1e12 / 40), xytext=(6, 0),
                textcoords="offset points", color="grey", fontsize=8)
    for i, (label, (flops, nbytes)) in enumerate(points.items()):
        x = flops / nbytes
        y = min(gpu.peak_flops, gpu.hbm_bandwidth * x) / 1e12
        ax.scatter([x], [y], zorder=3, color=f"C{i}")
        text = f"{label}\n{x:,.0f} FLOP/byte" if x >= 10 else f"{label}\n{x:.1f} FLOP/byte"
        ax.annotate(text, (x, y), xytext=(6, -24 if x < ridge else -28), textcoords="offset points", fontsize=8,
                    color=f"C{i}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(f"{gpu.name}: {gpu.hbm_bandwidth / 1e12:.1f} TB/s, {gpu.peak_flops / 1e12:.0f} dense bf16 TFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    return fig


# --------------------------------------------------------------------------------------------------------
# walks through the tile loop, for the notebook's tables


def tile_walk(seq_len: int, block_size: int, block_table_row: Sequence[int], tile: int) -> list[dict]:
    """One row per key position the decode loop visits (whole tiles): the block-table entry it reads, the
    block and slot it loads, and whether the mask lets it through.

    >>> [(r["pos"], r["entry"], r["block"], r["slot"], r["valid"]) for r in tile_walk(5, 4, [3, 1], 8)][3:6]
    [(3, 0, 3, 3, True), (4, 1, 1, 0, True), (5, None, None, None, False)]
    """
    rows = []
    for start in range(0, seq_len, tile):
        for pos in range(start, start + tile):
            valid = pos < seq_len
            entry = pos // block_size if valid else None
            rows.append({"tile": start // tile, "pos": pos, "valid": valid, "entry": entry,
                         "block": int(block_table_row[entry]) if valid else None,
                         "slot": pos % block_size if valid else None})
    return rows


def online_softmax_walk(scores: torch.Tensor, values: torch.Tensor, tile: int) -> tuple[list[dict], torch.Tensor]:
    """The online softmax of one query row over ``scores [L]`` (already scaled) and ``values [L, D]``, a tile
    at a time, in float64: one row per tile with the tile's max, the running max m, the rescale factor
    alpha = exp(m_old - m_new) and the running sum l; and the final output acc / l.

    >>> rows, out = online_softmax_walk(torch.tensor([0.0, 2.0, 1.0]), torch.eye(3), 2)
    >>> [(r["tile_max"], r["m"]) for r in rows]
    [(2.0, 2.0), (1.0, 2.0)]
    >>> torch.allclose(out, torch.softmax(torch.tensor([0.0, 2.0, 1.0]).double(), 0))
    True
    """
    s, v = scores.double(), values.double()
    m, l_sum = -math.inf, 0.0
    acc = torch.zeros(v.shape[1], dtype=torch.float64)
    rows = []
    for start in range(0, s.shape[0], tile):
        st, vt = s[start:start + tile], v[start:start + tile]
        tile_max = st.max().item()
        m_new = max(m, tile_max)
        alpha = math.exp(m - m_new)
        p = torch.exp(st - m_new)
        l_sum = l_sum * alpha + p.sum().item()
        acc = acc * alpha + p @ vt
        rows.append({"tile": start // tile, "keys": f"{start}..{start + st.shape[0] - 1}", "tile_max": tile_max,
                     "m": m_new, "alpha": alpha, "l": l_sum})
        m = m_new
    return rows, acc / l_sum
