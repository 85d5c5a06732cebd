"""Chapter 11's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.schedulers.spec_decode`, how its result
is read (plain ``int`` / ``float`` / lists, never compared as the learner built it) and shown.

Two exercises are methods of the look-ahead block manager (``may_append``, ``rollback``): each is **driven**. A
case is a block manager and one sequence as plain data (:func:`bm_state`, :func:`seq_state`); the driver
(:func:`drive_block_method`) builds a ``LookaheadBlockManager`` and a ``Sequence`` in that state, calls the
learner's method once, and returns what it returned and the state it left, as plain data. Both methods only
take and give back blocks through the block manager's own ``_allocate_block`` / ``_deallocate_block``, which stay.

A model or a GPU crosses to the learner's kernel as the dict of its fields (:func:`case`); a driver rebuilds the
``ModelSpec`` / ``GPUSpec`` there. :func:`diagnose` is a visible assert's message; the hidden cases and the
verdicts are the grader's (``servelab_autograder.judge.checks.ch11``), outside the learner's kernel.
"""

from __future__ import annotations

import math
import numbers

from servelab.analytic import speculation
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab.schedulers import spec_decode
from servelab.schedulers.spec_decode import LookaheadBlockManager, Sequence
from servelab_autograder.exercises import common, spec, variants
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch11_speculative_decoding"
_short = common.short_repr(16, 120)


# ------------------------------------------------------------------------------------------------
# the block manager and a sequence as plain data


def _plain(x):
    if type(x) is int or isinstance(x, bool | str) or x is None:
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    return f"<{type(x).__name__}: {_short.repr(x)}>"


def _plain_list(xs) -> list:
    try:
        return [_plain(x) for x in xs]
    except TypeError:
        return [_plain(xs)]


def bm_state(bm: LookaheadBlockManager) -> dict:
    """Block size, each block's reference count, the free list in order, the used set (sorted)."""
    return {"block_size": _plain(bm.block_size), "refs": [_plain(b.ref_count) for b in bm.blocks],
            "free": _plain_list(bm.free_block_ids), "used": sorted(_plain_list(bm.used_block_ids), key=repr)}


def seq_state(seq: Sequence) -> dict:
    """A sequence's length, the tokens with KV (`cached`), its block table and how many drafts it carries."""
    return {"len": _plain(len(seq.token_ids)), "cached": _plain(seq.num_cached_tokens),
            "blocks": _plain_list(seq.block_table), "drafts": _plain(len(seq.draft_token_ids))}


def new_bm(st: dict) -> LookaheadBlockManager:
    bm = LookaheadBlockManager(num_blocks=len(st["refs"]), block_size=st["block_size"], enable_prefix_caching=False)
    for b, ref in zip(bm.blocks, st["refs"]):
        b.ref_count = ref
    bm.free_block_ids.clear()
    bm.free_block_ids.extend(st["free"])
    bm.used_block_ids.clear()
    bm.used_block_ids.update(st["used"])
    return bm


def new_seq(st: dict, block_size: int) -> Sequence:
    seq = Sequence(list(range(1, st["len"] + 1)), name="S", block_size=block_size)
    seq.num_cached_tokens = st["cached"]
    seq.block_table[:] = st["blocks"]
    seq.draft_token_ids = [7] * st["drafts"]
    return seq


def state(bm_blocks: int, block_size: int, seq_len: int, cached: int, held: int, drafts: int,
          taken_by_others: int = 0) -> tuple[dict, dict]:
    """A block manager of `bm_blocks` blocks (the first `taken_by_others` used by other sequences) and one
    sequence of `seq_len` tokens, `cached` of them with KV, holding the next `held` blocks, carrying `drafts`."""
    bm = LookaheadBlockManager(num_blocks=bm_blocks, block_size=block_size, enable_prefix_caching=False)
    for _ in range(taken_by_others):
        bm._allocate_block()
    seq = Sequence(list(range(1, seq_len + 1)), name="S", block_size=block_size)
    seq.num_cached_tokens = cached
    seq.block_table[:] = [bm._allocate_block() for _ in range(held)]
    seq.draft_token_ids = [7] * drafts
    return bm_state(bm), seq_state(seq)


def drive_block_method(fn, where: str, bm: dict, seq: dict) -> dict:
    manager, s = new_bm(bm), new_seq(seq, bm["block_size"])
    got = fn(manager, s)
    out: dict = {"bm": bm_state(manager), "seq": seq_state(s)}
    if got is None or isinstance(got, bool) or not isinstance(got, numbers.Integral):
        out["result"] = _plain(got) if got is None else f"<{type(got).__name__}: {_short.repr(got)}>"
    else:
        out["result"] = int(got)
    return out


# ------------------------------------------------------------------------------------------------
# the drivers of the cost exercises: a model, a draft and a GPU as their fields


