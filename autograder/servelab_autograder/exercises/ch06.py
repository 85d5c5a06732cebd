"""Chapter 06's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

The learner writes three Triton kernels and one formula. A kernel is judged by what it leaves in memory: a
*driver* (:func:`drive_store`, :func:`drive_decode`, :func:`drive_merge`) builds one case's tensors from plain
data (``ch06_inputs``), launches the kernel as the notebook's locked cell does (``triton_launch``, with
:mod:`servelab.kernels.exercises`) and hands back what it wrote, as arrays. The same driver runs the float64
reference of :mod:`servelab.kernels.reference` on the grader's side, and the :data:`SPECS` compare the two
(``ch06_outputs``).

The inputs make mistakes visible in the data: every cache slot no token owns is NaN, so a key read past a
sequence's end reaches the output as NaN; every output sits between margins of NaN, so a store outside it is
handed back with it; in Triton's interpreter every access outside the tensors is dropped and counted, and the
block-table and partials loads are recorded: the learner's visible checks (:func:`run_decode`, :func:`run_merge`)
and a failing case's message show them, but no verdict depends on them.

:func:`diagnose` is a visible assert's message: the case, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this case. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch06``), outside the learner's kernel.
"""

from __future__ import annotations

import torch

import servelab.kernels  # noqa: F401  (first: it chooses the interpreter before anything is decorated)
from servelab.kernels import exercises as ex
from servelab.kernels.launch import interpreted
from servelab.kernels.reference import ref_paged_decode, ref_store_kvcache
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.ch06_inputs import (  # noqa: F401 - the names other modules find here
    DTYPES,
    FAR_ELEMENTS,
    SCORES,
    block_ids_unchecked,
    far_slot,
    is_far,
    paged_batch,
    partials,
    stage_one,
    store_inputs,
)
from servelab_autograder.exercises.ch06_outputs import (  # noqa: F401 - the names other modules find here
    TOL,
    alike,
    compact,
    first_wrong_row,
    norm_out,
    norm_store,
    same_out,
    show_out,
    show_store,
    store_note,
)
from servelab_autograder.exercises.ch06_outputs import wrong_rows as _wrong_rows  # noqa: F401 - the tests' name
from servelab_autograder.exercises.spec import Shape, Spec
from servelab_autograder.exercises.triton_launch import MARGIN, Watch, check_kernel, device_of, launch, margined

ASSIGNMENT = "ch06_triton_paged_attention"
SHORT = spec.SHORT


# --------------------------------------------------------------------------------------------------------
# exercise 1: store_kv_kernel


def _store(kernel, case):
    """Launch ``kernel`` on the store case: (key, value, k_buffer, v_buffer, k_cache, v_cache, watch)."""
    check_kernel(kernel, "store_kv_kernel")
    key, value, k_buf, v_buf, k_cache, v_cache, slots = store_inputs(*case, device=device_of(kernel))
    watch = Watch(interpreted(kernel), dict(key=key, value=value, k_cache=k_buf, v_cache=v_buf, slot_mapping=slots))
    launch(kernel, watch, ex.launch_store_kv, key, value, k_cache, v_cache, slots)
    return key, value, k_buf, v_buf, k_cache, v_cache, watch


def drive_store(kernel, slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed) -> dict:
    """The store case's caches, margins included, after ``kernel`` (or the reference) ran on it, and the accesses
    outside every tensor."""
    case = (slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed)
    far = is_far(slot_mapping, block_size, num_blocks)
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


# --------------------------------------------------------------------------------------------------------
# exercises 2 and 3: decode_kernel and merge_kernel

