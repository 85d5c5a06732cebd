"""Chapter 06's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

The learner writes three Triton kernels and one formula. A kernel is judged by what it leaves in memory: a
*driver* (:func:`drive_store`, :func:`drive_decode`, :func:`drive_merge`) builds one case's tensors from plain
data (shapes, lengths, a seed), launches the kernel as the notebook's locked cell does
(:mod:`servelab.kernels.exercises`) and hands back what it wrote, as arrays. The same driver runs the float64
reference of :mod:`servelab.kernels.reference` on the grader's side, and the :data:`SPECS` compare the two.

What a driver's inputs make visible in the returned data:

- every cache slot no token owns is NaN, every block-table entry past a sequence's blocks points at an all-NaN
  block of its own and block 0 is never used: a key read past a sequence's end reaches the output as NaN;
- every output sits between margins of NaN (:data:`MARGIN` rows around ``out``; one block before a cache and
  ``block_size`` blocks after it): a store outside the output lands there and is handed back with it;
- in Triton's interpreter every load and store outside the tensors is dropped (a wild address would crash the
  kernel) and counted, and the loads of the block table (decode) and of the partials (merge) are recorded. An
  unmasked block-table load or the padded split lanes leave nothing in the output (the values read are thrown
  away): the record shows them in the learner's visible checks (:func:`run_decode`, :func:`run_merge`) and in a
  failing case's message, but no verdict depends on it, since the learner's own code could switch it off.

:func:`diagnose` is a visible assert's message: the case, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this case. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch06``), outside the learner's kernel.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import warnings

import numpy as np
import torch

import servelab.kernels  # noqa: F401  (first: it chooses the interpreter before anything is decorated)
from servelab.kernels import exercises as ex
from servelab.kernels import frontend
from servelab.kernels.launch import interpreted
from servelab.kernels.reference import gather_kv, ref_paged_decode, ref_store_kvcache
from servelab_autograder.exercises import common, spec
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch06_triton_paged_attention"
SHORT = spec.SHORT
MARGIN = 16                                        # NaN rows before and after every out (BLOCK_H is 16)
DTYPES = {"float32": torch.float32, "float16": torch.float16}
# against the float64 reference, atol = rtol: fp16 rounds the output and P (~5e-4 relative)
TOL = {"float32": 1e-4, "float16": 3e-3}
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
# the library's tile loops: a kernel that calls one has not written its own
_LIBRARY_LOOPS = {"attend_tiles", "paged_decode_kernel", "split_kv_decode_kernel", "merge_splits_kernel",
                  "split_partials_kernel", "store_kvcache_kernel", "prefill_attention_kernel"}


# --------------------------------------------------------------------------------------------------------
# launching a learner's kernel


class _Watch:
    """While a launch runs in Triton's interpreter, every load and store outside the ``buffers`` is dropped (a
    load gets ``other``) and counted in :attr:`stray`; loads of the ``watched`` buffers are kept in
    :attr:`reads` as (program, buffer, element indices). Off for a compiled kernel."""

    def __init__(self, on: bool, buffers: dict, watched: tuple[str, ...] = ()):
        self.on = on
        self.regions = [(name, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), t.element_size())
                        for name, t in buffers.items()]
        self.watched = watched
        self.reads: list[tuple[tuple[int, int], str, np.ndarray]] = []
        self.stray = 0

    def _keep(self, ptrs, mask, program, load: bool) -> np.ndarray:
        addrs = np.asarray(ptrs.data, dtype=np.uint64)
        want = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
        keep = np.zeros(addrs.shape, dtype=bool)
        for name, lo, hi, size in self.regions:
            inside = want & (addrs >= lo) & (addrs < hi)
            keep |= inside
            if load and name in self.watched and inside.any():
                self.reads.append((program, name, ((addrs[inside] - lo) // size).astype(np.int64)))
        self.stray += int((want & ~keep).sum())
        return keep

    @contextlib.contextmanager
    def active(self):
        if not self.on:
            yield
            return
        from triton.runtime import interpreter as interp

        builder, handle = interp.interpreter_builder, interp.TensorHandle
        load, store = builder.create_masked_load, builder.create_masked_store

        def watched_load(ptrs, mask, other, cache_policy, is_volatile):
            keep = self._keep(ptrs, mask, tuple(builder.grid_idx[:2]), True)
            return load(ptrs, handle(keep, mask.dtype), other, cache_policy, is_volatile)

        def watched_store(ptrs, value, mask, cache_policy):
            return store(ptrs, value, handle(self._keep(ptrs, mask, None, False), mask.dtype), cache_policy)

        builder.create_masked_load, builder.create_masked_store = watched_load, watched_store
        try:
            yield
        finally:
            del builder.create_masked_load, builder.create_masked_store


def _check_kernel(kernel, name: str) -> None:
    fn = getattr(kernel, "fn", None)
    if not callable(fn) or not hasattr(kernel, "__getitem__"):
        raise TypeError(f"{name} is {SHORT.repr(kernel)}, not a @triton.jit kernel: decorate the function with "
                        "@triton.jit")
    if (getattr(fn, "__module__", "") or "").startswith("servelab."):
        raise TypeError(f"{name} is {fn.__module__}.{fn.__name__}, a kernel of the library: write your own")
    code = getattr(fn, "__code__", None)
    borrowed = sorted(set(code.co_names if code is not None else ()) & _LIBRARY_LOOPS)
    if borrowed:
        raise TypeError(f"your {name} calls {borrowed[0]} from servelab.kernels: write the loop yourself")


def _device(kernel) -> str:
    """Where a kernel's tensors live: the CPU in the interpreter, the GPU for a compiled kernel."""
    return "cpu" if interpreted(kernel) else "cuda"


