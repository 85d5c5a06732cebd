"""servelab.kernels.exercises: the chapter-6 launchers, stage 1 of split-KV, the traffic formula and the walks.

The launchers are exercised with small reference kernels written here (the same designs the chapter asks
for), in Triton's interpreter without a GPU; their outputs are compared with the float64 references.
"""

import doctest
import math

import pytest
import torch

# isort: off
# servelab.kernels first: without CUDA it sets TRITON_INTERPRET=1, which Triton reads when triton.language's own
# helpers (tl.zeros, ...) and the kernels below are decorated
import servelab.kernels as K
import triton
import triton.language as tl
# isort: on

from servelab.kernels import cases as bench
from servelab.kernels import exercises as ex
from servelab.kernels.reference import ref_paged_decode, ref_store_kvcache

DEVICE = "cpu" if K.INTERPRETED else "cuda"
DTYPE, TOL = (torch.float32, 1e-5) if K.INTERPRETED else (torch.float16, 3e-3)


@triton.jit
def _store(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr, stride_token, stride_head,
           stride_block, stride_slot, stride_kv_head, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    d = tl.arange(0, HEAD_DIM)
    # a branch, not `mask=(d < HEAD_DIM) & (slot >= 0)`: in the interpreter (triton 3.9) `&` of a loaded scalar's
    # comparison with a block mask gives an integer mask that tl.load rejects ("mask has unsupported dtype")
    if slot >= 0:
        dst = (slot // BLOCK_SIZE) * stride_block + (slot % BLOCK_SIZE) * stride_slot + head * stride_kv_head + d
        src = token * stride_token + head * stride_head + d
        tl.store(k_cache_ptr + dst, tl.load(key_ptr + src))
        tl.store(v_cache_ptr + dst, tl.load(value_ptr + src))


@triton.jit
def _decode(out_ptr, q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, scale, stride_q_seq,
            stride_q_head, stride_table, stride_block, stride_slot, stride_kv_head, GROUP: tl.constexpr,
            BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    n = tl.load(seq_lens_ptr + seq)
    r = tl.arange(0, BLOCK_H)
    d = tl.arange(0, HEAD_DIM)
    offs = seq * stride_q_seq + (kv_head * GROUP + r)[:, None] * stride_q_head + d[None, :]
    q = tl.load(q_ptr + offs, mask=(r < GROUP)[:, None], other=0.0)
    m = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    total = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    for start in range(0, n, TILE):
        pos = start + tl.arange(0, TILE)
        ok = pos < n
        blk = tl.load(block_tables_ptr + seq * stride_table + pos // BLOCK_SIZE, mask=ok, other=0).to(tl.int64)
        kv = blk * stride_block + (pos % BLOCK_SIZE) * stride_slot + kv_head * stride_kv_head
        k = tl.load(k_cache_ptr + kv[:, None] + d[None, :], mask=ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv[:, None] + d[None, :], mask=ok[:, None], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        total = total * tl.exp(m - m_new) + tl.sum(p, 1)
        acc = acc * tl.exp(m - m_new)[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(out_ptr + offs, (acc / total[:, None]).to(out_ptr.dtype.element_ty), mask=(r < GROUP)[:, None])


@triton.jit
def _merge(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, stride_out_seq, stride_out_head,
           NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    j = tl.arange(0, SPLITS_PAD)
    ok = j < NUM_SPLITS
    rows = (seq * tl.num_programs(1) + head) * NUM_SPLITS + j
    m = tl.load(part_max_ptr + rows, mask=ok, other=float("-inf"))
    w = tl.load(part_sum_ptr + rows, mask=ok, other=0.0) * tl.exp(m - tl.max(m, 0))
    d = tl.arange(0, HEAD_DIM)
    o = tl.load(part_out_ptr + rows[:, None] * HEAD_DIM + d[None, :], mask=ok[:, None], other=0.0)
    out = tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)
    tl.store(out_ptr + seq * stride_out_seq + head * stride_out_head + d, out.to(out_ptr.dtype.element_ty))


def close(out, b):
    ref = ref_paged_decode(*(t.cpu() for t in b.args))
    return bool(torch.isfinite(out).all()) and bool(((out.cpu().double() - ref).abs() <= TOL * (1 + ref.abs())).all())


@pytest.mark.parametrize("block_size, group, lens", [(1, 1, [1, 17]), (4, 4, [4, 5, 1, 33]), (16, 2, [16, 17])])
def test_launch_decode_runs_a_decode_kernel_through_the_block_table(block_size, group, lens):
    b = ex.make_paged_batch(lens, block_size=block_size, num_q_heads=2 * group, num_kv_heads=2, head_dim=16,
                            dtype=DTYPE, device=DEVICE)
    assert close(ex.launch_decode(_decode, *b.args), b)
    out = torch.empty_like(b.q)
    assert ex.launch_decode(_decode, *b.args, out=out) is out and close(out, b)


def test_make_paged_batch_poisons_every_slot_no_token_owns():
    b = ex.make_paged_batch([5, 1], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=16, table_width=4)
    assert b.block_tables.shape == (2, 4) and len(set(b.block_tables.flatten().tolist())) == 8
    assert 0 not in b.block_tables.tolist()[0] + b.block_tables.tolist()[1]
    written = ~b.k_cache.isnan().all(-1).all(-1)                    # [num_blocks, block_size]
    assert int(written.sum()) == 6
    for (blk, slot), (seq, pos) in b.owner.items():
        assert bool(written[blk, slot]) == (pos < b.seq_lens[seq].item())
    big = ex.make_paged_batch([3], block_size=4, num_q_heads=1, num_kv_heads=1, head_dim=16, q_scale=40.0)
    assert big.q.abs().max() > 10
    with pytest.raises(ValueError, match="narrower"):
        ex.make_paged_batch([9], block_size=4, num_q_heads=1, num_kv_heads=1, head_dim=16, table_width=2)


def test_launch_store_kv_writes_slots_and_skips_minus_one():
    key, value = torch.randn(4, 2, 16).to(DTYPE), torch.randn(4, 2, 16).to(DTYPE)
    k_cache, v_cache = (torch.full((3, 4, 2, 16), float("nan"), dtype=DTYPE) for _ in range(2))
    slots = torch.tensor([6, -1, 0, 11], dtype=torch.int32)
    k_want, v_want = ref_store_kvcache(key, value, k_cache, v_cache, slots)
    k_dev, v_dev = k_cache.to(DEVICE), v_cache.to(DEVICE)
    ex.launch_store_kv(_store, key.to(DEVICE), value.to(DEVICE), k_dev, v_dev, slots.to(DEVICE))
    assert torch.equal(k_dev.cpu().nan_to_num(7.0), k_want.nan_to_num(7.0))
    assert torch.equal(v_dev.cpu().nan_to_num(7.0), v_want.nan_to_num(7.0))


@pytest.mark.parametrize("num_splits", [1, 2, 3, 5])
def test_split_kv_partials_then_merge_equal_the_decode_reference(num_splits):
    b = ex.make_paged_batch([1, 5, 40], block_size=4, num_q_heads=8, num_kv_heads=2, head_dim=16, dtype=DTYPE,
                            device=DEVICE, seed=3)
    part_out, part_max, part_sum = ex.split_kv_partials(*b.args, num_splits)
    assert part_out.shape == (3, 8, num_splits, 16) and part_max.shape == part_sum.shape == (3, 8, num_splits)
    # the sequence of 1 key has only its first split; the others are empty: 0, -inf, 0
    assert bool((part_sum[0, :, 1:] == 0).all()) and bool(torch.isinf(part_max[0, :, 1:]).all())
    ref = ref_paged_decode(*(t.cpu() for t in b.args))
    assert torch.allclose(ex.ref_merge(part_out.cpu(), part_max.cpu(), part_sum.cpu()), ref, atol=TOL, rtol=TOL)
    assert close(ex.launch_merge(_merge, part_out, part_max, part_sum, torch.empty_like(b.q)), b)


def test_split_partials_hold_each_splits_own_max_and_sum():
    b = ex.make_paged_batch([40], block_size=16, num_q_heads=1, num_kv_heads=1, head_dim=16, seed=5)
    _, part_max, part_sum = ex.split_kv_partials(*b.args, 3)
    keys = b.k_cache[b.block_tables[0, :3].long()].reshape(-1, 16)[:40].double()
    scores = keys @ b.q[0, 0].double() / math.sqrt(16)
    for j, (lo, hi) in enumerate(ex.split_bounds(40, 3)):
        assert part_max[0, 0, j].item() == pytest.approx(scores[lo:hi].max().item(), abs=1e-5)
        assert part_sum[0, 0, j].item() == pytest.approx(torch.exp(scores[lo:hi] - scores[lo:hi].max()).sum().item(),
                                                         rel=1e-5)


def test_split_bounds_cover_the_sequence_in_whole_tiles():
    for n in (1, 15, 16, 17, 40, 100):
        for splits in (1, 2, 3, 7):
            bounds = ex.split_bounds(n, splits)
            assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) == splits
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert all((hi - lo) % 16 == 0 for lo, hi in bounds[:-1] if hi < n)


def test_decode_traffic_agrees_with_the_benchmark_bytes_and_flops():
    case = bench.Case("decode", [4096, 100, 7])
    q = torch.empty(3, 32, 128, dtype=torch.bfloat16)
    k_cache = torch.empty(1, 16, 8, 128, dtype=torch.bfloat16)
    nbytes, flops = ex.decode_traffic(case.seq_lens, 32, 8, 128, 2)
    block_table_bytes = sum(-(-n // 16) for n in case.seq_lens) * 4
    assert nbytes == bench.bytes_moved(case, q, k_cache) - block_table_bytes
    assert flops == bench.causal_flops(case, 32, 128)
    memory_s, compute_s = ex.roofline_time_s(nbytes, flops)
    assert memory_s / compute_s == pytest.approx(nbytes / flops * 989e12 / 4.8e12)


def test_online_softmax_walk_equals_softmax_and_rescales_when_the_max_grows():
    scores = torch.tensor([0.0, 1.0, 5.0, 2.0, 9.0])
    values = torch.randn(5, 3, dtype=torch.float64)
    rows, out = ex.online_softmax_walk(scores, values, tile=2)
    assert [r["m"] for r in rows] == [1.0, 5.0, 9.0]
    assert rows[1]["alpha"] == pytest.approx(math.exp(1.0 - 5.0)) and rows[0]["alpha"] == 0.0
    assert torch.allclose(out, torch.softmax(scores.double(), 0) @ values)


def test_tile_walk_masks_the_tail_of_the_last_tile():
    rows = ex.tile_walk(6, 4, [3, 1, 7], 8)
    assert [r["block"] for r in rows] == [3, 3, 3, 3, 1, 1, None, None]
    assert [r["valid"] for r in rows].count(True) == 6


def test_plot_roofline_places_points_on_the_roof():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = ex.plot_roofline({"decode": (4.0, 1.0), "prefill": (1e4, 1.0)})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and "H200" in ax.get_title()
    plt.close(fig)


def test_launchers_reject_what_the_exercise_kernels_do_not_handle():
    b = ex.make_paged_batch([3], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=16)
    with pytest.raises(ValueError, match="tile must be a power of two"):
        ex.launch_decode(_decode, *b.args, tile=8)
    odd = ex.make_paged_batch([3], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=24)
    with pytest.raises(ValueError, match="power of two >= 16"):
        ex.launch_decode(_decode, *odd.args)
    if K.INTERPRETED:
        bf = ex.make_paged_batch([3], block_size=4, num_q_heads=2, num_kv_heads=1, head_dim=16, dtype=torch.bfloat16)
        with pytest.raises(TypeError, match="bf16"):
            ex.launch_decode(_decode, *bf.args)
    with pytest.raises(ValueError, match="out must be a contiguous tensor like q"):
        ex.launch_decode(_decode, *b.args, out=torch.empty(1, 2, 8))


def test_the_docstring_examples_hold():
    result = doctest.testmod(ex)
    assert result.attempted >= 8 and result.failed == 0
