"""The paged-attention kernels against their float64 torch references.

On a machine without CUDA the kernels run in Triton's interpreter on CPU tensors (servelab.kernels sets
TRITON_INTERPRET=1 when imported first, which this module does); with a GPU they run compiled, and the
tests marked ``gpu`` (bf16, a cache past 2**31 elements, determinism) run too.

Inputs are random normal, not tiny: with |x| ~ 1e-3 an off-by-one mask moves outputs by ~1e-3 and passes
loose tolerances. Every cache slot no sequence owns is NaN, and padded block-table entries point at an
all-NaN block, so a kernel that reads one key too many, or a block it should not, returns NaN.
Sizes are kept small: the interpreter runs each program and loop iteration as Python (milliseconds each).
"""

import os
import subprocess
import sys

import pytest
import torch

import servelab.kernels as K  # decides interpreter or GPU before any kernel is decorated
from servelab.kernels import paged_decode, prefill_attention, split_kv_decode, store_kvcache
from servelab.kernels.reference import ref_paged_decode, ref_prefill_attention, ref_store_kvcache
from servelab.kernels.split_kv import auto_num_splits

DEVICE = "cuda" if torch.cuda.is_available() and not K.INTERPRETED else "cpu"
GPU = DEVICE == "cuda"


def gpu_only(test):
    """Marked ``gpu`` (scripts/gpu_check.sh runs ``-m gpu``), and skipped without a CUDA GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (compiled kernels)")(test))


# atol = rtol per dtype, against a float64 reference. fp16/bf16 errors come from rounding P to the
# input dtype before P @ V and from rounding the output; bf16 keeps 8 bits of mantissa.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
NUM_KV_HEADS = 2


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The tensors here are tiny: on 2 shared cores, torch's thread pool costs more in waits than it saves."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    tol = TOLERANCE[out.dtype]
    assert not out.isnan().any(), "NaN in the output: a masked or unowned cache slot was read"
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def make_paged_kv(seq_lens, *, block_size, head_dim, dtype, num_kv_heads=NUM_KV_HEADS, seed=0, spare_blocks=3):
    """K/V caches holding ``seq_lens`` tokens in shuffled blocks; every other slot is NaN.

    Returns ``(k_cache, v_cache, block_tables, seq_lens)``. Each block table has one column more than the
    longest sequence needs; entries past a sequence's blocks point at an all-NaN spare block. Block 0 is
    never owned either: a kernel that masks a block-table load with ``other=0`` and then uses the id
    unmasked reads NaN there.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_needed = [-(-n // block_size) for n in seq_lens]
    num_blocks = 1 + sum(blocks_needed) + spare_blocks
    ids = 1 + torch.randperm(num_blocks - 1, generator=gen)
    poison_block = ids[-1].item()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    block_tables = torch.full((len(seq_lens), max(blocks_needed) + 1), poison_block, dtype=torch.int32)
    used = 0
    for s, (n, nb) in enumerate(zip(seq_lens, blocks_needed)):
        block_tables[s, :nb] = ids[used:used + nb].to(torch.int32)
        used += nb
        pos = torch.arange(n)
        blocks, offsets = block_tables[s, pos // block_size].long(), pos % block_size
        k_cache[blocks, offsets] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v_cache[blocks, offsets] = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return k_cache.to(DEVICE), v_cache.to(DEVICE), block_tables.to(DEVICE), lens.to(DEVICE)


def randn(*shape, dtype, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


def edge_lengths(block_size):
    """One token, exactly one block, one past a block boundary, and one long enough for several tiles."""
    return [1, block_size, block_size + 1, 69]


CPU_DTYPES = [torch.float32, torch.float16]


# --- importing -------------------------------------------------------------------------------------


def test_importing_the_package_first_arranges_the_interpreter_in_a_fresh_process():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = (
        "import servelab.kernels as K, os, torch\n"
        "from servelab.kernels import paged_decode\n"
        "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "k = torch.randn(2, 16, 1, 64, device=dev); v = torch.randn(2, 16, 1, 64, device=dev)\n"
        "bt = torch.tensor([[1, 0]], dtype=torch.int32, device=dev)\n"
        "lens = torch.tensor([20], dtype=torch.int32, device=dev)\n"
        "out = paged_decode(torch.randn(1, 4, 64, device=dev), k, v, bt, lens)\n"
        "print(K.INTERPRETED, os.environ.get('TRITON_INTERPRET'), bool(out.isfinite().all()))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = "False None True" if torch.cuda.is_available() else "True 1 True"
    assert result.stdout.split("\n")[-2] == expected


# --- store_kvcache ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("dtype,head_dim", [(torch.float32, 64), (torch.float16, 128)])
def test_store_kvcache_writes_each_token_into_its_slot_and_skips_minus_one(block_size, dtype, head_dim):
    num_blocks, num_tokens = 40 // block_size + 3, 11
    shape = (num_blocks, block_size, NUM_KV_HEADS, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
    v_cache = torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)
    key = randn(num_tokens, NUM_KV_HEADS, head_dim, dtype=dtype, seed=2)
    value = randn(num_tokens, NUM_KV_HEADS, head_dim, dtype=dtype, seed=3)
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(4))[:num_tokens]
    slots[3] = -1
    slot_mapping = slots.to(torch.int32).to(DEVICE)
    k_ref, v_ref = ref_store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    torch.testing.assert_close(k_cache, k_ref, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0, equal_nan=True)


def test_store_kvcache_into_non_contiguous_cache_views():
    kv = torch.full((5, 2, 16, 2, 64), float("nan"), dtype=torch.float16, device=DEVICE)  # [blocks, K|V, ...]
    k_cache, v_cache = kv[:, 0], kv[:, 1]
    key = randn(20, 2, 64, dtype=torch.float16, seed=5)
    value = randn(20, 2, 64, dtype=torch.float16, seed=6)
    slot_mapping = torch.arange(30, 50, dtype=torch.int64, device=DEVICE)
    k_ref, v_ref = ref_store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    torch.testing.assert_close(k_cache, k_ref, atol=0, rtol=0, equal_nan=True)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0, equal_nan=True)


# --- paged decode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("block_size", [1, 16])
def test_paged_decode_matches_reference(block_size, group, head_dim, dtype):
    lens = edge_lengths(block_size)
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv(lens, block_size=block_size, head_dim=head_dim,
                                                             dtype=dtype, seed=group)
    q = randn(len(lens), NUM_KV_HEADS * group, head_dim, dtype=dtype, seed=head_dim)
    out = paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    assert_close(out, ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens))


def test_paged_decode_with_scale_tile_16_and_strided_q_and_kv():
    # K and V as views of one [blocks, 2, block_size, heads, D] tensor, q as a slice of a packed qkv tensor
    k_dense, v_dense, block_tables, seq_lens = make_paged_kv([1, 16, 17, 40], block_size=16, head_dim=64,
                                                             dtype=torch.float16)
    kv = torch.stack([k_dense, v_dense], dim=1)
    k_cache, v_cache = kv[:, 0], kv[:, 1]
    qkv = randn(4, 8 + 2 + 2, 64, dtype=torch.float16)
    q = qkv[:, :8]
    out = paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale=0.3, tile=16)
    assert_close(out, ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale=0.3))