def _compiles_for_gpu(kernel, launcher, *args, **kwargs) -> None:
    """Raise when an interpreted ``kernel`` would not compile for a GPU with the arguments ``launcher`` gives it
    (``servelab.kernels.frontend``: the interpreter promotes a loop-carried fp16 to fp32 and reads "-inf" as a
    float; the compiler refuses both). The launcher runs with the kernel's launch captured, not run."""
    if not interpreted(kernel):
        return
    from triton.runtime.interpreter import InterpretedFunction

    launches, original = [], InterpretedFunction.__getitem__

    def capture(self, grid):
        if self is not kernel:
            return original(self, grid)
        return lambda *a, **kw: launches.append((a, kw))

    InterpretedFunction.__getitem__ = capture
    try:
        launcher(kernel, *args, **kwargs)
    finally:
        InterpretedFunction.__getitem__ = original
    for a, kw in launches[:1]:
        error = frontend.frontend_error(kernel, a, kw)
        if error:
            raise TypeError(f"{kernel.fn.__name__} runs in Triton's interpreter but would not compile for a GPU "
                            f"(Triton's compiler, sm_90): {error}")


def _launch(kernel, watch: _Watch, launcher, *args, **kwargs) -> None:
    """``launcher(kernel, *args)``, quiet (nbgrader counts stderr as a failure); what the kernel raised, not the
    interpreter's wrapper around it. First, that the kernel would compile for a GPU."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), watch.active():
            warnings.simplefilter("ignore")
            _compiles_for_gpu(kernel, launcher, *args, **kwargs)
            launcher(kernel, *args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the learner's own exception, unwrapped, goes on up
        while type(e).__name__ == "InterpreterError" and e.__cause__ is not None:
            e = e.__cause__
        raise e from None


def _margined(shape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, out): out [*shape] is the middle of a NaN buffer of MARGIN rows more on each side."""
    rows = math.prod(shape[:-1])
    buf = torch.full((MARGIN + rows + MARGIN, shape[-1]), float("nan"), dtype=dtype, device=device)
    return buf, buf[MARGIN:MARGIN + rows].view(*shape)


# --------------------------------------------------------------------------------------------------------
# exercise 1: store_kv_kernel


def far_slot(slot: int, block_size: int, num_kv_heads: int, head_dim: int) -> int:
    """A store case's slot ``slot`` moved FAR_ELEMENTS elements on (its block id by FAR_ELEMENTS / block stride)."""
    return slot + FAR_ELEMENTS // (num_kv_heads * head_dim)


def _is_far(slot_mapping, block_size, num_blocks) -> list[bool]:
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


def _store(kernel, case):
    """Launch ``kernel`` on the store case: (key, value, k_buffer, v_buffer, k_cache, v_cache, watch)."""
    _check_kernel(kernel, "store_kv_kernel")
    key, value, k_buf, v_buf, k_cache, v_cache, slots = store_inputs(*case, device=_device(kernel))
    watch = _Watch(interpreted(kernel), dict(key=key, value=value, k_cache=k_buf, v_cache=v_buf, slot_mapping=slots))
    _launch(kernel, watch, ex.launch_store_kv, key, value, k_cache, v_cache, slots)
    return key, value, k_buf, v_buf, k_cache, v_cache, watch


