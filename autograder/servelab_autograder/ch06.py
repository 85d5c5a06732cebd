"""Hidden-test helpers for ``ch06_triton_paged_attention``.

The learner writes three Triton kernels and one formula:

* ``store_kv_kernel``: new tokens' K/V into the paged cache through a slot mapping (slot -1 skips);
* ``decode_kernel``: one program per (sequence, KV head), the GQA group as the rows of ``tl.dot``, a fixed
  tile of key positions per iteration through the block table, and an online softmax;
* ``merge_kernel``: the reduce of split-KV decode, after stage 1 (:func:`servelab.kernels.exercises.split_kv_partials`);
* ``decode_traffic(seq_lens, num_q_heads, num_kv_heads, head_dim, bytes_per_element)``: a decode step's bytes
  and FLOPs; and the drills, whose answers are computed here from the reference formula.

The kernels are launched exactly as the notebook's locked cells launch them (:mod:`servelab.kernels.exercises`)
at small sizes, in Triton's interpreter when there is no GPU, and compared with the float64 references of
:mod:`servelab.kernels.reference` on random-normal inputs. Every cache slot no token owns is NaN, every
block-table entry past a sequence's blocks points at an all-NaN block of its own, block 0 is never used,
and one case has large scores (an exp without the running maximum overflows there). Cases cover block sizes
1, 4 and 16, GQA groups 1, 2 and 4, and lengths 1, one block, one past a block and several tiles.

In the interpreter every load and store is also traced (:class:`_Trace`): reading a block-table entry past a
sequence's blocks, a key past its length or another head's data fails even when the output happens to be
right, and a wild address is dropped instead of crashing the process. A failure names the pitfall that
explains it on its first line when one does (graders often show only that line), then the case, and what
was read, written or computed. Everything is converted to plain numbers before it is compared; failures raise
``AssertionError`` explicitly (the checks also work under ``python -O``), and warnings are silenced so that
nothing reaches stderr. :func:`diagnose` returns a check's message without raising, for visible asserts.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import random
import warnings
from collections.abc import Callable, Mapping
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass

import numpy as np
import torch

import servelab.kernels  # noqa: F401  (chooses the interpreter before anything is decorated)
from servelab.costmodel import H200
from servelab.kernels import exercises as ex
from servelab.kernels.launch import interpreted
from servelab.kernels.reference import gather_kv, ref_paged_decode, ref_store_kvcache
from servelab_autograder import common

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_decode_kernel",
    "check_decode_traffic",
    "check_drills",
    "check_merge_kernel",
    "check_store_kv_kernel",
    "diagnose",
    "safe_decode",
    "safe_split_kv_decode",
    "safe_store_kv",
]

# Every pitfall the chapter names, in the words of its "Common pitfalls" list. Each known-wrong submission in
# autograder/known_wrong/ch06_triton_paged_attention/ produces one of these messages (its first sentence).
PITFALLS = {
    "store_minus_one": "Pitfall: a slot of -1 was written. -1 marks a token whose K/V is already in the cache: "
    "skip it (no load, no store).",
    "store_swapped": "Pitfall: block and offset were swapped. slot // BLOCK_SIZE is the block, slot % BLOCK_SIZE "
    "the row inside it.",
    "mask_off_by_one": "Pitfall: the mask is off by one at a block boundary. Keys sit at positions 0 .. "
    "seq_len - 1: mask with pos < seq_len, not pos <= seq_len.",
    "table_past_end": "Pitfall: a block-table entry past the sequence's blocks was read. Mask the block-table "
    "load with pos < seq_len too: entries past ceil(seq_len / BLOCK_SIZE) are stale ids or padding.",
    "unmasked_kv": "Pitfall: K or V was loaded without the mask. Positions past seq_len are slots no token "
    "owns (NaN here, stale keys in a real cache): load with mask=pos < seq_len, other=0.",
    "no_running_max": "Pitfall: softmax without the running maximum. exp(score) overflows for scores past ~88 "
    "(fp32): subtract the running max m and rescale acc and l by exp(m_old - m_new).",
    "no_rescale": "Pitfall: acc and l were not rescaled when the running maximum grew. Multiply both by "
    "alpha = exp(m_old - m_new) before adding the new tile.",
    "no_scale": "Pitfall: the scores were not multiplied by scale. Softmax takes q.k * scale, scale = "
    "1/sqrt(head_dim).",
    "gqa_mapping": "Pitfall: query heads were paired with the wrong KV head. Query head h reads KV head "
    "h // GROUP: program (seq, kv_head) owns heads kv_head * GROUP .. kv_head * GROUP + GROUP - 1.",
    "padded_rows": "Pitfall: the padded rows were stored. Rows GROUP .. BLOCK_H - 1 of the tile are padding: "
    "mask the store with rows < GROUP, or they overwrite another KV head's query heads.",
    "merge_ignores_max": "Pitfall: the split-KV reduce ignored the partitions' maxima. Each part_sum is "
    "relative to its split's own max: weight split j by part_sum_j * exp(part_max_j - M), M = max_j part_max_j.",
    "merge_ignores_sum": "Pitfall: the split-KV reduce ignored the partitions' sums. A split's weight is its "
    "share of the softmax denominator: part_sum_j * exp(part_max_j - M), not exp(part_max_j - M) alone.",
    "merge_no_shift": "Pitfall: the split-KV reduce did not subtract the largest maximum. exp(part_max_j) "
    "overflows for large scores: use exp(part_max_j - M), M = max_j part_max_j.",
    "merge_padded_lanes": "Pitfall: the padded split lanes were loaded. Lanes NUM_SPLITS .. SPLITS_PAD - 1 "
    "belong to the next head's partials (or past the tensor): mask the loads with j < NUM_SPLITS.",
    "traffic_query_heads": "Pitfall: K/V bytes were counted per query head. The cache holds num_kv_heads heads, "
    "each read once for its whole group of query heads.",
    "traffic_no_v": "Pitfall: K and V are two tensors. Every cached token has a key and a value per KV head: "
    "2 x tokens x num_kv_heads x head_dim elements.",
    "traffic_one_product": "Pitfall: the FLOPs count two products. q.k and p.v are head_dim multiply-adds "
    "each per key and query head: 4 x num_q_heads x head_dim FLOPs per key.",
    "traffic_kv_head_flops": "Pitfall: FLOPs are per query head. Every query head computes its own scores "
    "and output, even when GROUP heads share one KV head.",
    "traffic_no_q_out": "Pitfall: the queries and the outputs move too. Add 2 x num_seqs x num_q_heads x "
    "head_dim elements (q read, out written).",
}

_short = common.short_repr(10, 120, maxlevel=6)   # six levels deep: reprlib's default, as ch06 always showed

# atol = rtol against the float64 reference. fp16: the output and P are rounded to fp16 (~5e-4 relative).
# On a GPU fp32 dot products run in TF32 (10-bit mantissa), so everything is checked in fp16 there.
_TOL = {torch.float32: 1e-4, torch.float16: 3e-3}
_TILE = ex.EXERCISE_TILE


# --------------------------------------------------------------------------------------------------------
# errors in the learner's terms


_LearnerError = common.LearnerError
_Shape = common.Shape


def _fail(msg: str, pitfall: str | None = None):
    raise AssertionError(PITFALLS[pitfall] + "\n" + msg if pitfall else msg)


def _root_cause(e: BaseException) -> BaseException:
    """The exception the learner's code raised, under the interpreter's InterpreterError wrappers."""
    seen = set()
    while type(e).__name__ == "InterpreterError" and e.__cause__ is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__
    return e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [""])[0][:300]


@contextlib.contextmanager
def _quiet():
    """No warnings and nothing on stderr while the learner's code runs (nbgrader scores stderr as a failure)."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _call(fn, what: str, *args, **kwargs):
    try:
        with _quiet():
            return fn(*args, **kwargs)
    except (_ReferenceCalled, _Unsupported):
        raise
    except Exception as e:  # noqa: BLE001 - anything the learner's code raises is reported, not re-raised
        cause = _root_cause(e)
        if isinstance(cause, NotImplementedError):
            raise _LearnerError(common.not_filled(what)) from None
        raise _LearnerError(f"{what} raised {type(cause).__name__}: {_first_line(cause)}") from None