def test_head_dim_that_is_not_a_power_of_two_is_padded_and_masked():
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([1, 16, 17, 40], block_size=16, head_dim=80,
                                                             dtype=torch.float16, seed=15)
    q = randn(4, 8, 80, dtype=torch.float16, seed=16)
    assert_close(paged_decode(q, k_cache, v_cache, block_tables, seq_lens),
                 ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens))
    args = make_prefill_batch([(6, 10), (3, 0)], block_size=16, group=4, head_dim=80, dtype=torch.float16, seed=17)
    assert_close(prefill_attention(*args), ref_prefill_attention(*args))


def test_paged_decode_bf16():
    """In the interpreter bf16 is upcast to fp32 right after loading; compiled, it stays bf16 (tensor cores)."""
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([3, 17], block_size=16, head_dim=64,
                                                             dtype=torch.bfloat16)
    q = randn(2, 8, 64, dtype=torch.bfloat16)
    out = paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    assert_close(out, ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens))


# --- split-KV decode -------------------------------------------------------------------------------


@pytest.mark.parametrize("num_splits", [1, 3, 8])
@pytest.mark.parametrize("block_size,group,head_dim,dtype", [
    (16, 4, 64, torch.float16),
    (1, 8, 128, torch.float32),
    (16, 1, 128, torch.float16),
])
def test_split_kv_decode_matches_reference_including_empty_splits(block_size, group, head_dim, dtype, num_splits):
    # length 1 leaves every split but the first empty; 100 with 8 splits of 32 leaves the last four empty
    lens = [1, block_size + 1, 100]
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv(lens, block_size=block_size, head_dim=head_dim,
                                                             dtype=dtype, seed=7)
    q = randn(len(lens), NUM_KV_HEADS * group, head_dim, dtype=dtype, seed=8)
    out = split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=num_splits)
    assert_close(out, ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens))