def _model(x):
    return None if x is None else ModelSpec(**x)


def drive_speedup(fn, model, gpu, batch, context_len, k, alpha, draft):
    return fn(ModelSpec(**model), GPUSpec(**gpu), batch, context_len, k, alpha, draft=_model(draft))


def drive_crossover(fn, model, gpu, context_len, k, alpha, draft, max_batch):
    return fn(ModelSpec(**model), GPUSpec(**gpu), context_len, k, alpha, draft=_model(draft), max_batch=max_batch)


# ------------------------------------------------------------------------------------------------
# reading what came back


def _drafts(raw, args) -> list[int]:
    if not isinstance(raw, list | tuple):
        raise Shape(f"expected a list of draft counts, one per sequence, not {_short.repr(raw)}")
    return [common.as_int(x, f"item {i}", "drafts", _short, strict=True) for i, x in enumerate(raw)]


def _float(raw, args) -> float:
    x = common.as_float(raw, "the result", _short, strict=True)   # tokens per step and speedups are floats
    if math.isnan(x) or math.isinf(x):
        raise Shape(f"the result is {x}; expected a finite number")
    return x


def _batch_or_none(raw, args) -> int | None:
    if raw is None:
        return None
    return common.as_int(raw, "the result", "sequences (or None when speculation pays at every batch)", _short,
                         strict=True)


def _block_norm(key: str):
    def norm(raw, args):
        if not isinstance(raw, dict):
            raise Shape(f"the driver returned {_short.repr(raw)}")
        return {"result": raw.get("result"), "bm": raw["bm"], "seq": raw["seq"]}
    return norm


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ------------------------------------------------------------------------------------------------
# showing it


def _name(obj) -> str:
    return "None" if obj is None else str(obj.get("name", "?"))


def _show_block(v: dict) -> str:
    return (f"returned {v['result']}; the sequence holds blocks {v['seq']['blocks']}, "
            f"free list {v['bm']['free']}")


def _block_call(method: str):
    def call(args):
        _, bm, seq = args
        return (f"{method}(seq) with block_size {bm['block_size']}, a sequence of {seq['len']} tokens "
                f"({seq['cached']} with KV) holding blocks {seq['blocks']} and carrying {seq['drafts']} drafts, "
                f"free list {bm['free']}")
    return call


def _block_note(args, got, want) -> str:
    _, bm, seq = args
    bs = bm["block_size"]
    if got["seq"]["blocks"] != want["seq"]["blocks"]:
        return (f"\n  positions with KV after it: {want['seq']['cached']} (tokens 0..{want['seq']['cached'] - 1}); "
                f"the step computes positions {seq['len'] - 1}..{seq['len'] - 1 + seq['drafts']}; blocks of {bs}: "
                f"it should hold {len(want['seq']['blocks'])}, not {len(got['seq']['blocks'])}")
    return ""


def _speed_note(args, got, want) -> str:
    model, gpu, batch, ctx, k, alpha, draft = args
    m, g = ModelSpec(**model), GPUSpec(**gpu)
    plain = speculation.verify_step_time(m, g, batch, ctx, 0)
    verify = speculation.verify_step_time(m, g, batch, ctx, k)
    return (f"\n  the reference's steps: plain decode {plain * 1e3:.4g} ms, verification of {k + 1} tokens a "
            f"sequence {verify * 1e3:.4g} ms" + ("" if draft is None else ", plus the draft model's own steps"))


_ARGS = {"model": _name, "gpu": _name, "draft": _name}
SPECS = {s.name: s for s in [
    Spec("fit_drafts", ("wanted", "budget"), spec_decode.fit_drafts, _drafts),
    Spec("may_append", ("where", "bm", "seq"), LookaheadBlockManager.may_append, _block_norm("may_append"),
         _show_block, driver=f"{__name__}:drive_block_method", note=_block_note, call=_block_call("may_append")),
    Spec("rollback", ("where", "bm", "seq"), LookaheadBlockManager.rollback, _block_norm("rollback"),
         _show_block, driver=f"{__name__}:drive_block_method", note=_block_note, call=_block_call("rollback")),
    Spec("expected_tokens_per_step", ("alpha", "k"), speculation.expected_tokens_per_step, _float,
         lambda x: f"{x:.10g}", _close),
    Spec("speculative_speedup", ("model", "gpu", "batch", "context_len", "k", "alpha", "draft"),
         speculation.speculative_speedup, _float, lambda x: f"{x:.10g}", _close, show_args=_ARGS,
         note=_speed_note, driver=f"{__name__}:drive_speedup"),
    Spec("crossover_batch", ("model", "gpu", "context_len", "k", "alpha", "draft", "max_batch"),
         speculation.crossover_batch, _batch_or_none, lambda b: "None" if b is None else f"{b} sequences",
         show_args=_ARGS, driver=f"{__name__}:drive_crossover"),
]}