def drive_store(kernel, slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed) -> dict:
    """The store case's caches, margins included, after ``kernel`` (or the reference) ran on it, and the accesses
    outside every tensor."""
    case = (slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed)
    far = _is_far(slot_mapping, block_size, num_blocks)
    if kernel is ref_store_kvcache or (any(far) and not interpreted(kernel)):
        # a far slot's key and value land past the small cache: dropped, 2 x heads x head_dim accesses each
        key, value, k_buf, v_buf, k_cache, v_cache, slots = store_inputs(*case)
        near = torch.where(torch.tensor(far), -1, slots)
        for cache, new in zip((k_cache, v_cache), ref_store_kvcache(key, value, k_cache, v_cache, near)):
            cache.copy_(new)
        return {"k_cache": k_buf, "v_cache": v_buf, "stray": 2 * sum(far) * num_kv_heads * head_dim}
    _, _, k_buf, v_buf, _, _, watch = _store(kernel, case)
    return {"k_cache": k_buf, "v_cache": v_buf, "stray": watch.stray}


def run_store_kv(kernel, *case):
    """The visible test's store: (key, value, k_cache, v_cache) after ``kernel`` ran on ``case``'s inputs as the
    driver launches it (margins around the caches, stray accesses dropped); raises AssertionError with
    :func:`diagnose`'s message when it stored into a margin or touched memory outside every tensor."""
    key, value, k_buf, v_buf, k_cache, v_cache, watch = _store(kernel, case)
    margins = [buf[i].isnan().all() for buf in (k_buf, v_buf) for i in [0, *range(1 + case[2], len(buf))]]
    if watch.stray or not all(margins):
        raise AssertionError(diagnose(kernel, *case))
    return key, value, k_cache, v_cache


def _placements(buf: np.ndarray, src: np.ndarray) -> list[list[int]]:
    """[block, row, head, token] for each (block, row, head) of a cache buffer that is not all NaN: the token
    whose vector it holds (-1: no token's), blocks counted from the cache's first (-1: the margin before it)."""
    out = []
    for b, r, h in np.argwhere(~np.isnan(buf).all(-1)).tolist():
        hit = np.flatnonzero((src[:, h] == buf[b, r, h]).all(-1))
        out.append([b - 1, r, h, int(hit[0]) if hit.size else -1])
    return out


def _arrays(raw, names) -> dict:
    """The driver's answer with its tensors as numpy arrays (they arrive as arrays from the kernel; the
    reference's run on this side hands them over as tensors)."""
    if not isinstance(raw, dict):
        raise Shape(f"expected the driver's answer, not {SHORT.repr(raw)}")
    out = dict(raw)
    for name in names:
        value = raw.get(name)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        if not isinstance(value, np.ndarray):
            raise Shape(f"{name} is {SHORT.repr(value)}, not an array")
        out[name] = value
    return out


def _norm_store(raw, args) -> dict:
    """The driver's answer as compared: where each token's key and value landed ([block, row, head, token]), and
    the stray accesses; ``blocks`` and ``heads`` say how to show it."""
    slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed = args
    shape = (1 + num_blocks + block_size, block_size, num_kv_heads, head_dim)
    raw = _arrays(raw, ("k_cache", "v_cache"))
    key, value = (t.numpy() for t in store_inputs(*args)[:2])
    out = {"blocks": num_blocks, "heads": num_kv_heads}
    for name, src in (("k_cache", key), ("v_cache", value)):
        if raw[name].shape != shape or str(raw[name].dtype) != dtype:
            raise Shape(f"{name} came back {list(raw[name].shape)} {raw[name].dtype}; expected {list(shape)} {dtype}")
        out[name] = _placements(raw[name], src)
    return {**out, "stray": common.as_int(raw.get("stray"), "stray", "accesses", SHORT)}


def _store_note(args, got, want) -> str:
    slot_mapping, block_size, num_blocks = args[:3]
    far = [t for t, f in enumerate(_is_far(slot_mapping, block_size, num_blocks)) if f]
    if not far:
        return ""
    return (f" The slots of token(s) {far} lie {FAR_ELEMENTS:,} elements past the start of the cache, as in a cache "
            "of more than 2**31 elements: their stores belong out there (dropped and counted here), and one that "
            "lands inside the small cache had its offset wrap around in int32. Load the slot as tl.int64.")