def test_split_kv_decode_agrees_with_paged_decode():
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([130, 64], block_size=16, head_dim=64,
                                                             dtype=torch.float32, seed=9)
    q = randn(2, 8, 64, dtype=torch.float32, seed=10)
    whole = paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    split = split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=4)
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)


def test_choose_num_splits_takes_one_whole_wave_of_equal_splits():
    # an H200: 132 SMs; 4 programs per SM (Triton 3.9's defaults) -> 528 programs a wave, 3 per SM -> 396
    assert K.choose_num_splits(4, 8, 32768, 132, 4) == 16     # 32 programs -> 512 <= 528, 2048 keys each
    assert K.choose_num_splits(4, 8, 32768, 132, 3) == 12     # 384 <= 396
    assert K.choose_num_splits(64, 8, 4096, 132, 4) == 1      # 512 programs already fill the wave
    assert K.choose_num_splits(40, 8, 32768, 132, 4) == 1     # 320: two splits would start a second wave
    assert K.choose_num_splits(128, 8, 8192, 132, 4) == 1     # more programs than slots: no split
    assert K.choose_num_splits(1, 8, 2048, 132, 4) == 8       # at least 256 keys per split
    assert K.choose_num_splits(1, 8, 100, 132, 4) == 1        # a single short sequence
    assert K.choose_num_splits(1, 1, 1 << 20, 132, 4) == 32   # at most MAX_SPLITS
    assert K.choose_num_splits(1, 8, 33 * 64, 132, 4) == 7    # 33 tiles, 8 allowed: 5 tiles a split, 7 cover it
    # the defaults: 132 SMs and the table's figure for the running Triton (4 per SM for 3.6 and 3.9)
    assert K.choose_num_splits(4, 8, 32768) == K.choose_num_splits(4, 8, 32768, 132, 4) == 16


