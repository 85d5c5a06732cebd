"""Chapter 06's cases as tensors: what a store, a decode or a merge case's plain data (shapes, lengths, a seed)
builds, the same on the learner's side and the grader's.

:func:`store_inputs` builds a store case (caches of NaN between NaN margins); :func:`paged_batch` a decode case
(the score regimes of :data:`SCORES`, "far" block ids past 2**32 elements included); :func:`stage_one` the
partials a merge case starts from, computed in float64 on the CPU (no library kernel involved).
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch

import servelab.kernels  # noqa: F401  (first: it chooses the interpreter before anything is decorated)
from servelab.kernels import exercises as ex
from servelab.kernels.reference import gather_kv

DTYPES = {"float32": torch.float32, "float16": torch.float16}
SCORES = {"normal": "random-normal queries", "large": "queries x 40 (scores in the hundreds)",
          "negative": "every score -1e4 or below",
          "huge": "queries x 1e5 (scores past fp16's 65,504: the running max must stay fp32)",
          "offset": "values + 100, queries x 0.1 (out near 100, l near the length: fp16 sums round or overflow)",
          "far": "every block id moved on by 2**32 elements of cache (see FAR)"}
_Q_SCALE = {"large": 40.0, "huge": 1e5, "offset": 0.1}
# A cache past 2**31 elements (a real one: 1M tokens of 8 x 128 bf16) needs int64 offsets: an int32 product of a
# block id and its stride wraps around. The sandbox cannot hold such a cache, so a "far" case hands the kernel
# block ids (decode) or slots (store) FAR_ELEMENTS past the small cache's start; in Triton's interpreter every
# access out there is dropped (a load gives its `other`) and counted. With int64 offsets nothing is read from or
# written into the small cache; with int32 ones the offset wraps by exactly 2**32 and lands back inside it. A
# compiled kernel would touch that memory for real: on a GPU the far cases are not run (the reference's answer
# stands in; the GPU tests cover a real cache past 2**31 elements). A far decode's small cache is all NaN and only
# whether each row of out is finite is compared: what a dropped load gives depends on the kernel's `other`.
FAR_ELEMENTS = 2**32


def far_slot(slot: int, block_size: int, num_kv_heads: int, head_dim: int) -> int:
    """A store case's slot ``slot`` moved FAR_ELEMENTS elements on (its block id by FAR_ELEMENTS / block stride)."""
    return slot + FAR_ELEMENTS // (num_kv_heads * head_dim)


def is_far(slot_mapping, block_size, num_blocks) -> list[bool]:
    return [s >= num_blocks * block_size for s in slot_mapping]


def store_inputs(slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed, device="cpu"):
    """(key, value, k_buffer, v_buffer, k_cache, v_cache, slot_mapping) of a store case: random-normal key and value
    from ``seed``, caches of NaN, each the middle of a NaN buffer with one block before it and ``block_size``
    after (where a slot of -1 or a swapped block and row would land)."""
    gen = torch.Generator().manual_seed(seed)
    n = len(slot_mapping)
    key = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(DTYPES[dtype])
    value = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(DTYPES[dtype])
    shape = (1 + num_blocks + block_size, block_size, num_kv_heads, head_dim)
    bufs = [torch.full(shape, float("nan"), dtype=DTYPES[dtype], device=device) for _ in range(2)]
    slots = torch.tensor(slot_mapping, dtype=torch.int32, device=device)
    return (key.to(device), value.to(device), *bufs, *(b[1:1 + num_blocks] for b in bufs), slots)


def paged_batch(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed,
                device="cpu") -> ex.PagedBatch:
    """The paged batch of a decode case (:func:`servelab.kernels.exercises.make_paged_batch`); ``scores``: "normal",
    "large" (queries x 40), "negative" (keys >= 1 and queries <= -1e4 / sqrt(head_dim) in every element, so
    every score q.k / sqrt(head_dim) is -1e4 or below), "huge" (queries x 1e5) or "offset" (values + 100 and
    queries x 0.1): see SCORES."""
    if scores not in SCORES:
        raise ValueError(f"scores is one of {list(SCORES)}; got {scores!r}")
    b = ex.make_paged_batch(list(seq_lens), block_size=block_size, num_q_heads=num_q_heads,
                            num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=DTYPES[dtype], seed=seed,
                            q_scale=_Q_SCALE.get(scores, 1.0))
    if scores == "offset":
        b.v_cache.add_(100.0)                      # NaN stays NaN
    if scores == "negative":
        b.k_cache.abs_().add_(1.0)                 # NaN stays NaN
        b.q = -(b.q.abs() + 1.0) * (1e4 / math.sqrt(head_dim))
    if scores == "far":      # the small cache all NaN: a kernel that reads it (an offset that wrapped) gets NaN
        stride = b.k_cache[0].numel()
        assert FAR_ELEMENTS % stride == 0, "a far case's block stride divides 2**32"
        b.block_tables.add_(FAR_ELEMENTS // stride)
        b.k_cache.fill_(float("nan"))
        b.v_cache.fill_(float("nan"))
    return ex.PagedBatch(*(t.to(device) for t in b.args), owner=b.owner)


def stage_one(b: ex.PagedBatch, num_splits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What ``split_kv_partials`` stores (part_out, part_max, part_sum; an empty split 0, -inf, 0), computed in
    float64 on the CPU, then float32: the same partials on every machine, and no library kernel involved."""
    q, k_cache, v_cache, tables, lens = (t.cpu() for t in b.args)
    num_seqs, num_q_heads, head_dim = q.shape
    group = num_q_heads // k_cache.shape[2]
    part_out = torch.zeros(num_seqs, num_q_heads, num_splits, head_dim, dtype=torch.float64)
    part_max = torch.full((num_seqs, num_q_heads, num_splits), float("-inf"), dtype=torch.float64)
    part_sum = torch.zeros(num_seqs, num_q_heads, num_splits, dtype=torch.float64)
    for s, n in enumerate(lens.tolist()):
        k = gather_kv(k_cache, tables[s], n).double().repeat_interleave(group, 1)     # [n, Hq, D]
        v = gather_kv(v_cache, tables[s], n).double().repeat_interleave(group, 1)
        scores = torch.einsum("hd,nhd->hn", q[s].double(), k) / math.sqrt(head_dim)
        for j, (lo, hi) in enumerate(ex.split_bounds(n, num_splits)):
            if lo < hi:
                m = scores[:, lo:hi].max(1).values
                p = torch.exp(scores[:, lo:hi] - m[:, None])
                part_max[s, :, j], part_sum[s, :, j] = m, p.sum(1)
                part_out[s, :, j] = torch.einsum("hn,nhd->hd", p, v[lo:hi]) / p.sum(1)[:, None]
    return part_out.float(), part_max.float(), part_sum.float()


@functools.lru_cache(maxsize=64)
def partials(case: tuple, num_splits: int):
    return stage_one(paged_batch(*case), num_splits)


@contextlib.contextmanager
def block_ids_unchecked(far: bool):
    """For a far case, the launcher's check that every block id is inside the cache is off (they are not)."""
    if not far:
        yield
        return
    check = ex.check_block_table_values
    ex.check_block_table_values = lambda *args, **kwargs: None
    try:
        yield
    finally:
        ex.check_block_table_values = check


__all__ = ["DTYPES", "FAR_ELEMENTS", "SCORES", "block_ids_unchecked", "far_slot", "is_far", "paged_batch", "partials",
           "stage_one", "store_inputs"]