_DEFAULTS = {"speculative_speedup": {"draft": None}, "crossover_batch": {"draft": None, "max_batch": 4096}}
_PLAIN = {**spec.model_and_gpu(), "draft": lambda v: None if v is None else spec.as_fields(v, ModelSpec)}


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it (`spec.plain_case`)."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS, _PLAIN)


def _blocks(n: int, bs: int) -> int:
    return -(-n // bs)


def before(where: str, block_size: int, seq_len: int, drafts: int, others: int = 0, spare: int = 0) -> tuple:
    """A `may_append` case: a decoding sequence of `seq_len` tokens (all but the last with KV, in the blocks that
    holds) carrying `drafts` drafts, before its verification step; `others` blocks used by other sequences and
    free blocks for its look-ahead plus `spare`."""
    held = _blocks(seq_len - 1, block_size)
    short = max(0, _blocks(seq_len + drafts, block_size) - held)
    return (where, *state(others + held + short + spare, block_size, seq_len, seq_len - 1, held, drafts, others))


def after(where: str, block_size: int, seq_len: int, drafts: int, accepted: int, others: int = 0,
          spare: int = 0) -> tuple:
    """A `rollback` case: the sequence of `before` after its step accepted `accepted` of its `drafts` (those
    and the bonus appended, KV kept for seq_len + accepted tokens, drafts cleared, look-ahead blocks held)."""
    held = _blocks(seq_len + drafts, block_size)
    return (where, *state(others + held + spare, block_size, seq_len + accepted + 1, seq_len + accepted, held, 0,
                          others))


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. For ``may_append`` / ``rollback`` the arguments are a case made by
    :func:`before` / :func:`after`. Never raises."""
    name = name or getattr(fn, "__name__", "")
    if name in ("may_append", "rollback"):
        return spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, tuple(args), name)
    return spec.diagnose_call(SPECS, ASSIGNMENT, fn, args, kwargs, name, _DEFAULTS, _PLAIN)


def run(fn, case: tuple) -> dict:
    """`fn` (a may_append or rollback) on a case of :func:`before` / :func:`after`, through the driver: what it
    returned, the sequence and the block manager it left, as plain data, for a visible assert."""
    return drive_block_method(fn, *case)


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants): verification steps within the token budget and the
# KV cache; a rollback that gives at least one block back

def _rollback(rng) -> dict:
    block = rng.choice((2, 4))
    accepted = rng.randrange(0, 4)
    return {"block": block, "seq_len": rng.randrange(5, 41), "drafts": accepted + block + rng.randrange(0, 4),
            "accepted": accepted}


_ALPHAS = (0.6, 0.7, 0.8, 0.9)
DRILLS = (
    variants.Variant("drill_1", {"k": 5, "alpha": 0.8},
                     lambda rng: {"k": rng.randrange(2, 9), "alpha": rng.choice((0.5, *_ALPHAS))},
                     "tokens one verification step appends on average, k = {k}, alpha = {alpha}"),
    variants.Variant("drill_2", {"context": 1024, "k": 4, "alpha": 0.7},
                     lambda rng: {"context": rng.choice((512, 1024, 2048, 4096)), "k": rng.randrange(2, 7),
                                  "alpha": rng.choice(_ALPHAS)},
                     "the speedup at batch 1 and {context:,} tokens of context, k = {k}, alpha = {alpha}, drafting "
                     "with `DRAFT_1B` (Llama-3-8B, one H100)"),
    variants.Variant("drill_3", {"batch": 512, "context": 384, "k": 4, "alpha": 0.7},
                     lambda rng: {"batch": rng.choice((256, 384, 512)), "context": rng.choice((256, 384, 512)),
                                  "k": rng.randrange(2, 7), "alpha": rng.choice(_ALPHAS)},
                     "the speedup of speculation (k = {k}, alpha = {alpha}, prompt lookup) for a decode batch of "
                     "{batch} at {context} tokens of context (Llama-3-8B, one H100): above 1 or below?"),
    variants.Variant("drill_4", {"batch": 48, "k": 3},
                     lambda rng: {"batch": rng.randrange(16, 129, 8), "k": rng.randrange(1, 7)},
                     "tokens of the step's budget a verification step of {batch} sequences with k = {k} drafts each "
                     "takes"),
    variants.Variant("drill_5", {"block": 2, "seq_len": 10, "drafts": 6, "accepted": 3}, _rollback,
                     "look-ahead blocks the rollback gives back: block size {block}, a sequence of {seq_len} tokens "
                     "(all but the last with KV), {drafts} drafts, {accepted} accepted"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.k`` and so on."""
    return variants.show(DRILLS, who)