def _past_blocks(watch: Watch, b: ex.PagedBatch) -> list[list[int]]:
    """[sequence, entry] for the first block-table entries each program read past its sequence's blocks."""
    width, block_size = b.block_tables.shape[1], b.k_cache.shape[1]
    blocks = [-(-n // block_size) for n in b.seq_lens.tolist()]
    past = {(s, e) for (s, _), _, idx in watch.reads for e in (idx - s * width).tolist() if not 0 <= e < blocks[s]}
    return [list(p) for p in sorted(past)[:8]]


def _foreign_lanes(watch: Watch, part_shape, head_dim: int) -> list[list[int]]:
    """[sequence, head, lane] for the first partials each program read outside its own NUM_SPLITS lanes."""
    num_seqs, num_q_heads, num_splits = part_shape
    out = set()
    for (s, h), name, idx in watch.reads:
        rows = idx // head_dim if name == "part_out" else idx
        own = s * num_q_heads + h
        out |= {(s, h, int(r) - own * num_splits) for r in rows.tolist() if r // num_splits != own}
    return [list(p) for p in sorted(out)[:8]]


def _decode(kernel, case):
    """Launch ``kernel`` on the decode case: (batch, out's buffer, out, watch)."""
    check_kernel(kernel, "decode_kernel")
    b = paged_batch(*case, device=device_of(kernel))
    buf, out = margined(tuple(b.q.shape), b.q.dtype, b.q.device)
    watch = Watch(interpreted(kernel), dict(q=b.q, k_cache=b.k_cache, v_cache=b.v_cache, block_tables=b.block_tables,
                                         seq_lens=b.seq_lens, out=buf), ("block_tables",))
    with block_ids_unchecked(case[6] == "far"):
        launch(kernel, watch, ex.launch_decode, *b.args, out=out)
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
        buf, out = margined(tuple(b.q.shape), torch.float64, "cpu")
        out.copy_(ref_paged_decode(*b.args))
        return {"out": buf, "reads": [], "stray": 0}
    b, buf, _, watch = _decode(kernel, case)
    return {"out": buf, "reads": _past_blocks(watch, b), "stray": watch.stray}


def _recorded(buf: torch.Tensor, watch: Watch, reads: list) -> bool:
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
    check_kernel(kernel, "merge_kernel")
    device = device_of(kernel)
    parts = tuple(t.clone().to(device) for t in partials((tuple(case[0]), *case[1:]), num_splits))
    num_seqs, num_q_heads, _, head_dim = parts[0].shape
    buf, out = margined((num_seqs, num_q_heads, head_dim), DTYPES[case[5]], device)
    watch = Watch(interpreted(kernel), dict(part_out=parts[0], part_max=parts[1], part_sum=parts[2], out=buf),
                   ("part_out", "part_max", "part_sum"))
    launch(kernel, watch, ex.launch_merge, *parts, out)
    return parts, buf, out, watch


def drive_merge(kernel, seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed,
                num_splits) -> dict:
    """``out`` with its margins after ``kernel`` (or the reference) merged the case's stage-1 partials
    (:func:`stage_one`), the partials read outside a program's own lanes, and the accesses outside every tensor."""
    case = (seq_lens, block_size, num_q_heads, num_kv_heads, head_dim, dtype, scores, seed)
    if kernel is ex.ref_merge:
        parts = partials((tuple(seq_lens), *case[1:]), num_splits)
        buf, out = margined(tuple(parts[0].shape[:2]) + (head_dim,), torch.float64, "cpu")
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
         ref_store_kvcache, norm_store, show_store, note=store_note, driver=_DRIVER + "store", call=_store_call),
    Spec("decode_kernel", _DECODE, ref_paged_decode, norm_out, show_out("block-table entries (sequence, entry) "
         "read past the sequence's blocks"), same_out, note=first_wrong_row, driver=_DRIVER + "decode",
         call=_decode_call, compact=compact, alike=alike),
    Spec("merge_kernel", (*_DECODE, "num_splits"), ex.ref_merge, norm_out, show_out(
        "partials (sequence, head, lane) read outside the program's NUM_SPLITS lanes"), same_out,
         note=first_wrong_row, driver=_DRIVER + "merge", call=_merge_call, compact=compact, alike=alike),
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


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): one step for all six drills (they share a key), one
# layer of Llama-3-70B's attention on an H200, long enough contexts that the step stays bandwidth-bound

def _step(rng) -> dict:
    context = rng.randrange(4000, 20_001, 1000)
    return {"batch": rng.randrange(8, 65, 4), "context": context,
            "prefix": rng.randrange(context // 2, context - 999, 500)}


_DEFAULT = {"batch": 24, "context": 10_000, "prefix": 8_000}
_STEP = "one layer's decode attention for {batch} sequences of {context:,} cached tokens"
DRILLS = tuple(variants.Variant(f"drill_{i}", _DEFAULT, _step, text, key="step") for i, text in enumerate((
    "how many bytes does " + _STEP + " move (K and V, queries, outputs)?",
    "its arithmetic intensity, in FLOPs per byte (" + _STEP + ")?",
    "its time at the roofline, in microseconds (" + _STEP + ")?",
    "its memory time divided by its compute time (" + _STEP + "; above 1: bandwidth-bound)?",
    "the same {batch} sequences share their first {prefix:,} tokens, and a cascade kernel reads the shared prefix "
    "once per step: how many bytes does the step move now (K and V, queries, outputs)?",
    "its arithmetic intensity, in FLOPs per byte (the shared {prefix:,} tokens read once)?"), start=1))


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.batch`` and so on."""
    return variants.show(DRILLS, who)
