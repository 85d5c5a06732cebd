"""What a chapter 06 kernel left in memory, as the grader compares it and a message shows it.

A store case's caches come back as where each token's key and value landed (:func:`norm_store`: [block, row,
head, token], the margins included); a decode or merge case's ``out`` as float64 rows with the rows stored into
its margins (:func:`norm_out`). :func:`same_out` is the verdict on the data alone, to the tolerance :data:`TOL`;
the reads and stray accesses the interpreter's watch records go only into messages (:func:`show_out`), since the
learner's own code could switch the watch off.
"""

from __future__ import annotations

import numpy as np
import torch

from servelab_autograder.exercises import common, spec
from servelab_autograder.exercises.ch06_inputs import FAR_ELEMENTS, is_far, store_inputs
from servelab_autograder.exercises.spec import Shape
from servelab_autograder.exercises.triton_launch import MARGIN

SHORT = spec.SHORT
# against the float64 reference, atol = rtol: fp16 rounds the output and P (~5e-4 relative)
TOL = {"float32": 1e-4, "float16": 3e-3}


# --------------------------------------------------------------------------------------------------------
# exercise 1's caches


def _placements(buf: np.ndarray, src: np.ndarray) -> list[list[int]]:
    """[block, row, head, token] for each (block, row, head) of a cache buffer that is not all NaN: the token
    whose vector it holds (-1: no token's), blocks counted from the cache's first (-1: the margin before it)."""
    out = []
    for b, r, h in np.argwhere(~np.isnan(buf).all(-1)).tolist():
        hit = np.flatnonzero((src[:, h] == buf[b, r, h]).all(-1))
        out.append([b - 1, r, h, int(hit[0]) if hit.size else -1])
    return out


def arrays(raw, names) -> dict:
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


def norm_store(raw, args) -> dict:
    """The driver's answer as compared: where each token's key and value landed ([block, row, head, token]), and
    the stray accesses; ``blocks`` and ``heads`` say how to show it."""
    slot_mapping, block_size, num_blocks, num_kv_heads, head_dim, dtype, seed = args
    shape = (1 + num_blocks + block_size, block_size, num_kv_heads, head_dim)
    raw = arrays(raw, ("k_cache", "v_cache"))
    key, value = (t.numpy() for t in store_inputs(*args)[:2])
    out = {"blocks": num_blocks, "heads": num_kv_heads}
    for name, src in (("k_cache", key), ("v_cache", value)):
        if raw[name].shape != shape or str(raw[name].dtype) != dtype:
            raise Shape(f"{name} came back {list(raw[name].shape)} {raw[name].dtype}; expected {list(shape)} {dtype}")
        out[name] = _placements(raw[name], src)
    return {**out, "stray": common.as_int(raw.get("stray"), "stray", "accesses", SHORT)}


def store_note(args, got, want) -> str:
    slot_mapping, block_size, num_blocks = args[:3]
    far = [t for t, f in enumerate(is_far(slot_mapping, block_size, num_blocks)) if f]
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


def show_store(x) -> str:
    k = _show_placed(x["k_cache"], x["blocks"], x["heads"])
    text = f"caches holding {k}" if x["k_cache"] == x["v_cache"] else \
        f"k_cache holding {k}; v_cache holding {_show_placed(x['v_cache'], x['blocks'], x['heads'])}"
    return text + (f", and {x['stray']} access(es) outside every tensor (dropped)" if x["stray"] else "")



# --------------------------------------------------------------------------------------------------------
# exercises 2 and 3's out


def norm_out(raw, args) -> dict:
    """The driver's answer as compared: out [num_seqs, num_q_heads, head_dim] (float64), the rows stored into
    the margins before and after it, the reads it records, the stray accesses."""
    seq_lens, num_q_heads, head_dim, dtype = args[0], args[2], args[4], args[5]
    rows = len(seq_lens) * num_q_heads
    raw = arrays(raw, ("out",))
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


def wrong_rows(got: np.ndarray, want: np.ndarray, tol: float) -> np.ndarray:
    """Which rows (sequence, head) of ``got`` are off ``want``: NaN where ``want`` is not, or past the tolerance."""
    if got.shape != want.shape:
        return np.ones(want.shape[:-1], dtype=bool)
    with np.errstate(invalid="ignore"):
        far = ~(np.abs(got - want) <= tol * (1 + np.abs(want)))
    same_odd = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
    return (far & ~same_odd).any(-1)


def same_out(got: dict, want: dict) -> bool:
    # The verdict is the data alone: out and its margins. The interpreter watch's reads and stray accesses are
    # counted inside the learner's kernel, which their code could switch off, so they only go into messages
    # (and the learner's own visible checks), never into a verdict.
    return got["outside"] == want["outside"] and not wrong_rows(got["out"], want["out"], TOL[want["dtype"]]).any()


def alike(got: dict, wrong: dict) -> bool:
    """A pitfall's answer explains got (for naming it, a message): the same data and the same recorded reads."""
    return same_out(got, wrong) and got["reads"] == wrong["reads"] and got["stray"] == wrong["stray"]


def compact(x: dict) -> dict:
    """What the pitfall atlas keeps of an answer: two elements of every row tell the pitfalls apart."""
    return {**x, "out": x["out"][..., :2].astype(np.float32)}


def show_out(reads: str):
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


def first_wrong_row(args, got, want) -> str:
    wrong = wrong_rows(got["out"], want["out"], TOL[want["dtype"]])
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


__all__ = ["TOL", "alike", "arrays", "compact", "first_wrong_row", "norm_out", "norm_store", "same_out", "show_out",
           "show_store", "store_note", "wrong_rows"]