def kernel_split_lens(seq_len, num_splits, tile):
    """The keys each split covers, cut as split_kv_decode_kernel cuts them."""
    per_split = -(-seq_len // num_splits)
    split_len = -(-per_split // tile) * tile
    return [max(0, min((j + 1) * split_len, seq_len) - j * split_len) for j in range(num_splits)]


@pytest.mark.parametrize("num_seqs,num_kv_heads,max_seq_len,num_sms,per_sm,tile", [
    (4, 8, 32768, 132, 4, 64), (4, 8, 32768, 132, 3, 64), (2, 8, 5000, 132, 4, 64), (1, 8, 2048 + 64, 132, 4, 64),
    (3, 4, 100_000, 108, 2, 32), (1, 32, 4096, 132, 5, 64), (7, 2, 65536, 78, 4, 128), (1, 8, 700, 132, 4, 16),
])
def test_choose_num_splits_stays_in_one_wave_with_equal_splits(num_seqs, num_kv_heads, max_seq_len, num_sms, per_sm,
                                                               tile):
    wave, programs = num_sms * per_sm, num_seqs * num_kv_heads
    splits = K.choose_num_splits(num_seqs, num_kv_heads, max_seq_len, num_sms, per_sm, tile)
    assert splits == 1 or programs * splits <= wave, "a partial second wave"
    assert splits == 1 or max_seq_len // splits >= 256
    lens = kernel_split_lens(max_seq_len, splits, tile)
    assert sum(lens) == max_seq_len and min(lens) > 0, f"an empty split in {lens}"
    assert len(set(lens[:-1])) <= 1 and lens[-1] <= lens[0], f"unequal splits {lens}"
    # no other count allowed in the wave gives a shorter longest split
    most = min(wave // programs, max_seq_len // 256, 32)
    best = min(max(kernel_split_lens(max_seq_len, n, tile)) for n in range(1, max(most, 1) + 1))
    assert max(lens) == best


def test_decode_attention_splits_only_a_batch_too_small_for_the_gpu():
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([600, 3], block_size=16, head_dim=64,
                                                             dtype=torch.float32, seed=11)
    q = randn(2, 8, 64, dtype=torch.float32, seed=12)
    ref = ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    # the bound is the block table's width: 39 blocks of 16 = 624 keys, so at most 624 // 256 = 2 splits
    assert auto_num_splits(q, k_cache, v_cache, block_tables, seq_lens, num_sms=132) == 2
    assert auto_num_splits(q, k_cache, v_cache, block_tables, seq_lens, num_sms=1) == 1  # 4 programs fill it
    assert_close(K.decode_attention(q, k_cache, v_cache, block_tables, seq_lens, num_sms=132), ref)
    assert_close(K.decode_attention(q, k_cache, v_cache, block_tables, seq_lens, num_sms=1), ref)


# --- prefill over a cached prefix ------------------------------------------------------------------

# (chunk length, cached prefix) per sequence: a lone first token, a prompt from an empty cache, a chunk
# starting on a block boundary and crossing two, a chunk starting mid-block, a decode token.
CHUNKS = [(1, 0), (5, 0), (20, 16), (7, 9), (1, 40)]


def make_prefill_batch(chunks, *, block_size, group, head_dim, dtype, seed=0):
    seq_lens = [q_len + ctx for q_len, ctx in chunks]
    k_cache, v_cache, block_tables, lens = make_paged_kv(seq_lens, block_size=block_size, head_dim=head_dim,
                                                         dtype=dtype, seed=seed)
    cu = torch.tensor([0] + [q_len for q_len, _ in chunks]).cumsum(0).to(torch.int32).to(DEVICE)
    q = randn(int(cu[-1]), NUM_KV_HEADS * group, head_dim, dtype=dtype, seed=seed + 1)
    return q, k_cache, v_cache, block_tables, lens, cu


@pytest.mark.parametrize("block_size,group,head_dim,dtype", [
    (16, 1, 64, torch.float32),
    (16, 4, 128, torch.float16),
    (16, 8, 64, torch.float16),
    (1, 8, 128, torch.float32),
    (1, 4, 64, torch.float16),
    (1, 1, 128, torch.float16),
])
def test_prefill_attention_matches_reference(block_size, group, head_dim, dtype):
    args = make_prefill_batch(CHUNKS, block_size=block_size, group=group, head_dim=head_dim, dtype=dtype, seed=group)
    assert_close(prefill_attention(*args), ref_prefill_attention(*args))


def test_prefill_attention_with_small_query_blocks_and_tiles():
    # block_m 16 with group 8 gives 2 tokens per query block: many blocks, each with its own causal limit
    args = make_prefill_batch([(9, 3), (20, 16), (0, 5), (3, 0)], block_size=16, group=8, head_dim=64,
                              dtype=torch.float16, seed=11)
    assert_close(prefill_attention(*args, block_m=16, tile=16), ref_prefill_attention(*args))


def test_prefill_attention_bf16():
    """As test_paged_decode_bf16."""
    args = make_prefill_batch([(6, 10), (1, 3)], block_size=16, group=4, head_dim=64, dtype=torch.bfloat16)
    assert_close(prefill_attention(*args), ref_prefill_attention(*args))


def test_store_then_prefill_then_decode_like_an_engine_step():
    """nano-vllm's order: write the chunk's K/V through the slot mapping, then attend through the block table."""
    block_size, head_dim, dtype = 16, 64, torch.float16
    chunks = [(12, 20), (5, 0)]
    q, k_cache, v_cache, block_tables, seq_lens, cu = make_prefill_batch(chunks, block_size=block_size, group=4,
                                                                         head_dim=head_dim, dtype=dtype, seed=12)
    # forget the chunks' K/V, then write them back with store_kvcache
    key = randn(17, NUM_KV_HEADS, head_dim, dtype=dtype, seed=13)
    value = randn(17, NUM_KV_HEADS, head_dim, dtype=dtype, seed=14)
    slots = []
    for s, (q_len, ctx) in enumerate(chunks):
        pos = torch.arange(ctx, ctx + q_len)
        slots.append(block_tables[s].cpu()[pos // block_size].long() * block_size + pos % block_size)
    slot_mapping = torch.cat(slots).to(torch.int32).to(DEVICE)
    store_kvcache(key, value, k_cache, v_cache, slot_mapping)
    assert_close(prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu),
                 ref_prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu))
    # a decode step that attends to the same cache: each sequence's last token
    last = cu[1:] - 1
    assert_close(paged_decode(q[last.long()], k_cache, v_cache, block_tables, seq_lens),
                 ref_paged_decode(q[last.long()], k_cache, v_cache, block_tables, seq_lens))


# --- argument checks -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def decode_args():
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([5, 20], block_size=16, head_dim=64,
                                                             dtype=torch.float16)
    return randn(2, 8, 64, dtype=torch.float16), k_cache, v_cache, block_tables, seq_lens


@pytest.mark.parametrize("change,error,message", [
    (lambda a: {**a, "block_tables": a["block_tables"].long()}, TypeError, "block_tables must be int32"),
    (lambda a: {**a, "seq_lens": a["seq_lens"].float()}, TypeError, "seq_lens must be int32"),
    (lambda a: {**a, "q": a["q"].float()}, TypeError, "q must have the cache's dtype"),
    (lambda a: {**a, "v_cache": a["v_cache"].float()}, TypeError, "v_cache must have k_cache's dtype"),
    (lambda a: {**a, "q": a["q"][:, :7]}, ValueError, r"num_q_heads \(7\) must be a positive multiple"),
    (lambda a: {**a, "q": a["q"][..., :32]}, ValueError, "head_dim 32 differs"),
    (lambda a: {**a, "q": a["q"][:1]}, ValueError, "must both have num_seqs = 1 rows"),
    (lambda a: {**a, "k_cache": a["k_cache"][..., 0]}, ValueError, "k_cache must be 4-D"),
    (lambda a: {**a, "k_cache": a["k_cache"][:, :, :1]}, ValueError, "k_cache and v_cache must have one shape"),
    (lambda a: {**a, "q": a["q"].transpose(1, 2).contiguous().transpose(1, 2)}, ValueError,
     "contiguous last dimension"),
    (lambda a: {**a, "block_tables": a["block_tables"].clone().fill_(99)}, ValueError,
     r"block_tables\[0, 0\] = 99 is outside \[0, 7\)"),
    (lambda a: {**a, "seq_lens": a["seq_lens"] * 0}, ValueError, r"seq_lens\[0\] = 0 is below its minimum 1"),
    (lambda a: {**a, "seq_lens": a["seq_lens"] * 3}, ValueError, "does not fit its block table"),
    (lambda a: {**a, "tile": 24}, ValueError, "tile must be a power of two >= 16"),
    (lambda a: {**a, "q": a["q"].to("meta")}, ValueError, "all tensors must be on one device"),
])
@pytest.mark.parametrize("entry", [paged_decode, split_kv_decode])
def test_decode_rejects_bad_arguments(decode_args, entry, change, error, message):
    names = ["q", "k_cache", "v_cache", "block_tables", "seq_lens"]
    args = change(dict(zip(names, decode_args)))
    with pytest.raises(error, match=message):
        entry(**args)


def test_split_kv_decode_rejects_zero_splits(decode_args):
    with pytest.raises(ValueError, match=r"num_splits must be in \[1, 65535\]"):
        split_kv_decode(*decode_args, num_splits=0)


def test_prefill_rejects_bad_cumulative_lengths_and_short_sequences():
    q, k_cache, v_cache, block_tables, seq_lens, cu = make_prefill_batch([(3, 2), (4, 0)], block_size=16, group=1,
                                                                         head_dim=64, dtype=torch.float16)
    with pytest.raises(ValueError, match="cu_seqlens_q must rise from 0 to total_q_tokens = 7"):
        prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu.flip(0).contiguous())
    with pytest.raises(ValueError, match=r"seq_lens\[1\] = 2 is below its minimum 4"):
        prefill_attention(q, k_cache, v_cache, block_tables, seq_lens - 2, cu)
    with pytest.raises(TypeError, match="cu_seqlens_q must be int32"):
        prefill_attention(q, k_cache, v_cache, block_tables, seq_lens, cu.long())


def test_store_kvcache_rejects_bad_slots_and_shapes():
    k_cache = torch.zeros(2, 4, 2, 64, device=DEVICE)
    key = torch.zeros(3, 2, 64, device=DEVICE)
    with pytest.raises(ValueError, match=r"slot_mapping\[2\] = 8 is outside \[-1, 8\)"):
        store_kvcache(key, key, k_cache, k_cache.clone(), torch.tensor([0, 1, 8], device=DEVICE))
    with pytest.raises(ValueError, match="must have one num_tokens"):
        store_kvcache(key, key, k_cache, k_cache.clone(), torch.tensor([0, 1], device=DEVICE))
    with pytest.raises(ValueError, match="key has"):
        store_kvcache(key[:, :1], key, k_cache, k_cache.clone(), torch.tensor([0, 1, 2], device=DEVICE))


# --- on the GPU only -------------------------------------------------------------------------------


@gpu_only
@pytest.mark.parametrize("block_size,group,head_dim", [(16, 4, 128), (1, 8, 64), (16, 1, 128)])
def test_bf16_on_the_gpu_matches_reference(block_size, group, head_dim):
    dtype = torch.bfloat16
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv(edge_lengths(block_size) + [1000], block_size=block_size,
                                                             head_dim=head_dim, dtype=dtype, seed=20)
    q = randn(5, NUM_KV_HEADS * group, head_dim, dtype=dtype, seed=21)
    ref = ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    assert_close(paged_decode(q, k_cache, v_cache, block_tables, seq_lens), ref)
    assert_close(split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=5), ref)
    args = make_prefill_batch(CHUNKS + [(300, 200)], block_size=block_size, group=group, head_dim=head_dim,
                              dtype=dtype, seed=22)
    assert_close(prefill_attention(*args), ref_prefill_attention(*args))


@gpu_only
def test_cache_past_two_to_the_31_elements_on_the_gpu():
    """Block ids times the block stride overflow int32 here; the kernels compute offsets in int64."""
    block_size, heads, head_dim, dtype = 16, 8, 128, torch.bfloat16
    num_blocks = 2**31 // (block_size * heads * head_dim) + 64  # 4 GiB per cache
    k_cache = torch.full((num_blocks, block_size, heads, head_dim), float("nan"), dtype=dtype, device="cuda")
    v_cache = torch.full_like(k_cache, float("nan"))
    blocks = torch.arange(num_blocks - 8, num_blocks, dtype=torch.int32, device="cuda")
    k_cache[blocks.long()] = torch.randn(8, block_size, heads, head_dim, device="cuda").to(dtype)
    v_cache[blocks.long()] = torch.randn(8, block_size, heads, head_dim, device="cuda").to(dtype)
    block_tables = blocks.flip(0)[None].contiguous()
    seq_lens = torch.tensor([8 * block_size - 3], dtype=torch.int32, device="cuda")
    q = torch.randn(1, 4 * heads, head_dim, device="cuda").to(dtype)
    ref = ref_paged_decode(q, k_cache, v_cache, block_tables, seq_lens)
    assert_close(paged_decode(q, k_cache, v_cache, block_tables, seq_lens), ref)
    assert_close(split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=3), ref)
    cu = torch.tensor([0, 40], dtype=torch.int32, device="cuda")
    qp = torch.randn(40, 4 * heads, head_dim, device="cuda").to(dtype)
    assert_close(prefill_attention(qp, k_cache, v_cache, block_tables, seq_lens, cu),
                 ref_prefill_attention(qp, k_cache, v_cache, block_tables, seq_lens, cu))
    key = torch.randn(2, heads, head_dim, device="cuda").to(dtype)
    slot_mapping = (blocks[:2].long() * block_size + 5)
    store_kvcache(key, key, k_cache, v_cache, slot_mapping)
    assert torch.equal(k_cache[blocks[:2].long(), 5], key)


@gpu_only
def test_kernels_are_deterministic_on_the_gpu():
    k_cache, v_cache, block_tables, seq_lens = make_paged_kv([700, 33, 1], block_size=16, head_dim=128,
                                                             dtype=torch.bfloat16, seed=30)
    q = randn(3, NUM_KV_HEADS * 4, 128, dtype=torch.bfloat16, seed=31)
    for run in (lambda: paged_decode(q, k_cache, v_cache, block_tables, seq_lens),
                lambda: split_kv_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits=4)):
        assert torch.equal(run(), run())