class _Unsupported(AssertionError):
    pass


class _ReferenceCalled(AssertionError):
    pass


def _as_number(x, what: str) -> float:
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        x = x.item()
    if isinstance(x, np.generic):
        x = x.item()
    return common.as_float(x, what, _short, finite=True)


# --------------------------------------------------------------------------------------------------------
# the learner's kernel must be a Triton kernel of their own


_LIBRARY_LOOPS = ("attend_tiles", "paged_decode_kernel", "split_kv_decode_kernel", "merge_splits_kernel",
                  "split_partials_kernel", "store_kvcache_kernel", "prefill_attention_kernel")


def _python_fn(kernel):
    return getattr(kernel, "fn", None)


def _check_kernel_object(kernel, name: str) -> None:
    fn = _python_fn(kernel)
    if fn is None or not callable(fn) or not hasattr(kernel, "__getitem__"):
        raise AssertionError(f"{name} is {_short.repr(kernel)}, not a @triton.jit kernel: decorate the function "
                             "with @triton.jit")
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("servelab."):
        raise _ReferenceCalled(f"{name} is {module}.{fn.__name__}, a kernel of the library: write your own")
    used = set(fn.__code__.co_names)
    for loop in _LIBRARY_LOOPS:
        if loop in used:
            raise _ReferenceCalled(f"your {name} uses {loop} from servelab.kernels: write the loop yourself")


def _mode(kernel) -> tuple[str, tuple[torch.dtype, ...] | None, bool]:
    """(device, dtypes the check may use or None for all, traced): interpreter -> CPU, fp32 and fp16, traced;
    compiled -> CUDA, fp16 only (fp32 dot products are TF32 on a GPU), not traced."""
    if interpreted(kernel):
        return "cpu", None, True
    if not torch.cuda.is_available():
        raise _Unsupported("the kernel was compiled for a GPU but there is no CUDA device: import servelab.kernels "
                           "(it sets TRITON_INTERPRET=1 without CUDA) before decorating it, then run the cell again")
    return "cuda", (torch.float16,), False


def _dtype(case_dtype: torch.dtype, allowed) -> torch.dtype:
    return case_dtype if allowed is None or case_dtype in allowed else allowed[0]


# --------------------------------------------------------------------------------------------------------
# a trace of every address the interpreter reads and writes


@dataclass
class _Access:
    program: tuple[int, int, int]
    region: str          # a tensor's name, or "" outside every tensor
    index: np.ndarray    # flat element indices into the region's tensor (empty outside)
    count: int


class _Trace:
    """Patch the interpreter's load and store while a launch runs; record every address, by program and tensor.

    Addresses outside every tensor argument are dropped from the mask (a load gets ``other``, a store does not
    happen), and so are stores into tensors that are not ``writable``: a wild pointer cannot crash the process
    or corrupt the check's inputs.
    """

    def __init__(self, enabled: bool, tensors: Mapping[str, torch.Tensor], writable: set[str]):
        self.enabled = enabled
        self.regions = []
        for name, t in tensors.items():
            start = t.data_ptr()
            self.regions.append((name, start, start + t.numel() * t.element_size(), t.element_size()))
        self.writable = writable
        self.reads: list[_Access] = []
        self.writes: list[_Access] = []
        self.dropped_writes: list[_Access] = []

    def _classify(self, addrs: np.ndarray, program, sink: list, writable) -> np.ndarray:
        """Record ``addrs`` by tensor; return which of them may be accessed (inside a tensor, and for a store
        inside a writable one). ``writable`` None: a load."""
        inside_any = np.zeros(addrs.shape, dtype=bool)
        ok = np.zeros(addrs.shape, dtype=bool)
        for name, start, end, size in self.regions:
            inside = (addrs >= start) & (addrs < end)
            if not inside.any():
                continue
            inside_any |= inside
            access = _Access(program, name, ((addrs[inside] - start) // size).astype(np.int64), int(inside.sum()))
            if writable is None or name in writable:
                sink.append(access)
                ok |= inside
            else:
                self.dropped_writes.append(access)
        if not inside_any.all():
            stray = _Access(program, "", np.zeros(0, dtype=np.int64), int((~inside_any).sum()))
            (sink if writable is None else self.dropped_writes).append(stray)
        return ok

    @contextlib.contextmanager
    def active(self):
        if not self.enabled:
            yield self
            return
        from triton.runtime import interpreter as interp

        builder = interp.interpreter_builder
        load, store = builder.create_masked_load, builder.create_masked_store
        handle = interp.TensorHandle

        def traced_load(ptrs, mask, other, cache_policy, is_volatile):
            want = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape)
            addrs = np.asarray(ptrs.data, dtype=np.uint64)[want]
            ok_sub = self._classify(addrs, tuple(builder.grid_idx), self.reads, None)
            keep = np.zeros(ptrs.data.shape, dtype=bool)
            keep[want] = ok_sub
            return load(ptrs, handle(keep, mask.dtype), other, cache_policy, is_volatile)

        def traced_store(ptrs, value, mask, cache_policy):
            want = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape)
            addrs = np.asarray(ptrs.data, dtype=np.uint64)[want]
            ok_sub = self._classify(addrs, tuple(builder.grid_idx), self.writes, self.writable)
            keep = np.zeros(ptrs.data.shape, dtype=bool)
            keep[want] = ok_sub
            return store(ptrs, value, handle(keep, mask.dtype), cache_policy)

        builder.create_masked_load = traced_load
        builder.create_masked_store = traced_store
        try:
            yield self
        finally:
            for attr in ("create_masked_load", "create_masked_store"):
                builder.__dict__.pop(attr, None)

    def stray(self) -> str | None:
        """A sentence about the first access outside every tensor, or a store into a read-only one."""
        for a in self.reads:
            if a.region == "":
                return f"program {_prog(a.program)} read {a.count} address(es) outside every tensor argument"
        for a in self.dropped_writes:
            where = f"into {a.region}, which this kernel only reads" if a.region else "outside every tensor argument"
            return f"program {_prog(a.program)} wrote {a.count} element(s) {where}"
        return None


