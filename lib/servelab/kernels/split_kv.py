"""Split-KV decode (flash-decoding): each sequence's keys split across programs, then a merge kernel.

Paged decode runs one program per (sequence, KV head), too few to fill a GPU when a few sequences have long
contexts. Splitting each context into NUM_SPLITS partitions gives NUM_SPLITS times more programs; stage 1
(``split_kv_decode_kernel``) stores each split's partial output and log-sum-exp, stage 2 (``merge_splits_kernel``)
combines them into the softmax over all the keys. Why, the partitioning and the merge: docs/kernels.md.

>>> import torch
>>> from servelab.kernels.split_kv import split_kv_decode
>>> k = torch.randn(8, 16, 1, 64); v = torch.randn(8, 16, 1, 64)
>>> q = torch.randn(1, 4, 64)
>>> tables = torch.arange(8, dtype=torch.int32)[None]
>>> lens = torch.tensor([100], dtype=torch.int32)
>>> split_kv_decode(q, k, v, tables, lens, num_splits=3).shape
torch.Size([1, 4, 64])
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from servelab.kernels.checks import (
    check_block_table_values,
    check_block_tables,
    check_kv_cache,
    check_out,
    check_power_of_two,
    check_queries,
    check_same_device,
    default_scale,
)
from servelab.kernels.decode import (
    DECODE_NUM_STAGES,
    DECODE_NUM_WARPS,
    DECODE_TILE,
    decode_tile,
    paged_decode,
)
from servelab.kernels.launch import LOG2E, Launch, dtype_constexprs, padded, run_all
from servelab.kernels.tiles import attend_tiles
from servelab.kernels.tuning import decode_entry, occupancy

H200_NUM_SMS = 132
MAX_SPLITS = 32
# A split shorter than this spends more on its own launch share, Q load and partial store than on keys.
MIN_TOKENS_PER_SPLIT = 256


@triton.jit
def split_kv_decode_kernel(partial_out_ptr, partial_lse_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr,
                           seq_lens_ptr, scale_log2, num_splits, stride_qs, stride_qh, stride_bt,
                           stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                           GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                           BLOCK_H: tl.constexpr, D_PAD: tl.constexpr, TILE: tl.constexpr,
                           UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, NUM_STAGES: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_q_heads = tl.num_programs(1) * GROUP
    seq_len = tl.load(seq_lens_ptr + seq)
    split_len = tl.cdiv(tl.cdiv(seq_len, num_splits), TILE) * TILE
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
    # An empty split (start >= end) stores o = 0 and lse = -inf: weight 0 in the merge, and no 0/0 NaN.
    has_keys = l_i > 0
    o = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))

    # partial_out [num_seqs, num_q_heads, num_splits, HEAD_DIM] and partial_lse [num_seqs, num_q_heads, num_splits]
    rows = (seq * num_q_heads + heads).to(tl.int64) * num_splits + split
    tl.store(partial_lse_ptr + rows, lse, mask=h_mask)
    tl.store(partial_out_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], o, mask=h_mask[:, None] & d_mask[None, :])


@triton.jit
def merge_splits_kernel(out_ptr, partial_out_ptr, partial_lse_ptr, num_splits, stride_os, stride_oh,
                        HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, SPLITS_PAD: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, D_PAD)
    s_mask = offs_s < num_splits
    d_mask = offs_d < HEAD_DIM
    rows = (seq * tl.num_programs(1) + head).to(tl.int64) * num_splits + offs_s

    lse = tl.load(partial_lse_ptr + rows, mask=s_mask, other=float("-inf"))
    lse_max = tl.max(lse, 0)  # finite: split 0 always holds the sequence's first key
    weight = tl.exp2(lse - lse_max)
    o = tl.load(partial_out_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :],
                mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    out = tl.sum(weight[:, None] * o, 0) / tl.sum(weight, 0)
    tl.store(out_ptr + seq * stride_os + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=d_mask)


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int = H200_NUM_SMS,
                      programs_per_sm: int | None = None, tile: int | None = None) -> int:
    """How many splits fill one wave of the GPU, each split an equal share of the keys in whole tiles.

    The rule:
    1. a wave is ``num_sms * programs_per_sm`` programs: as many as the GPU holds at once.
       ``programs_per_sm`` comes from the compiled kernel (``tuning.occupancy``; ``auto_num_splits`` passes
       it); None takes the table figure for the running Triton (``tuning.TUNED_DECODE``);
    2. at most ``wave // (num_seqs * num_kv_heads)`` splits: every program runs in the first wave. One split
       more would start a partial second wave, which costs a whole split's time for a few programs. A batch
       with more than half a wave of programs is therefore not split;
    3. at most ``max_seq_len // 256`` splits (a shorter split costs more in its launch share, Q load and
       partial store than in keys) and at most ``MAX_SPLITS``;
    4. of those, the fewest splits that give the same longest split: with ``n`` tiles of ``tile`` keys in the
       longest sequence and at most ``s`` splits, each split takes ``t = ceil(n / s)`` tiles and
       ``ceil(n / t)`` splits cover it. The splits are equal when ``t`` divides ``n``; otherwise only the last
       is shorter, by less than ``t`` tiles (the kernel cuts exactly so: whole tiles, ``ceil(L / splits)``).

    ``max_seq_len`` only needs to be an upper bound: ``block_tables.shape[1] * block_size`` works and needs
    no copy from the GPU. ``tile`` is the kernel's (``DECODE_TILE`` when None).

    >>> choose_num_splits(64, 8, 4096, 132, 4)      # 512 programs already fill the 528 slots: no split
    1
    >>> choose_num_splits(4, 8, 32768, 132, 4)      # 32 programs: 16 splits -> 512 of 528, 2048 keys each
    16
    >>> choose_num_splits(4, 8, 32768, 132, 3)      # 396 slots: 12 splits -> 384 programs
    12
    >>> choose_num_splits(1, 8, 512, 132, 4)        # short: at most 512 // 256 splits
    2
    """
    tile = tile or DECODE_TILE
    programs_per_sm = programs_per_sm or decode_entry()[0].programs_per_sm
    wave = num_sms * programs_per_sm
    most = min(wave // max(num_seqs * num_kv_heads, 1), max_seq_len // MIN_TOKENS_PER_SPLIT, MAX_SPLITS)
    if most <= 1:
        return 1
    tiles = -(-max_seq_len // tile)
    per_split = -(-tiles // most)
    return -(-tiles // per_split)


def auto_num_splits(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, *, num_sms: int | None = None, tile: int | None = None,
                    num_warps: int = DECODE_NUM_WARPS, num_stages: int = DECODE_NUM_STAGES) -> int:
    """``choose_num_splits`` for this call: the device's SMs and the split kernel's occupancy as compiled.

    Only shapes are read (no copy from the GPU). The occupancy is that of a stand-in launch with 16 splits:
    the number of splits is a runtime argument, and Triton compiles the same code for any multiple of 16
    (it specialises on divisibility by 16), so a 16-split launch later finds this compile in its cache.
    """
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    if num_sms is None:
        num_sms = (torch.cuda.get_device_properties(q.device).multi_processor_count
                   if q.device.type == "cuda" else H200_NUM_SMS)
    tile = decode_tile(q.dtype, tile)
    stand_in = torch.empty(1, dtype=torch.float32, device=q.device)
    launch = _split_launch(stand_in, stand_in, q, k_cache, v_cache, block_tables, seq_lens, 1.0, 16, tile,
                           num_warps, num_stages)
    return choose_num_splits(q.shape[0], num_kv_heads, block_tables.shape[1] * block_size, num_sms,
                             occupancy(launch).programs_per_sm, tile)


def _split_launch(partial_out, partial_lse, q, k_cache, v_cache, block_tables, seq_lens, scale_log2, num_splits,
                  tile, num_warps, num_stages) -> Launch:
    group, head_dim = q.shape[1] // k_cache.shape[2], k_cache.shape[3]
    return Launch(
        split_kv_decode_kernel, (q.shape[0], k_cache.shape[2], num_splits),
        (partial_out, partial_lse, q, k_cache, v_cache, block_tables, seq_lens, scale_log2, num_splits,
         q.stride(0), q.stride(1), block_tables.stride(0), *k_cache.stride()[:3], *v_cache.stride()[:3]),
        dict(GROUP=group, HEAD_DIM=head_dim, BLOCK_SIZE=k_cache.shape[1], BLOCK_H=padded(group),
             D_PAD=padded(head_dim), TILE=tile, NUM_STAGES=num_stages,
             **dtype_constexprs(split_kv_decode_kernel, q.dtype)),
        dict(num_warps=num_warps, num_stages=num_stages))


def plan_split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, *, num_splits=None, scale=None, out=None,
                         tile=None, num_warps=DECODE_NUM_WARPS, num_stages=DECODE_NUM_STAGES,
                         check_indices=True, num_sms=None):
    """Check the arguments of ``split_kv_decode`` and return ``(out, [split Launch, merge Launch])``.

    ``num_splits`` None: ``auto_num_splits`` (``num_sms`` None: the device's).
    """
    num_blocks, block_size, num_kv_heads, head_dim = check_kv_cache(k_cache, v_cache)
    num_q_heads, group = check_queries(q, k_cache, "[num_seqs, num_q_heads, head_dim]")
    num_seqs = q.shape[0]
    check_block_tables(block_tables, seq_lens, num_seqs)
    check_same_device(q=q, k_cache=k_cache, v_cache=v_cache, block_tables=block_tables, seq_lens=seq_lens)
    tile = decode_tile(q.dtype, tile)
    check_power_of_two("tile", tile, 16)
    if num_splits is None:
        num_splits = auto_num_splits(q, k_cache, v_cache, block_tables, seq_lens, num_sms=num_sms, tile=tile,
                                     num_warps=num_warps, num_stages=num_stages)
    if not 1 <= num_splits <= 65535:
        raise ValueError(f"num_splits must be in [1, 65535] (grid axis 2); got {num_splits}")
    out = check_out(out, q)
    if check_indices:
        check_block_table_values(block_tables, seq_lens, num_blocks, block_size, min_lens=1)

    partial_out = torch.empty(num_seqs, num_q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
    partial_lse = torch.empty(num_seqs, num_q_heads, num_splits, dtype=torch.float32, device=q.device)
    split = _split_launch(partial_out, partial_lse, q, k_cache, v_cache, block_tables, seq_lens,
                          default_scale(head_dim, scale) * LOG2E, num_splits, tile, num_warps, num_stages)
    merge = Launch(
        merge_splits_kernel, (num_seqs, num_q_heads),
        (out, partial_out, partial_lse, num_splits, out.stride(0), out.stride(1)),
        dict(HEAD_DIM=head_dim, D_PAD=padded(head_dim, 1), SPLITS_PAD=padded(num_splits, 1)),
        dict(num_warps=4, num_stages=1))
    return out, [split, merge]


def split_kv_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, *, num_splits: int | None = None, scale: float | None = None,
                    out: torch.Tensor | None = None, tile: int | None = None, num_warps: int = DECODE_NUM_WARPS,
                    num_stages: int = DECODE_NUM_STAGES, check_indices: bool = True) -> torch.Tensor:
    """``paged_decode`` with each sequence's keys split ``num_splits`` ways (``choose_num_splits`` if None).

    Same arguments and result as ``servelab.kernels.decode.paged_decode``; the result agrees with it up to
    rounding for any number of splits, including splits left empty by short sequences.
    """
    out, launches = plan_split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=num_splits,
                                         scale=scale, out=out, tile=tile, num_warps=num_warps,
                                         num_stages=num_stages, check_indices=check_indices)
    run_all(launches)
    return out


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                     seq_lens: torch.Tensor, *, scale: float | None = None, out: torch.Tensor | None = None,
                     num_sms: int | None = None, check_indices: bool = True) -> torch.Tensor:
    """Decode with the kernel that suits the batch: split-KV when too few programs would fill the GPU.

    The choice uses only shapes (no copy from the GPU): ``auto_num_splits``, with the block table's width
    as the longest possible sequence. Malformed shapes go to ``paged_decode``, which says what is wrong.
    """
    well_formed = (q.dim() == 3 and k_cache.dim() == 4 and block_tables.dim() == 2
                   and 0 < k_cache.shape[2] <= q.shape[1] and q.shape[1] % k_cache.shape[2] == 0)
    num_splits = auto_num_splits(q, k_cache, v_cache, block_tables, seq_lens, num_sms=num_sms) if well_formed else 1
    if num_splits == 1:
        return paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale=scale, out=out,
                            check_indices=check_indices)
    return split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=num_splits, scale=scale,
                           out=out, check_indices=check_indices)