def _where(b: int, r: int, num_blocks: int) -> str:
    if b < 0:
        return f"row {r} of the margin before the cache"
    if b >= num_blocks:
        return f"block {b} (past the cache's {num_blocks}) row {r}"
    return f"block {b} row {r}"


def _show_placed(placed, num_blocks: int, heads: int) -> str:
    """"block 1 row 1 <- token 0, ...": a slot whose heads all hold one token is named once."""
    by_slot: dict = {}
    for b, r, h, t in placed:
        by_slot.setdefault((b, r), []).append((h, t))
    items = []
    for (b, r), held in by_slot.items():
        if len(held) == heads and len({t for _, t in held}) == 1:
            held = [(None, held[0][1])]
        for h, t in held:
            items.append(f"{_where(b, r, num_blocks)}{'' if h is None else f' head {h}'} <- "
                         f"{f'token {t}' if t >= 0 else 'no token vector'}")
    return (", ".join(items[:12]) + (f", ... ({len(items)} in all)" if len(items) > 12 else "")) or "nothing"


def _show_store(x) -> str:
    k = _show_placed(x["k_cache"], x["blocks"], x["heads"])
    text = f"caches holding {k}" if x["k_cache"] == x["v_cache"] else \
        f"k_cache holding {k}; v_cache holding {_show_placed(x['v_cache'], x['blocks'], x['heads'])}"
    return text + (f", and {x['stray']} access(es) outside every tensor (dropped)" if x["stray"] else "")


# --------------------------------------------------------------------------------------------------------
# exercises 2 and 3: decode_kernel and merge_kernel


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
def _partials(case: tuple, num_splits: int):
    return stage_one(paged_batch(*case), num_splits)