def _prog(program) -> str:
    x, y, z = program
    return f"({x}, {y})" if z == 0 else f"({x}, {y}, {z})"


def _unravel(index: np.ndarray, shape) -> tuple[np.ndarray, ...]:
    return np.unravel_index(index, tuple(int(s) for s in shape))


# --------------------------------------------------------------------------------------------------------
# exercise 1: store_kv_kernel


@dataclass(frozen=True)
class _StoreCase:
    label: str
    block_size: int
    num_blocks: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    slots: tuple[int, ...]

    def describe(self, dtype) -> str:
        return (f"{self.label}: cache of {self.num_blocks} blocks x {self.block_size} slots, {self.num_kv_heads} KV "
                f"head(s), head_dim {self.head_dim}, {str(dtype).removeprefix('torch.')}; slot_mapping "
                f"{list(self.slots)}")

    def tensors(self, dtype, device):
        gen = torch.Generator().manual_seed(len(self.slots) * 31 + self.block_size)
        shape = (self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim)
        n = len(self.slots)
        key = torch.randn(n, self.num_kv_heads, self.head_dim, generator=gen).to(dtype)
        value = torch.randn(n, self.num_kv_heads, self.head_dim, generator=gen).to(dtype)
        k_cache = torch.full(shape, float("nan"), dtype=dtype)
        v_cache = torch.full(shape, float("nan"), dtype=dtype)
        slots = torch.tensor(self.slots, dtype=torch.int32)
        return tuple(t.to(device) for t in (key, value, k_cache, v_cache, slots))


def _store_cases() -> list[_StoreCase]:
    rng = random.Random(606)
    cases = [
        _StoreCase("the notebook's example", 4, 3, 1, 16, torch.float32, (5, -1, 0)),
        _StoreCase("block size 1, every slot in its own block", 1, 6, 2, 16, torch.float32, (3, 0, 5, -1, 1)),
        _StoreCase("block size 4, slots at block boundaries and the cache's last slot", 4, 5, 2, 32,
                   torch.float16, (3, 4, -1, 19, 8, -1, 7)),
    ]
    for k in range(2):
        bs = rng.choice([4, 16])
        nb = rng.randint(3, 5)
        chosen = rng.sample(range(nb * bs), 6)
        slots = tuple(s if rng.random() > 0.25 else -1 for s in chosen)
        cases.append(_StoreCase(f"random case {k}", bs, nb, rng.choice([1, 2]), rng.choice([16, 32]),
                                rng.choice([torch.float32, torch.float16]), slots))
    return cases


def _traced_store(kernel, key, value, k_cache, v_cache, slots, traced) -> _Trace:
    trace = _Trace(traced, dict(key=key, value=value, k_cache=k_cache, v_cache=v_cache, slot_mapping=slots),
                   {"k_cache", "v_cache"})
    with trace.active():
        _call(ex.launch_store_kv, "store_kv_kernel, launched on grid (num_tokens, num_kv_heads)", kernel, key, value,
              k_cache, v_cache, slots)
    return trace


def _store_access_problem(trace: _Trace, slots: list[int]) -> tuple[str | None, str] | None:
    skipped = {t for t, s in enumerate(slots) if s < 0}
    for a in trace.writes + trace.dropped_writes:
        if a.program[0] in skipped:
            return "store_minus_one", f"token {a.program[0]} has slot -1, but program {_prog(a.program)} stored K/V"
    stray = trace.stray()
    return (None, stray) if stray else None


def _store_swapped(src: torch.Tensor, slots, cache_shape, dtype) -> torch.Tensor:
    """The cache a kernel with block and offset swapped leaves (stores past the cache dropped)."""
    num_blocks, block_size = cache_shape[:2]
    cache = torch.full(cache_shape, float("nan"), dtype=dtype)
    flat = cache.view(num_blocks * block_size, *cache_shape[2:])
    for t, s in enumerate(slots):
        if s >= 0 and (s % block_size) * block_size + s // block_size < num_blocks * block_size:
            flat[(s % block_size) * block_size + s // block_size] = src[t].cpu()
    return cache


def _same_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


def _check_store_case(kernel, case: _StoreCase, device, allowed, traced) -> None:
    dtype = _dtype(case.dtype, allowed)
    key, value, k_cache, v_cache, slots = case.tensors(dtype, device)
    k_want, v_want = ref_store_kvcache(key.cpu(), value.cpu(), k_cache.cpu(), v_cache.cpu(), slots.cpu())
    where = case.describe(dtype)
    try:
        trace = _traced_store(kernel, key, value, k_cache, v_cache, slots, traced)
    except _LearnerError as e:
        raise AssertionError(f"{e}\ncase: {where}") from None
    problem = _store_access_problem(trace, list(case.slots)) if traced else None
    if problem and problem[0]:
        _fail(f"{problem[1]}\ncase: {where}", problem[0])
    got = {"k_cache": k_cache.cpu(), "v_cache": v_cache.cpu()}
    swapped = {"k_cache": _store_swapped(key, case.slots, tuple(k_cache.shape), dtype),
               "v_cache": _store_swapped(value, case.slots, tuple(k_cache.shape), dtype)}
    for name, want in (("k_cache", k_want), ("v_cache", v_want)):
        if not _same_nan(got[name], want) or problem:
            if all(_same_nan(got[n], swapped[n]) for n in got):
                _fail(f"{name} differs from the reference exactly as a swapped block and row would\ncase: {where}",
                      "store_swapped")
    if problem:
        _fail(f"{problem[1]}\ncase: {where}")
    for name, want in (("k_cache", k_want), ("v_cache", v_want)):
        same = (got[name] == want) | (got[name].isnan() & want.isnan())
        if not bool(same.all()):
            block, slot, head, _ = (int(i) for i in (~same).nonzero()[0])
            token = next((t for t, s in enumerate(case.slots) if s == block * case.block_size + slot), None)
            expect = f"token {token}'s head {head}" if token is not None else "NaN (no token maps to this slot)"
            _fail(f"{name}[{block}, {slot}, {head}] holds {_short.repr(got[name][block, slot, head, :4].tolist())}"
                  f"..., expected {expect}\ncase: {where}")


def check_store_kv_kernel(kernel) -> None:
    """Hidden test of exercise 1: block sizes 1, 4 and 16, slots -1 among the tokens, block boundaries, the
    cache's last slot; the whole cache (NaN elsewhere) must equal the reference's."""
    _check_kernel_object(kernel, "store_kv_kernel")
    device, allowed, traced = _mode(kernel)
    for case in _store_cases():
        _check_store_case(kernel, case, device, allowed, traced)


def safe_store_kv(kernel, key, value, k_cache, v_cache, slot_mapping) -> None:
    """The notebook's ``store_kv`` launch of ``kernel``, with every load and store checked against the tensors'
    bounds: a stray one is dropped (not followed) and reported. For visible asserts."""
    _check_kernel_object(kernel, "store_kv_kernel")
    _, _, traced = _mode(kernel)
    try:
        trace = _traced_store(kernel, key, value, k_cache, v_cache, slot_mapping, traced)
    except _LearnerError as e:
        raise AssertionError(str(e)) from None
    problem = _store_access_problem(trace, slot_mapping.tolist()) if traced else None
    if problem:
        _fail(f"{problem[1]}\ncase: the test cell's slot_mapping {slot_mapping.tolist()}", problem[0])


# --------------------------------------------------------------------------------------------------------
# exercise 2: decode_kernel


@dataclass(frozen=True)
class _DecodeCase:
    label: str
    seq_lens: tuple[int, ...]
    block_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    q_scale: float = 1.0
    seed: int = 0

    def batch(self, dtype, device) -> ex.PagedBatch:
        longest = max(self.seq_lens)
        # wide enough that every position of every tile has an entry of its own (all NaN past the blocks)
        width = max(-(-longest // self.block_size) + 1, -(-longest // _TILE) * _TILE // self.block_size + 1)
        return ex.make_paged_batch(self.seq_lens, block_size=self.block_size, num_q_heads=self.num_q_heads,
                                   num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, dtype=dtype,
                                   device=device, seed=self.seed, table_width=width, q_scale=self.q_scale)


def _describe_batch(b: ex.PagedBatch, label: str = "", q_scale: float = 1.0) -> str:
    num_seqs, num_q_heads, head_dim = b.q.shape
    num_kv_heads = b.k_cache.shape[2]
    big = f", queries x {q_scale:g} (scores in the hundreds)" if q_scale != 1 else ""
    return (f"{label + ': ' if label else ''}seq_lens {b.seq_lens.tolist()}, block size {b.k_cache.shape[1]}, "
            f"{num_q_heads} query / {num_kv_heads} KV heads (GROUP {num_q_heads // num_kv_heads}), head_dim "
            f"{head_dim}, {str(b.q.dtype).removeprefix('torch.')}, TILE {_TILE}{big}")


def _decode_cases() -> list[_DecodeCase]:
    return [
        _DecodeCase("block size 1, GROUP 1", (1, 16, 17), 1, 2, 2, 16, torch.float32, seed=1),
        _DecodeCase("block size 4, GROUP 4, lengths 1, one block, one past a block, several tiles",
                    (1, 4, 5, 20), 4, 8, 2, 32, torch.float16, seed=2),
        _DecodeCase("block size 4, GROUP 2, lengths at and past block boundaries", (8, 12, 13), 4, 4, 2, 16,
                    torch.float32, seed=3),
        _DecodeCase("block size 16, GROUP 4", (16, 17, 1, 40), 16, 4, 1, 64, torch.float32, seed=4),
        _DecodeCase("large scores", (40, 7), 16, 4, 1, 32, torch.float32, q_scale=40.0, seed=5),
    ]


def _emulate_decode(b: ex.PagedBatch, *, rescale=True, scale=None, kv_head_of=None) -> torch.Tensor:
    """The tile loop in float64, with the named mistakes available: no rescale, no scale, another GQA map."""
    num_seqs, num_q_heads, head_dim = b.q.shape
    num_kv_heads = b.k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    kv_head_of = kv_head_of or (lambda h: h // group)
    out = torch.zeros(b.q.shape, dtype=torch.float64)
    for s, n in enumerate(b.seq_lens.tolist()):
        k_all = gather_kv(b.k_cache.cpu(), b.block_tables[s].cpu(), n).double()
        v_all = gather_kv(b.v_cache.cpu(), b.block_tables[s].cpu(), n).double()
        for h in range(num_q_heads):
            k, v = k_all[:, kv_head_of(h)], v_all[:, kv_head_of(h)]
            scores = (k @ b.q[s, h].cpu().double()) * scale
            m, l_sum, acc = -math.inf, 0.0, torch.zeros(head_dim, dtype=torch.float64)
            for start in range(0, n, _TILE):
                st = scores[start:start + _TILE]
                m_new = max(m, st.max().item())
                alpha = math.exp(m - m_new) if rescale else 1.0
                p = torch.exp(st - m_new)
                l_sum = l_sum * alpha + p.sum().item()
                acc = acc * alpha + p @ v[start:start + _TILE]
                m = m_new
            out[s, h] = acc / l_sum
    return out


def _close_to(got: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    return bool(torch.isfinite(got).all()) and bool(((got - want).abs() <= tol * (1 + want.abs())).all())


def _traced_decode(kernel, b: ex.PagedBatch, traced: bool) -> tuple[torch.Tensor, tuple[str | None, str] | None]:
    out = torch.empty_like(b.q)
    trace = _Trace(traced, dict(q=b.q, k_cache=b.k_cache, v_cache=b.v_cache, block_tables=b.block_tables,
                                seq_lens=b.seq_lens, out=out), {"out"})
    with trace.active():
        _call(ex.launch_decode, "decode_kernel, launched on grid (num_seqs, num_kv_heads)", kernel, *b.args, out=out)
    return out, (_decode_access_problem(trace, b) if traced else None)


def _decode_access_problem(trace: _Trace, b: ex.PagedBatch) -> tuple[str | None, str] | None:
    """(pitfall or None, sentence) for the first wrong read or write the trace shows, else None."""
    lens = b.seq_lens.tolist()
    width = b.block_tables.shape[1]
    num_q_heads, head_dim = b.q.shape[1], b.q.shape[2]
    bs, num_kv_heads = b.k_cache.shape[1], b.k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    block_h = max(16, 1 << (group - 1).bit_length())
    nblocks = [-(-n // bs) for n in lens]
    found: dict[str, str] = {}
    for a in trace.reads:
        s, g, _ = a.program
        here = f"program ({s}, {g})"
        if a.region in ("k_cache", "v_cache"):
            blocks, slots, heads, _ = _unravel(a.index, tuple(b.k_cache.shape))
            for blk, slot, head in zip(blocks.tolist(), slots.tolist(), heads.tolist()):
                seq, pos = b.owner.get((blk, slot), (None, None))
                if seq == s and head == g and pos < lens[s]:
                    continue
                if seq == s and head == g:
                    key = "mask_off_by_one" if pos == lens[s] else "unmasked_kv"
                    at_boundary = pos % bs == 0
                    where = (f"row 0 of the block behind block-table entry {pos // bs}, past its {nblocks[s]} "
                             "block(s)" if at_boundary else f"block {blk}, slot {slot}")
                    text = (f"{here} read {a.region} at key position {pos} of sequence {s}, whose length is "
                            f"{lens[s]} ({where})")
                    if key not in found or (key == "mask_off_by_one" and at_boundary and "past its" not in found[key]):
                        found[key] = text
                elif seq is None:
                    found.setdefault("unmasked_kv", f"{here} read {a.region}[{blk}, {slot}], a block no entry of "
                                                    f"sequence {s}'s block-table row points to (a masked-off "
                                                    "block-table load gives 0: block 0 is not the sequence's)")
                elif seq == s:
                    found.setdefault("gqa_mapping", f"{here} read {a.region} of KV head {head}; its query heads "
                                                    f"{g * group} .. {(g + 1) * group - 1} read KV head {g}")
                else:
                    found.setdefault("other_seq", f"{here} read {a.region} of sequence {seq} (position {pos})")
        elif a.region == "block_tables":
            rel = a.index - s * width
            bad = (rel < 0) | (rel >= nblocks[s])
            if bad.any():
                found.setdefault("table_past_end",
                                 f"{here} read entry {int(rel[bad][0])} of sequence {s}'s block-table row, but the "
                                 f"sequence (length {lens[s]}, block size {bs}) has {nblocks[s]} block(s): "
                                 f"entries 0 .. {nblocks[s] - 1}")
    for key in ("mask_off_by_one", "unmasked_kv", "table_past_end", "gqa_mapping", "other_seq"):
        if key in found:
            return (None if key == "other_seq" else key), found[key]

    # query rows, flat (seq * num_q_heads + head): program (s, g) owns rows s * Hq + g * GROUP .. + GROUP - 1,
    # and its padding rows follow them up to BLOCK_H
    def own(s, g) -> tuple[int, int, int]:
        first = s * num_q_heads + g * group
        return first, first + group, first + block_h

    loaded: dict[tuple[int, int], set[int]] = {}
    padded_read = set()
    for a in trace.reads:
        if a.region == "q":
            s, g, _ = a.program
            _, end, pad_end = own(s, g)
            rows = set((a.index // head_dim).tolist())
            loaded.setdefault((s, g), set()).update(rows)
            if any(end <= r < pad_end for r in rows):
                padded_read.add((s, g))
    for (s, g), rows in sorted(loaded.items()):
        first, end, _ = own(s, g)
        missing = sorted(set(range(first, end)) - rows)
        if missing:
            heads = sorted(r - s * num_q_heads for r in rows if r // num_q_heads == s)
            return "gqa_mapping", (f"program ({s}, {g}) never loaded query head(s) "
                                   f"{[r - s * num_q_heads for r in missing]} of its group; it loaded heads "
                                   f"{_short.repr(heads)} of sequence {s}")
    for a in trace.writes:
        s, g, _ = a.program
        first, end, pad_end = own(s, g)
        rows = a.index // head_dim
        wrong = (rows < first) | (rows >= end)
        if wrong.any():
            r = int(rows[wrong][0])
            padded = bool(((rows[wrong] >= end) & (rows[wrong] < pad_end)).all())
            return ("padded_rows" if padded else "gqa_mapping",
                    f"program ({s}, {g}) stored out[{r // num_q_heads}, {r % num_q_heads}], outside its query "
                    f"heads {g * group} .. {(g + 1) * group - 1} of sequence {s}")
    stray = trace.stray()
    if stray:
        programs = {a.program[:2] for a in trace.reads + trace.dropped_writes if a.region == ""}
        return ("padded_rows" if programs & padded_read else None), stray
    return None


def _check_decode_case(kernel, case: _DecodeCase, device, allowed, traced) -> None:
    dtype = _dtype(case.dtype, allowed)
    b = case.batch(dtype, device)
    where = _describe_batch(b, case.label, case.q_scale)
    try:
        out, problem = _traced_decode(kernel, b, traced)
    except _LearnerError as e:
        raise AssertionError(f"{e}\ncase: {where}") from None
    if problem:
        _fail(f"{problem[1]}\ncase: {where}", problem[0])
    _compare_decode(out, b, dtype, where, case.q_scale)


def _compare_decode(out: torch.Tensor, b: ex.PagedBatch, dtype, where: str, q_scale: float = 1.0) -> None:
    got = out.cpu().double()
    cpu = ex.PagedBatch(*(t.cpu() for t in b.args), owner=b.owner)
    want = ref_paged_decode(*cpu.args)
    tol = _TOL[dtype]
    if _close_to(got, want, tol):
        return
    if not bool(torch.isfinite(got).all()):
        s, h, _ = (~torch.isfinite(got)).nonzero()[0].tolist()
        if q_scale > 1:
            _fail(f"out[{s}, {h}] is {got[s, h, 0].item()} ... where the scores are large\ncase: {where}",
                  "no_running_max")
        _fail(f"out[{s}, {h}] is {got[s, h, 0].item()}: NaN or inf in the output (a NaN slot was read, or 0/0 in "
              f"a padded row?)\ncase: {where}")
    err = (got - want).abs()
    s, h, _ = (int(i) for i in (err == err.max()).nonzero()[0])
    detail = (f"out[{s}, {h}] differs from the float64 reference by {err.max().item():.3g} (tolerance {tol:g} x "
              f"(1 + |ref|)); sequence {s} has {cpu.seq_lens[s].item()} key(s)\ncase: {where}")
    num_kv_heads = cpu.k_cache.shape[2]
    group = cpu.q.shape[1] // num_kv_heads
    emulated = [
        ("gqa_mapping", lambda: _emulate_decode(cpu, kv_head_of=lambda hh: hh % num_kv_heads),
         group > 1 and num_kv_heads > 1),
        ("no_scale", lambda: _emulate_decode(cpu, scale=1.0), True),
        ("no_rescale", lambda: _emulate_decode(cpu, rescale=False), True),
    ]
    for pitfall, wrong, applies in emulated:
        if applies and _close_to(got, wrong(), tol):
            _fail(detail, pitfall)
    _fail(detail)


def check_decode_kernel(kernel) -> None:
    """Hidden test of exercise 2: block sizes 1, 4, 16; GROUP 1, 2, 4 (one and two KV heads); lengths 1, one
    block, one past a block and several tiles; fp32 and fp16; large scores; every read and store traced."""
    _check_kernel_object(kernel, "decode_kernel")
    device, allowed, traced = _mode(kernel)
    for case in _decode_cases():
        _check_decode_case(kernel, case, device, allowed, traced)


def safe_decode(kernel, batch: ex.PagedBatch) -> torch.Tensor:
    """The notebook's ``paged_decode`` launch of ``kernel`` on ``batch``, with every load and store checked against
    the tensors' bounds: a stray one is dropped (not followed), and a wrong read or store fails here with its
    pitfall. Returns ``out``. For visible asserts."""
    _check_kernel_object(kernel, "decode_kernel")
    _, _, traced = _mode(kernel)
    try:
        out, problem = _traced_decode(kernel, batch, traced)
    except _LearnerError as e:
        raise AssertionError(str(e)) from None
    if problem:
        _fail(f"{problem[1]}\ncase: the test cell's batch, {_describe_batch(batch)}", problem[0])
    return out


# --------------------------------------------------------------------------------------------------------
# exercise 3: merge_kernel


@dataclass(frozen=True)
class _MergeCase:
    label: str
    num_seqs: int
    num_q_heads: int
    num_splits: int
    head_dim: int
    empty: tuple[int, ...] = ()        # splits left empty (every head of every sequence)
    max_spread: float = 8.0
    max_offset: float = 0.0
    seed: int = 0

    def describe(self) -> str:
        empty = f", splits {list(self.empty)} empty" if self.empty else ""
        return (f"{self.label}: {self.num_seqs} sequence(s) x {self.num_q_heads} query heads, NUM_SPLITS "
                f"{self.num_splits}, head_dim {self.head_dim}, part_max in {self.max_offset:g} +- "
                f"{self.max_spread:g}{empty}")

    def partials(self, device):
        gen = torch.Generator().manual_seed(self.seed)
        shape = (self.num_seqs, self.num_q_heads, self.num_splits)
        part_out = torch.randn(*shape, self.head_dim, generator=gen)
        part_max = self.max_offset + self.max_spread * (2 * torch.rand(shape, generator=gen) - 1)
        part_sum = 0.5 + 40 * torch.rand(shape, generator=gen)
        for j in self.empty:
            part_out[:, :, j] = 0.0
            part_max[:, :, j] = float("-inf")
            part_sum[:, :, j] = 0.0
        return part_out.to(device), part_max.to(device), part_sum.to(device)


def _merge_cases() -> list[_MergeCase]:
    return [
        _MergeCase("one split", 2, 2, 1, 16, seed=1),
        _MergeCase("three splits (SPLITS_PAD 4)", 2, 3, 3, 16, seed=2),
        _MergeCase("four splits, maxima far apart", 1, 2, 4, 32, max_spread=30.0, seed=3),
        _MergeCase("five splits, the last two empty", 2, 2, 5, 16, empty=(3, 4), seed=4),
        _MergeCase("large maxima", 1, 2, 3, 16, max_offset=150.0, max_spread=20.0, seed=5),
    ]


def _merge_variants(part_out, part_max, part_sum) -> dict[str, torch.Tensor]:
    """What the named mistakes compute, in float64."""
    o, m, l_sum = part_out.double().cpu(), part_max.double().cpu(), part_sum.double().cpu()
    top = m.max(-1, keepdim=True).values

    def combine(w):
        return (w[..., None] * o).sum(-2) / w.sum(-1)[..., None]

    return {"merge_ignores_max": combine(l_sum), "merge_ignores_sum": combine(torch.exp(m - top))}


def _merge_access_problem(trace: _Trace, part_shape, head_dim: int) -> tuple[str | None, str] | None:
    """(pitfall or None, sentence) for the first read of another head's partials or a wrong store."""
    num_seqs, num_q_heads, num_splits = part_shape
    for a in trace.reads:
        s, h, _ = a.program
        if a.region == "":
            return "merge_padded_lanes", (f"program ({s}, {h}) read {a.count} address(es) outside every tensor "
                                          "(past the end of the partials?)")
        if a.region in ("part_max", "part_sum", "part_out"):
            rows = a.index // head_dim if a.region == "part_out" else a.index   # rows: (seq, head, split)
            foreign = rows // num_splits != s * num_q_heads + h
            if foreign.any():
                r = int(rows[foreign][0])
                return "merge_padded_lanes", (f"program ({s}, {h}) read {a.region} of sequence "
                                              f"{r // num_splits // num_q_heads}, head {r // num_splits % num_q_heads}"
                                              f", split {r % num_splits}")
    for a in trace.writes:
        s, h, _ = a.program
        rows = a.index // head_dim
        if (rows != s * num_q_heads + h).any():
            r = int(rows[rows != s * num_q_heads + h][0])
            return None, f"program ({s}, {h}) stored into out[{r // num_q_heads}, {r % num_q_heads}]"
    stray = trace.stray()
    return (None, stray) if stray else None


def _traced_merge(kernel, part_out, part_max, part_sum, dtype, traced):
    num_seqs, num_q_heads, _, head_dim = part_out.shape
    out = torch.empty(num_seqs, num_q_heads, head_dim, dtype=dtype, device=part_out.device)
    trace = _Trace(traced, dict(part_out=part_out, part_max=part_max, part_sum=part_sum, out=out), {"out"})
    with trace.active():
        _call(ex.launch_merge, "merge_kernel, launched on grid (num_seqs, num_q_heads)", kernel, part_out, part_max,
              part_sum, out)
    problem = _merge_access_problem(trace, tuple(part_max.shape), head_dim) if traced else None
    return out, problem


def _run_merge(kernel, part_out, part_max, part_sum, dtype, traced, where) -> torch.Tensor:
    try:
        out, problem = _traced_merge(kernel, part_out, part_max, part_sum, dtype, traced)
    except _LearnerError as e:
        raise AssertionError(f"{e}\ncase: {where}") from None
    if problem:
        _fail(f"{problem[1]}\ncase: {where}", problem[0])
    return out.cpu().double()


def _merge_mismatch(got, want, part_out, part_max, part_sum, tol, where) -> None:
    if _close_to(got, want, tol):
        return
    if not bool(torch.isfinite(got).all()):
        s, h, _ = (~torch.isfinite(got)).nonzero()[0].tolist()
        # exp(m_j) without subtracting the largest max overflows fp32 past 88
        pitfall = "merge_no_shift" if float(part_max.max()) > 88 else None
        _fail(f"out[{s}, {h}] is {got[s, h, 0].item()}: NaN or inf\ncase: {where}", pitfall)
    err = (got - want).abs()
    s, h, _ = (int(i) for i in (err == err.max()).nonzero()[0])
    pitfall = next((name for name, wrong in _merge_variants(part_out, part_max, part_sum).items()
                    if _close_to(got, wrong, tol)), None)
    _fail(f"out[{s}, {h}] differs from the exact merge by {err.max().item():.3g}\ncase: {where}", pitfall)


def check_merge_kernel(kernel) -> None:
    """Hidden test of exercise 3: synthetic partials (one split, non-power-of-two split counts, maxima far
    apart, empty splits, large maxima) against the float64 merge; then stage 1 + your merge against the decode
    reference on a paged batch with 1 and 3 splits (short sequences leave splits empty)."""
    _check_kernel_object(kernel, "merge_kernel")
    device, allowed, traced = _mode(kernel)
    dtype = _dtype(torch.float32, allowed)
    for case in _merge_cases():
        parts = case.partials(device)
        got = _run_merge(kernel, *parts, dtype, traced, case.describe())
        want = ex.ref_merge(*(t.cpu() for t in parts))
        _merge_mismatch(got, want, *parts, _TOL[dtype], case.describe())
    case = _DecodeCase("stage 1 + your merge", (1, 5, 40), 4, 8, 2, 32, torch.float32, seed=7)
    b = case.batch(dtype, device)
    want = ref_paged_decode(*(t.cpu() for t in b.args))
    for num_splits in (1, 3):
        where = f"{_describe_batch(b, case.label)}, {num_splits} split(s) (split_kv_partials)"
        with _quiet():
            parts = ex.split_kv_partials(*b.args, num_splits)
        got = _run_merge(kernel, *parts, b.q.dtype, traced, where)
        _merge_mismatch(got, want, *parts, _TOL[b.q.dtype], where)


def safe_split_kv_decode(kernel, batch: ex.PagedBatch, num_splits: int) -> torch.Tensor:
    """The notebook's ``split_kv_decode``: stage 1, then ``kernel`` with every load and store checked against the
    tensors' bounds (a stray one is dropped, not followed; a wrong one fails here with its pitfall). For visible
    asserts."""
    _check_kernel_object(kernel, "merge_kernel")
    _, _, traced = _mode(kernel)
    with _quiet():
        parts = ex.split_kv_partials(*batch.args, num_splits)
    try:
        out, problem = _traced_merge(kernel, *parts, batch.q.dtype, traced)
    except _LearnerError as e:
        raise AssertionError(str(e)) from None
    if problem:
        _fail(f"{problem[1]}\ncase: the test cell's batch, {_describe_batch(batch)}, {num_splits} split(s)",
              problem[0])
    return out


# --------------------------------------------------------------------------------------------------------
# exercise 4: decode_traffic


@dataclass(frozen=True)
class _Traffic:
    label: str
    seq_lens: tuple[int, ...]
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    bytes_per_element: int

    def call(self) -> str:
        lens = list(self.seq_lens) if len(self.seq_lens) <= 6 else f"[{self.seq_lens[0]}] * {len(self.seq_lens)}"
        if len(set(self.seq_lens)) > 1 and len(self.seq_lens) > 6:
            lens = _short.repr(list(self.seq_lens))
        return (f"decode_traffic({lens}, num_q_heads={self.num_q_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, bytes_per_element={self.bytes_per_element})")

    def args(self):
        return list(self.seq_lens), self.num_q_heads, self.num_kv_heads, self.head_dim, self.bytes_per_element


def _traffic_cases() -> list[_Traffic]:
    cases = [
        _Traffic("Llama-3-8B attention, 16 x 8K, bf16", (8192,) * 16, 32, 8, 128, 2),
        _Traffic("LLaMA-2-7B attention (MHA), 8 x 2K, fp16", (2048,) * 8, 32, 32, 128, 2),
        _Traffic("an fp8 cache, mixed lengths", (1, 17, 300, 4096), 32, 8, 128, 1),
        _Traffic("multi-query attention", (100, 200), 16, 1, 64, 2),
        _Traffic("one sequence of one token", (1,), 8, 2, 64, 4),
    ]
    rng = random.Random(6060)
    for k in range(40):
        kv = rng.choice([1, 2, 4, 8])
        group = rng.choice([1, 2, 4, 8])
        lens = tuple(rng.randint(1, 9000) for _ in range(rng.randint(1, 12)))
        cases.append(_Traffic(f"random {k}", lens, kv * group, kv, rng.choice([64, 80, 128, 256]),
                              rng.choice([1, 2, 4])))
    return cases


def _traffic_pitfall(c: _Traffic, got: tuple[float, float], want: tuple[int, int]) -> str | None:
    tokens, seqs = sum(c.seq_lens), len(c.seq_lens)
    hq, hkv, d, e = c.num_q_heads, c.num_kv_heads, c.head_dim, c.bytes_per_element
    q_out = 2 * seqs * hq * d * e
    gb, gf = got
    wb, wf = want
    if gb != wb:
        if hq != hkv and any(_close(gb, v) for v in (2 * tokens * hq * d * e + q_out, 2 * tokens * hq * d * e)):
            return "traffic_query_heads"
        if any(_close(gb, v) for v in (tokens * hkv * d * e + q_out, tokens * hkv * d * e)):
            return "traffic_no_v"
        if _close(gb, wb - q_out) or _close(gb, wb - q_out / 2):
            return "traffic_no_q_out"
    if gf != wf:
        if _close(gf, wf / 2):
            return "traffic_one_product"
        if hq != hkv and any(_close(gf, wf * hkv / hq * k) for k in (1, 0.5)):
            return "traffic_kv_head_flops"
    return None


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


_in_learner: list[str] = []


@contextlib.contextmanager
def _no_reference_calls(forbidden: dict, key: str):
    hits: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and _in_learner and frame.f_code in forbidden:
            hits.append(forbidden[frame.f_code])

    with common.profiling(profile):
        yield
    if hits:
        raise _ReferenceCalled(f"your {key} calls {hits[0]}, the reference it is checked against: write {key} "
                               "without it")


_TRAFFIC_REFS = common.codes(ex.decode_traffic, module=True)


def check_decode_traffic(fn) -> None:
    """Hidden test of exercise 4: the published shapes (GQA, MHA, MQA, fp8 and fp32 caches) and 40 random
    batches; bytes and FLOPs must be exact."""
    if not callable(fn):
        raise AssertionError(f"decode_traffic is {_short.repr(fn)}, not a function")
    if getattr(fn, "__code__", None) in _TRAFFIC_REFS:
        raise AssertionError("decode_traffic is servelab.kernels.exercises.decode_traffic itself; write your own")
    for c in _traffic_cases():
        _in_learner.append("decode_traffic")
        try:
            with _no_reference_calls(_TRAFFIC_REFS, "decode_traffic"):
                result = _call(fn, c.call(), *c.args())
        except _LearnerError as e:
            raise AssertionError(str(e)) from None
        finally:
            _in_learner.pop()
        try:
            if isinstance(result, dict) or not isinstance(result, SequenceABC) or len(result) != 2:
                raise _Shape(f"it returned {_short.repr(result)}; expected a pair (bytes, flops)")
            got = (_as_number(result[0], "bytes"), _as_number(result[1], "flops"))
        except _Shape as e:
            raise AssertionError(f"{c.call()}: {e}") from None
        want = ex.decode_traffic(*c.args())
        if not (_close(got[0], want[0]) and _close(got[1], want[1])):
            _fail(f"{c.call()} ({c.label}) returned ({got[0]:,.0f}, {got[1]:,.0f}); expected "
                  f"({want[0]:,} bytes, {want[1]:,} FLOPs)", _traffic_pitfall(c, got, want))


# --------------------------------------------------------------------------------------------------------
# drills


# Llama-3-70B's attention (64 query / 8 KV heads, head_dim 128, bf16), 24 sequences x 10,000 cached tokens
Q_LENS = [10_000] * 24
Q_SHAPE = dict(num_q_heads=64, num_kv_heads=8, head_dim=128, bytes_per_element=2)


def q_bytes() -> float:
    return float(ex.decode_traffic(Q_LENS, **Q_SHAPE)[0])


def q_intensity() -> float:
    nbytes, flops = ex.decode_traffic(Q_LENS, **Q_SHAPE)
    return flops / nbytes


def q_roofline_us() -> float:
    return max(ex.roofline_time_s(*ex.decode_traffic(Q_LENS, **Q_SHAPE), gpu=H200)) * 1e6


def q_memory_over_compute() -> float:
    memory_s, compute_s = ex.roofline_time_s(*ex.decode_traffic(Q_LENS, **Q_SHAPE), gpu=H200)
    return memory_s / compute_s


DRILLS = {
    "drill_1": ("number of bytes one layer's decode attention moves for 24 sequences x 10,000 cached tokens, 64 "
                "query / 8 KV heads, head_dim 128, bf16 (K and V, queries, outputs)", q_bytes, 0.005),
    "drill_2": ("arithmetic intensity of that step, in FLOPs per byte", q_intensity, 0.01),
    "drill_3": ("time of that step on an H200 at the roofline, in microseconds", q_roofline_us, 0.01),
    "drill_4": ("ratio of that step's memory time to its compute time on an H200", q_memory_over_compute, 0.01),
}


def _drill_hint(name: str, got: float) -> str | None:
    near = lambda a, b, rel=0.02: math.isclose(a, b, rel_tol=rel)  # noqa: E731
    nbytes, flops = ex.decode_traffic(Q_LENS, **Q_SHAPE)
    per_q_head = ex.decode_traffic(Q_LENS, 64, 64, 128, 2)[0]
    memory_s, compute_s = ex.roofline_time_s(nbytes, flops, gpu=H200)
    if name == "drill_1":
        if near(got, per_q_head):
            return PITFALLS["traffic_query_heads"]
        if near(got, nbytes / 2):
            return PITFALLS["traffic_no_v"]
    if name == "drill_2":
        if near(got, flops / per_q_head):
            return PITFALLS["traffic_query_heads"]
        if near(got, flops / 2 / nbytes):
            return PITFALLS["traffic_one_product"]
        if near(got, 2 * flops / nbytes):
            return PITFALLS["traffic_no_v"]
        if near(got, nbytes / flops):
            return "That is bytes per FLOP: arithmetic intensity is FLOPs divided by bytes."
    if name == "drill_3":
        if near(got, compute_s * 1e6):
            return "That is the compute time. The step takes the larger of its memory and compute times."
        if near(got, (memory_s + compute_s) * 1e6, 0.005):
            return ("The roofline takes the larger of the two times, not their sum: loads and math overlap.")
        if near(got, memory_s) or near(got, memory_s * 1e3):
            return "Give the time in microseconds (1 s = 1e6 us)."
    if name == "drill_4" and near(got, compute_s / memory_s):
        return "That is compute time over memory time; the drill asks memory time over compute time."
    return None


def check_drills(answers) -> None:
    """Hidden test of the drills. ``answers``: a mapping with drill_1..drill_4 or a sequence of the four values."""
    for name, (question, expected, rel), answer in common.drill_answers(answers, DRILLS):
        try:
            got = _as_number(answer, name)
        except _Shape as e:
            raise AssertionError(f"{e} ({question})") from None
        want = float(expected())
        if not math.isclose(got, want, rel_tol=rel, abs_tol=0.0):
            msg = f"{name} = {got:.6g}, but the {question} is {want:.4g} (within {rel:.1%})."
            hint = _drill_hint(name, got)
            raise AssertionError(f"{hint}\n{msg}" if hint else msg)


# --------------------------------------------------------------------------------------------------------
# messages for visible asserts

_CHECKS: dict[str, Callable] = {
    "store_kv_kernel": check_store_kv_kernel,
    "decode_kernel": check_decode_kernel,
    "merge_kernel": check_merge_kernel,
    "decode_traffic": check_decode_traffic,
}


@functools.lru_cache(maxsize=32)
def _diagnose_cached(exercise: str, key) -> str:
    obj = key[0]
    try:
        _CHECKS[exercise](obj)
    except (AssertionError, _LearnerError) as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the message is the point
        return f"{exercise} raised {type(e).__name__}: {_first_line(e)}"
    return (f"{exercise} passes every case of the hidden check, but not this assert: compare what the assert "
            "computes with what your code does")


def diagnose(exercise: str, obj) -> str:
    """What the hidden check of ``exercise`` says about the learner's ``obj`` (a kernel or a function),
    without raising. Meant as a visible assert's message."""
    if exercise not in _CHECKS:
        return f"no check named {exercise!r}"
    try:
        return _diagnose_cached(exercise, (obj,))
    except TypeError:  # unhashable
        return _diagnose_cached.__wrapped__(exercise, (obj,))