def _past_blocks(watch: _Watch, b: ex.PagedBatch) -> list[list[int]]:
    """[sequence, entry] for the first block-table entries each program read past its sequence's blocks."""
    width, block_size = b.block_tables.shape[1], b.k_cache.shape[1]
    blocks = [-(-n // block_size) for n in b.seq_lens.tolist()]
    past = {(s, e) for (s, _), _, idx in watch.reads for e in (idx - s * width).tolist() if not 0 <= e < blocks[s]}
    return [list(p) for p in sorted(past)[:8]]


def _foreign_lanes(watch: _Watch, part_shape, head_dim: int) -> list[list[int]]:
    """[sequence, head, lane] for the first partials each program read outside its own NUM_SPLITS lanes."""
    num_seqs, num_q_heads, num_splits = part_shape
    out = set()
    for (s, h), name, idx in watch.reads:
        rows = idx // head_dim if name == "part_out" else idx
        own = s * num_q_heads + h
        out |= {(s, h, int(r) - own * num_splits) for r in rows.tolist() if r // num_splits != own}
    return [list(p) for p in sorted(out)[:8]]


@contextlib.contextmanager
def _block_ids_unchecked(far: bool):
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


def _decode(kernel, case):
    """Launch ``kernel`` on the decode case: (batch, out's buffer, out, watch)."""
    _check_kernel(kernel, "decode_kernel")
    b = paged_batch(*case, device=_device(kernel))
    buf, out = _margined(tuple(b.q.shape), b.q.dtype, b.q.device)
    watch = _Watch(interpreted(kernel), dict(q=b.q, k_cache=b.k_cache, v_cache=b.v_cache, block_tables=b.block_tables,
                                         seq_lens=b.seq_lens, out=buf), ("block_tables",))
    with _block_ids_unchecked(case[6] == "far"):
        _launch(kernel, watch, ex.launch_decode, *b.args, out=out)
    return b, buf, out, watch


def drive_decode(kernel, seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed) -> dict:
    """``out`` with its margins after ``kernel`` (or the reference) ran on the decode case, the block-table
    entries read past a sequence's blocks, and the accesses outside every tensor."""
    case = (seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed)
    if kernel is ref_paged_decode or (scores == "far" and not interpreted(kernel)):
        if scores == "far":   # every key and value lies out of reach: each load gives 0.0 (its other=)
            b = paged_batch(seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, "normal", seed)
            b.k_cache.zero_()
            b.v_cache.zero_()
        else:
            b = paged_batch(*case)
        buf, out = _margined(tuple(b.q.shape), torch.float64, "cpu")
        out.copy_(ref_paged_decode(*b.args))
        return {"out": buf, "reads": [], "stray": 0}
    b, buf, _, watch = _decode(kernel, case)
    return {"out": buf, "reads": _past_blocks(watch, b), "stray": watch.stray}


def _recorded(buf: torch.Tensor, watch: _Watch, reads: list) -> bool:
    """Whether a launch left anything but its output: a margin row stored, a read recorded, a stray access."""
    return bool(reads) or bool(watch.stray) or not bool(buf[:MARGIN].isnan().all() and buf[-MARGIN:].isnan().all())


def run_decode(kernel, *case) -> tuple[ex.PagedBatch, torch.Tensor]:
    """The visible test's decode: (batch, out) after ``kernel`` ran on ``case``'s batch as the driver launches it
    (out between NaN margins, stray accesses dropped); raises AssertionError with :func:`diagnose`'s message when
    the driver records anything but out."""
    b, buf, out, watch = _decode(kernel, case)
    if _recorded(buf, watch, _past_blocks(watch, b)):
        raise AssertionError(diagnose(kernel, *case))
    return b, out


def _merge(kernel, case, num_splits):
    """Launch ``kernel`` on the case's stage-1 partials: (partials, out's buffer, out, watch)."""
    _check_kernel(kernel, "merge_kernel")
    device = _device(kernel)
    parts = tuple(t.clone().to(device) for t in _partials((tuple(case[0]), *case[1:]), num_splits))
    num_seqs, num_q_heads, _, head_dim = parts[0].shape
    buf, out = _margined((num_seqs, num_q_heads, head_dim), DTYPES[case[5]], device)
    watch = _Watch(interpreted(kernel), dict(part_out=parts[0], part_max=parts[1], part_sum=parts[2], out=buf),
                   ("part_out", "part_max", "part_sum"))
    _launch(kernel, watch, ex.launch_merge, *parts, out)
    return parts, buf, out, watch


def drive_merge(kernel, seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed,
                num_splits) -> dict:
    """``out`` with its margins after ``kernel`` (or the reference) merged the case's stage-1 partials
    (:func:`stage_one`), the partials read outside a program's own lanes, and the accesses outside every tensor."""
    case = (seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed)
    if kernel is ex.ref_merge:
        parts = _partials((tuple(seq_lens), *case[1:]), num_splits)
        buf, out = _margined(tuple(parts[0].shape[:2]) + (head_dim,), torch.float64, "cpu")
        out.copy_(kernel(*parts))
        return {"out": buf, "reads": [], "stray": 0}
    parts, buf, _, watch = _merge(kernel, case, num_splits)
    return {"out": buf, "reads": _foreign_lanes(watch, tuple(parts[1].shape), head_dim), "stray": watch.stray}


def run_merge(kernel, *case) -> tuple[ex.PagedBatch, torch.Tensor]:
    """The visible test's split-KV decode: (batch, out) after stage 1 and ``kernel`` on ``case`` (a decode case,
    then num_splits) as the driver launches it; raises AssertionError with :func:`diagnose`'s message when the
    driver records anything but out."""
    parts, buf, out, watch = _merge(kernel, case[:-1], case[-1])
    if _recorded(buf, watch, _foreign_lanes(watch, tuple(parts[1].shape), parts[0].shape[-1])):
        raise AssertionError(diagnose(kernel, *case))
    return paged_batch(*case[:-1], device=out.device), out


def _norm_out(raw, args) -> dict:
    """The driver's answer as compared: out [num_seqs, num_q_heads, head_dim] (float64), the rows stored into
    the margins before and after it, the reads it records, the stray accesses."""
    seq_lens, num_q_heads, head_dim, dtype = args[0], args[2], args[4], args[5]
    rows = len(seq_lens) * num_q_heads
    raw = _arrays(raw, ("out",))
    buf = raw["out"]
    if buf.shape != (2 * MARGIN + rows, head_dim):
        raise Shape(f"out came back {list(buf.shape)}; expected {[2 * MARGIN + rows, head_dim]}")
    reads = raw.get("reads")
    if not isinstance(reads, list) or not all(isinstance(r, list) and all(type(i) is int for i in r) for r in reads):
        raise Shape("expected the reads as lists of ints")
    touched = ~np.isnan(buf).all(-1)
    out = buf[MARGIN:MARGIN + rows].astype(np.float64).reshape(len(seq_lens), num_q_heads, head_dim)
    if args[6] == "far":     # a row is 0 where it is finite (no NaN of the small cache reached it), else NaN
        out = np.where(np.isfinite(out).all(-1, keepdims=True), 0.0, np.nan) * np.ones_like(out)
    return {"dtype": dtype, "out": out,
            "outside": [int(touched[:MARGIN].sum()), int(touched[MARGIN + rows:].sum())], "reads": reads,
            "stray": common.as_int(raw.get("stray"), "stray", "accesses", SHORT)}


def _wrong_rows(got: np.ndarray, want: np.ndarray, tol: float) -> np.ndarray:
    """Which rows (sequence, head) of ``got`` are off ``want``: NaN where ``want`` is not, or past the tolerance."""
    if got.shape != want.shape:
        return np.ones(want.shape[:-1], dtype=bool)
    with np.errstate(invalid="ignore"):
        far = ~(np.abs(got - want) <= tol * (1 + np.abs(want)))
    same_odd = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
    return (far & ~same_odd).any(-1)


def _same_out(got: dict, want: dict) -> bool:
    # The verdict is the data alone: out and its margins. The interpreter watch's reads and stray accesses are
    # counted inside the learner's kernel, which their code could switch off, so they only go into messages
    # (and the learner's own visible checks), never into a verdict.
    return got["outside"] == want["outside"] and not _wrong_rows(got["out"], want["out"], TOL[want["dtype"]]).any()


def _alike(got: dict, wrong: dict) -> bool:
    """A pitfall's answer explains got (for naming it, a message): the same data and the same recorded reads."""
    return _same_out(got, wrong) and got["reads"] == wrong["reads"] and got["stray"] == wrong["stray"]


def _compact(x: dict) -> dict:
    """What the pitfall atlas keeps of an answer: two elements of every row tell the pitfalls apart."""
    return {**x, "out": x["out"][..., :2].astype(np.float32)}


def _show_out(reads: str):
    def show(x) -> str:
        out = x["out"]
        parts = [f"out {list(out.shape)}"]
        odd = ~np.isfinite(out).all(-1)
        if odd.any():
            s, h = np.argwhere(odd)[0].tolist()
            parts.append(f"NaN or inf in {int(odd.sum())} of {odd.size} rows (out[{s}, {h}] first)")
        before, after = x["outside"]
        if before:
            parts.append(f"{before} row(s) stored before the start of out")
        if after:
            parts.append(f"{after} row(s) stored past the end of out")
        if x["reads"]:
            parts.append(reads + ": " + ", ".join(str(tuple(r)) for r in x["reads"]))
        if x["stray"]:
            parts.append(f"{x['stray']} load(s) or store(s) outside every tensor (dropped)")
        return ", ".join(parts)
    return show


def _fmt_row(row: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in row[:4].tolist()) + (", ...]" if row.size > 4 else "]")


def _first_wrong_row(args, got, want) -> str:
    wrong = _wrong_rows(got["out"], want["out"], TOL[want["dtype"]])
    if not wrong.any():
        return ""
    if args[6] == "far":
        return (f" This case's block ids lie {FAR_ELEMENTS:,} elements past the start of the cache, as in a cache of "
                "more than 2**31 elements, and the test's small cache holds only NaN: a NaN in out means the kernel "
                "read inside it, where an int32 product of block id and stride wraps around to. Convert the block "
                "ids to tl.int64 before multiplying.")
    s, h = np.argwhere(wrong)[0].tolist()
    with np.errstate(invalid="ignore"):
        err = np.abs(got["out"][s, h] - want["out"][s, h]).max()   # NaN when a NaN reached the row
    return (f" First wrong row: out[{s}, {h}] (sequence {s}, {args[0][s]} key(s); query head {h}) is "
            f"{_fmt_row(got['out'][s, h])}, the float64 reference {_fmt_row(want['out'][s, h])} (error {err:.3g}; "
            f"tolerance {TOL[want['dtype']]:g} x (1 + |ref|)).")


# --------------------------------------------------------------------------------------------------------
# exercise 4: decode_traffic, and the drills


def _norm_traffic(raw, args) -> tuple[int, int]:
    if isinstance(raw, dict) or not isinstance(raw, tuple | list) or len(raw) != 2:
        raise Shape("expected a pair (bytes, flops)")
    return (common.as_int(raw[0], "bytes", "bytes", SHORT, strict=True),
            common.as_int(raw[1], "flops", "FLOPs", SHORT, strict=True))


def as_float(x, what: str) -> float:
    return common.as_float(x, what, SHORT, finite=True)


# --------------------------------------------------------------------------------------------------------

_DECODE = ("seq_lens", "block_size", "num_q_heads", "num_kv_heads", "head_dim", "dtype", "scores", "seed")
_DRIVER = f"{__name__}:drive_"


def _store_call(args) -> str:
    slots, block_size, num_blocks, heads, head_dim, dtype, seed = args
    return (f"store_kv_kernel on slot_mapping {SHORT.repr(list(slots))} (a cache of {num_blocks} blocks x "
            f"{block_size} slots, {heads} KV head(s), head_dim {head_dim}, {dtype}; key and value from seed {seed})")


def _batch_text(args) -> str:
    seq_lens, block_size, hq, hkv, head_dim, dtype, scores, seed = args[:8]
    return (f"seq_lens {SHORT.repr(list(seq_lens))}, block size {block_size}, {hq} query / {hkv} KV heads "
            f"(GROUP {hq // max(hkv, 1)}), head_dim {head_dim}, {dtype}, {SCORES.get(scores, scores)}, seed {seed}")


def _decode_call(args) -> str:
    return f"decode_kernel on {_batch_text(args)}"


def _merge_call(args) -> str:
    return f"merge_kernel on the stage-1 partials of {_batch_text(args)}, NUM_SPLITS {args[8]}"


SPECS = {s.name: s for s in [
    Spec("store_kv_kernel", ("slot_mapping", "block_size", "num_blocks", "num_kv_heads", "head_dim", "dtype", "seed"),
         ref_store_kvcache, _norm_store, _show_store, note=_store_note, driver=_DRIVER + "store", call=_store_call),
    Spec("decode_kernel", _DECODE, ref_paged_decode, _norm_out, _show_out("block-table entries (sequence, entry) "
         "read past the sequence's blocks"), _same_out, note=_first_wrong_row, driver=_DRIVER + "decode",
         call=_decode_call, compact=_compact, alike=_alike),
    Spec("merge_kernel", (*_DECODE, "num_splits"), ex.ref_merge, _norm_out, _show_out(
        "partials (sequence, head, lane) read outside the program's NUM_SPLITS lanes"), _same_out,
         note=_first_wrong_row, driver=_DRIVER + "merge", call=_merge_call, compact=_compact, alike=_alike),
    Spec("decode_traffic", ("seq_lens", "num_q_heads", "num_kv_heads", "head_dim", "bytes_per_element"),
         ex.decode_traffic, _norm_traffic, lambda v: f"({v[0]:,} bytes, {v[1]:,} FLOPs)"),
]}


def diagnose(fn, *args, name: str | None = None) -> str:
    """What is wrong with ``fn`` on the case ``args`` in the learner's terms (a visible assert's message), or a
    note that this case is handled correctly. Never raises."""
    name = name or getattr(getattr(fn, "fn", fn), "__name__", None)   # a Triton kernel keeps its function in .fn
    msg = spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, args, name)
    if name in UNSEEN and msg.endswith("is correct on this input"):
        try:
            s = SPECS[name]
            got = s.norm(s.run(fn, list(args)), tuple(args))
        except Exception:  # noqa: BLE001 - a message, whatever happens
            return msg
        if got["reads"] or got["stray"]:
            return (f"{UNSEEN[name]}\n{s.call_text(args)} writes the right output, but: {s.show(got)}. The grader "
                    f"judges only what a kernel writes, so it cannot see this; on a GPU these loads read memory that "
                    f"is not this sequence's.")
    return msg


# The two mistakes no output shows (autograder/known_wrong/<chapter>/unseen/): the visible checks name them.
UNSEEN = {
    "decode_kernel": "Pitfall: a block-table entry past the sequence's blocks was read: mask the block-table load "
                     "with pos < seq_len too (entries past ceil(seq_len / BLOCK_SIZE) are stale ids or padding).",
    "merge_kernel": "Pitfall: the padded split lanes were loaded: lanes NUM_SPLITS .. SPLITS_PAD - 1 are the next "
                    "head's partials (or lie past the tensor), so mask the loads with j < NUM_SPLITS, not just the "
                    "values.",
}
