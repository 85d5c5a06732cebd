"""Chapter 07's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

The learner writes the engine between ``schedule()`` and the sampled tokens: ``prepare_prefill`` and
``prepare_decode`` (a scheduled batch into a :class:`servelab.engine.llm.Batch`) and ``paged_attention`` (one
layer's K/V stored through the slot mapping, then each sequence's queries against its context read back through
its block table). Each runs through a *driver* on plain data:

- ``prepare_*``: ``(states, block_size)``, one dict per scheduled sequence as the scheduler leaves it before the
  step; :func:`sequences` builds the ``Sequence`` objects, and the driver hands back the batch's fields and the
  sequences as they were left (a prepare step changes nothing);
- ``paged_attention``: ``(batch, num_blocks, block_size, num_q_heads, num_kv_heads, head_dim, seed)``;
  :func:`attention_inputs` draws q, k, v and a cache with random K/V where each cached prefix lives, stale
  values in the slots this step writes and NaN elsewhere (a key read from a slot no sequence owns shows as NaN,
  one read before its store gives a finite wrong answer).

:func:`diagnose` is a visible assert's message, naming the pitfall when the chapter's atlas knows it. The hidden
cases and verdicts are the grader's (``servelab_autograder.judge.checks.ch07``), outside the learner's kernel.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from servelab.analytic.workloads import engine_requests
from servelab.engine import llm
from servelab.engine.model import Model, ModelConfig
from servelab.schedulers import scheduler as sched
from servelab_autograder.exercises import common, spec
from servelab_autograder.exercises.ch07_drills import DRILLS, drill_numbers  # noqa: F401 - the notebook's names
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch07_mini_engine"
SHORT = spec.SHORT
FIELDS = ("input_ids", "positions", "slot_mapping", "cu_seqlens_q", "cu_seqlens_k", "context_lens",
          "block_tables", "last_rows")
STATE = ("token_ids", "block_table", "num_cached_tokens", "num_scheduled_tokens")
TOL = 1e-4            # float32 attention against float32 attention: the order of the sums differs


# --------------------------------------------------------------------------------------------------------
# exercises 1 and 2: prepare_prefill, prepare_decode


def state(seq) -> dict:
    """A scheduled sequence as plain data: what a prepare step reads of it."""
    return {"token_ids": list(seq.token_ids), "block_table": list(seq.block_table),
            "num_cached_tokens": int(seq.num_cached_tokens), "num_scheduled_tokens": int(seq.num_scheduled_tokens)}


def sequences(states: list[dict], block_size: int) -> list[sched.Sequence]:
    """The ``Sequence`` objects of ``states`` (each a dict of :data:`STATE`), with blocks of ``block_size``."""
    seqs = []
    for i, st in enumerate(states):
        s = sched.Sequence(list(st["token_ids"]), name=f"s{i}", block_size=block_size)
        s.block_table = list(st["block_table"])
        s.num_cached_tokens, s.num_scheduled_tokens = st["num_cached_tokens"], st["num_scheduled_tokens"]
        seqs.append(s)
    return seqs


def _field(value):
    """A batch field as plain data: a tensor's values and dtype, or what it was."""
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "values": value.detach().cpu().tolist()}
    return value


def batch_data(batch) -> dict:
    """What a prepare step returned, field by field (a missing field is None)."""
    if not isinstance(batch, llm.Batch):
        return {"not a Batch": SHORT.repr(batch)}
    return {**{f: _field(getattr(batch, f, None)) for f in FIELDS}, "is_prefill": batch.is_prefill}


def drive_prepare(fn, states, block_size) -> dict:
    """``fn(sequences(states), block_size)``'s batch, and the sequences as it left them."""
    seqs = sequences(states, block_size)
    batch = fn(seqs, block_size)
    return {"batch": batch_data(batch), "after": [state(s) for s in seqs]}


def _ints(x, what: str) -> list:
    if isinstance(x, list):
        return [_ints(v, f"{what}[{i}]") for i, v in enumerate(x)]
    return common.as_int(x, what, "", SHORT)


def _norm_fields(batch) -> dict:
    """A batch as :func:`batch_data` hands it over, each field's values as lists of ints, and is_prefill."""
    if "not a Batch" in batch:
        raise Shape(f"it returned {batch['not a Batch']}, not a Batch: return Batch(input_ids=..., ...) with "
                    "every field a tensor")
    out = {}
    for f in FIELDS:
        value = batch.get(f)
        if not isinstance(value, dict) or "dtype" not in value:
            raise Shape(f"Batch.{f} is {SHORT.repr(value)}, not a tensor: build it with torch.tensor(..., "
                        "dtype=torch.long)")
        if value["dtype"] != "int64":   # torch.long, as the model's embedding and index_select take
            raise Shape(f"Batch.{f} is a {value['dtype']} tensor; it holds ids, positions or counts: use "
                        "dtype=torch.long (int64)")
        out[f] = _ints(value["values"], f)
    if type(batch.get("is_prefill")) is not bool:
        raise Shape(f"Batch.is_prefill is {SHORT.repr(batch.get('is_prefill'))}, not True or False")
    out["is_prefill"] = batch["is_prefill"]
    return out


def _norm_prepare(raw, args) -> dict:
    """The driver's answer as compared: the batch's fields (:func:`_norm_fields`); the sequences must come back
    as they went in."""
    if not isinstance(raw, dict) or not isinstance(raw.get("batch"), dict):
        raise Shape(f"expected the driver's answer, not {SHORT.repr(raw)}")
    out = _norm_fields(raw["batch"])
    after = raw.get("after")
    if not isinstance(after, list) or len(after) != len(args[0]):
        raise Shape("the sequences did not come back as they went in")
    changed = [i for i, (a, b) in enumerate(zip(after, args[0])) if a != b]
    if changed:
        raise Shape(f"sequence {changed[0]} was changed ({SHORT.repr(after[changed[0]])}): a prepare step only "
                    "reads the sequences; the scheduler's postprocess updates them after the step")
    return out


def fields(batch) -> dict:
    """What a visible assert compares of a prepare step's batch: each field as a list of ints, is_prefill; an
    AssertionError saying what is not a tensor of ints."""
    try:
        return _norm_fields(batch_data(batch))
    except Shape as e:
        raise AssertionError(str(e)) from None


def _show_batch(b: dict) -> str:
    return "Batch(" + ", ".join(f"{f}={SHORT.repr(b[f])}" for f in (*FIELDS, "is_prefill")) + ")"


def _row_owner(b: dict, row: int) -> int:
    cu = b["cu_seqlens_q"]
    return next((i for i in range(len(cu) - 1) if cu[i] <= row < cu[i + 1]), -1)


def _first_difference(args, got, want) -> str:
    for f in (*FIELDS, "is_prefill"):
        g, w = got[f], want[f]
        if g == w:
            continue
        if not isinstance(w, list) or not isinstance(g, list) or len(g) != len(w):
            n = len(g) if isinstance(g, list) else g
            return f" First difference: {f} has {n} entries, expected {len(w) if isinstance(w, list) else w}."
        i = next(i for i, (a, b) in enumerate(zip(g, w)) if a != b)
        where = ""
        if f in ("input_ids", "positions", "slot_mapping"):
            s = _row_owner(want, i)
            where = f" (row {i}: sequence {s}, position {want['positions'][i]})" if s >= 0 else f" (row {i})"
        elif f in ("context_lens", "last_rows", "block_tables"):
            where = f" (sequence {i})"
        return f" First difference: {f}[{i}] is {SHORT.repr(g[i])}, expected {SHORT.repr(w[i])}{where}."
    return ""


def _states_call(name: str):
    def text(args) -> str:
        states, block_size = args
        seqs = "; ".join(f"{len(s['token_ids'])} tokens, {s['num_cached_tokens']} cached, "
                         f"{s['num_scheduled_tokens']} scheduled, blocks {s['block_table']}" for s in states[:4])
        more = f"; ... {len(states)} sequences in all" if len(states) > 4 else ""
        return f"{name} on [{seqs}{more}] with block_size {block_size}"
    return text


# --------------------------------------------------------------------------------------------------------
# exercise 3: paged_attention


def to_batch(b: dict) -> llm.Batch:
    """A :class:`servelab.engine.llm.Batch` of long tensors from its fields as lists."""
    t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return llm.Batch(*(t(b[f]) for f in FIELDS[:7]), is_prefill=bool(b["is_prefill"]), last_rows=t(b["last_rows"]))


def cached_slots(b: dict, block_size: int) -> list[int]:
    """The slots of every sequence's cached prefix: the keys and values earlier steps stored."""
    out = set()
    for i, n_ctx in enumerate(b["context_lens"]):
        n_new = b["cu_seqlens_q"][i + 1] - b["cu_seqlens_q"][i]
        table = b["block_tables"][i]
        out |= {table[p // block_size] * block_size + p % block_size for p in range(n_ctx - n_new)}
    return sorted(out)


def attention_inputs(batch, num_blocks, block_size, num_q_heads, num_kv_heads, head_dim, seed):
    """(q, k, v, kv_cache, Batch) of an attention case: q, k, v random-normal from ``seed``; the cache
    [2, num_blocks, block_size, num_kv_heads, head_dim] random-normal in the slots of the cached prefixes and in
    the slots this step writes (stale values there: a freed block keeps what its last owner wrote), NaN in every
    other slot."""
    gen = torch.Generator().manual_seed(seed)
    n = len(batch["input_ids"])
    q = torch.randn(n, num_q_heads, head_dim, generator=gen)
    k = torch.randn(n, num_kv_heads, head_dim, generator=gen)
    v = torch.randn(n, num_kv_heads, head_dim, generator=gen)
    cache = torch.randn(2, num_blocks * block_size, num_kv_heads, head_dim, generator=gen)
    keep = torch.zeros(num_blocks * block_size, dtype=torch.bool)
    keep[cached_slots(batch, block_size) + list(batch["slot_mapping"])] = True
    cache[:, ~keep] = float("nan")
    return q, k, v, cache.view(2, num_blocks, block_size, num_kv_heads, head_dim), to_batch(batch)


def drive_attention(fn, batch, num_blocks, block_size, num_q_heads, num_kv_heads, head_dim, seed) -> dict:
    """``fn(q, k, v, kv_cache, batch)``'s output, what the cache holds in the slots this step writes, and how many
    other slots it changed (the whole cache would be too much to hand back)."""
    q, k, v, kv_cache, b = attention_inputs(batch, num_blocks, block_size, num_q_heads, num_kv_heads, head_dim,
                                            seed)
    before = kv_cache.clone()
    out = fn(q, k, v, kv_cache, b)
    flat, old = kv_cache.view(2, -1, num_kv_heads, head_dim), before.view(2, -1, num_kv_heads, head_dim)
    others = torch.ones(flat.shape[1], dtype=torch.bool)
    others[b.slot_mapping] = False
    changed = ~((flat == old) | (flat.isnan() & old.isnan())).flatten(2).all(-1) & others
    return {"out": out if isinstance(out, torch.Tensor) else SHORT.repr(out), "stored": flat[:, b.slot_mapping],
            "others_changed": int(changed.any(0).sum())}


def _array(x, what: str, shape: tuple) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise Shape(f"it returned {x if isinstance(x, str) else SHORT.repr(x)}, not a tensor: return the "
                    f"attention output {list(shape)}, shaped like q")
    if tuple(x.shape) != shape:
        raise Shape(f"{what} is {list(x.shape)}; expected {list(shape)}")
    return x.astype(np.float64)


def _norm_attention(raw, args) -> dict:
    batch, num_blocks, block_size, hq, hkv, d, _ = args
    if not isinstance(raw, dict):
        raise Shape(f"expected the driver's answer, not {SHORT.repr(raw)}")
    n = len(batch["input_ids"])
    return {"out": _array(raw.get("out"), "the output", (n, hq, d)),
            "stored": _array(raw.get("stored"), "the cache's slots of this step", (2, n, hkv, d)),
            "others_changed": common.as_int(raw.get("others_changed"), "others_changed", "slots", SHORT)}


def _differs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Which rows (all but the last axis) of ``got`` are off ``want``: NaN where want is not, or past TOL."""
    if got.shape != want.shape:
        return np.ones(want.shape[:-1], dtype=bool)
    with np.errstate(invalid="ignore"):
        far = ~(np.abs(got - want) <= TOL * (1 + np.abs(want)))
    return (far & ~(np.isnan(got) & np.isnan(want))).any(-1)


def _same_attention(got: dict, want: dict) -> bool:
    return got["others_changed"] == want["others_changed"] and not _differs(got["out"], want["out"]).any() \
        and not _differs(got["stored"], want["stored"]).any()


def _compact(x: dict) -> dict:
    """What the pitfall atlas keeps of an answer: two elements of every token's first head tell the pitfalls
    apart."""
    return {"out": x["out"][:, :1, :2].astype(np.float32), "stored": x["stored"][:, :, :1, :2].astype(np.float32),
            "others_changed": x["others_changed"]}


def _show_attention(x: dict) -> str:
    out = x["out"]
    parts = [f"out {list(out.shape)}"]
    odd = np.isnan(out).any(-1)
    if odd.any():
        t, h = np.argwhere(odd)[0].tolist()
        parts.append(f"NaN in {int(odd.sum())} of {odd.size} rows (out[{t}, {h}] first)")
    if x["others_changed"]:
        parts.append(f"{x['others_changed']} cache slot(s) outside this step's slot mapping changed")
    return ", ".join(parts)


def _fmt_row(row: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in row[:4].tolist()) + (", ...]" if row.size > 4 else "]")


def _first_wrong(args, got, want) -> str:
    batch, block_size = args[0], args[2]
    if got["others_changed"] != want["others_changed"]:
        return (f" {got['others_changed']} cache slot(s) that no token of this step owns were changed: store only "
                f"at slot_mapping.")
    wrong = np.argwhere(_differs(got["stored"], want["stored"]))
    if wrong.size:
        kv, t, h = wrong[0].tolist()
        slot = batch["slot_mapping"][t]
        return (f" First wrong cache entry: the {('key', 'value')[kv]} of row {t} in its slot {slot} (block "
                f"{slot // block_size}, row {slot % block_size}), head {h}, is {_fmt_row(got['stored'][kv, t, h])}, "
                f"expected {_fmt_row(want['stored'][kv, t, h])}.")
    rows = _differs(got["out"], want["out"])
    if not rows.any():
        return ""
    t, h = np.argwhere(rows)[0].tolist()
    s = _row_owner(batch, t)
    return (f" First wrong output: out[{t}, {h}] (sequence {s}, position {batch['positions'][t]}, query head {h}) is "
            f"{_fmt_row(got['out'][t, h])}, expected {_fmt_row(want['out'][t, h])}.")


def _attention_call(args) -> str:
    batch, num_blocks, block_size, hq, hkv, d, seed = args
    n_seqs = len(batch["context_lens"])
    return (f"paged_attention on a {'prefill' if batch['is_prefill'] else 'decode'} batch of {n_seqs} "
            f"sequence(s) (context_lens {SHORT.repr(batch['context_lens'])}, cu_seqlens_q "
            f"{SHORT.repr(batch['cu_seqlens_q'])}, block_size {block_size}), {hq} query / {hkv} KV heads, head_dim "
            f"{d}, q/k/v and the cached prefix from seed {seed}")


# --------------------------------------------------------------------------------------------------------
# the chapter's workloads: what the reference engine schedules


ENGINE = dict(block_size=4, num_blocks=18, max_num_batched_tokens=12, max_num_seqs=4)
HEADS = (4, 2, 8)     # the attention cases' query heads, KV heads and head_dim


def _state(tokens: int, table: list[int], cached: int, scheduled: int, first: int = 100) -> dict:
    return {"token_ids": list(range(first, first + tokens)), "block_table": table, "num_cached_tokens": cached,
            "num_scheduled_tokens": scheduled}


def decode_state(tokens: int, table: list[int], first: int = 100) -> dict:
    """A decoding sequence's state: all but its last token have K/V; the last is computed now."""
    return _state(tokens, table, tokens - 1, 1, first)


def walk_case() -> tuple[list[dict], int]:
    """The chapter's prefill step: A (10 tokens, blocks [7, 3, 5], 4 cached, 6 scheduled) and B (14 tokens,
    blocks [2, 9, 4, 8], none cached, a first chunk of 6), blocks of 4."""
    return [_state(10, [7, 3, 5], 4, 6), _state(14, [2, 9, 4, 8], 0, 6, first=200)], 4


def decode_walk_case() -> tuple[list[dict], int]:
    """The chapter's decode step: A (9 tokens, blocks [2, 6, 1]) and B (8 tokens, blocks [4, 0]), blocks of 4."""
    return [decode_state(9, [2, 6, 1]), decode_state(8, [4, 0], first=200)], 4


@functools.cache
def model() -> Model:
    """The chapter's model: ModelConfig.tiny("llama") with the weights of seed 0."""
    return Model.random(ModelConfig.tiny("llama"), seed=0)


def requests(seed: int) -> list[tuple[int, list[int], llm.SamplingParams]]:
    """The chapter's workload of seed ``seed``: (arrival step, prompt, greedy sampling params) per request."""
    return [(a, prompt, llm.SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
            for a, prompt, n in engine_requests(seed=seed, vocab=model().config.vocab_size)]


@functools.cache
def _recorded(seed: int, cache: str) -> dict:
    engine = llm.LLM(model(), cache=cache, **ENGINE)
    cases: dict[str, list] = {"prefill": [], "decode": []}
    for kind in cases:
        real = getattr(engine.runner, f"prepare_{kind}")

        def record(seqs, block_size, real=real, kind=kind):
            cases[kind].append(([state(s) for s in seqs], block_size))
            return real(seqs, block_size)
        setattr(engine.runner, f"prepare_{kind}", record)
    llm.serve(engine, requests(seed))
    return cases


def recorded_cases(kind: str, seed: int = 0, cache: str = "blocks") -> list[tuple[list[dict], int]]:
    """The (states, block_size) of every ``kind`` ("prefill" or "decode") step the reference engine takes on
    the workload of ``seed``: 18 blocks of 4 slots (preemption), a budget of 12 tokens a step (chunks), a shared
    system prompt (prefix-cache hits); ``cache="radix"`` schedules through the radix cache, one-slot pages."""
    return copy.deepcopy(_recorded(seed, cache)[kind])


def plain_batch(batch: llm.Batch) -> dict:
    """A batch's fields as lists (an attention case's ``batch``)."""
    return {**{f: getattr(batch, f).tolist() for f in FIELDS}, "is_prefill": bool(batch.is_prefill)}


def attention_case(states: list[dict], block_size: int, kind: str, seed: int,
                   heads: tuple[int, int, int] = HEADS) -> tuple:
    """The attention case of one scheduled ``kind`` ("prefill" or "decode") step: the reference's batch of
    ``states``, a cache just big enough for every block id it names (and one more), ``heads`` = (query heads,
    KV heads, head_dim), q/k/v from ``seed``."""
    prepare = {"prefill": llm.prepare_prefill, "decode": llm.prepare_decode}[kind]
    batch = plain_batch(prepare(sequences(states, block_size), block_size))
    num_blocks = max(b for st in states for b in st["block_table"]) + 2
    return (batch, num_blocks, block_size, *heads, seed)


# --------------------------------------------------------------------------------------------------------

_DRIVER = f"{__name__}:drive_"

SPECS = {s.name: s for s in [
    Spec("prepare_prefill", ("states", "block_size"), llm.prepare_prefill, _norm_prepare, _show_batch,
         note=_first_difference, driver=_DRIVER + "prepare", call=_states_call("prepare_prefill")),
    Spec("prepare_decode", ("states", "block_size"), llm.prepare_decode, _norm_prepare, _show_batch,
         note=_first_difference, driver=_DRIVER + "prepare", call=_states_call("prepare_decode")),
    Spec("paged_attention", ("batch", "num_blocks", "block_size", "num_q_heads", "num_kv_heads", "head_dim", "seed"),
         llm.paged_attention, _norm_attention, _show_attention, _same_attention, note=_first_wrong,
         driver=_DRIVER + "attention", call=_attention_call, compact=_compact),
]}


def diagnose(fn, *args, name: str | None = None) -> str:
    """What is wrong with ``fn`` on the case ``args`` in the learner's terms (a visible assert's message), or a
    note that this case is handled correctly. Never raises."""
    return spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, args, name)


def as_float(x, what: str) -> float:
    return common.as_float(x, what, SHORT, finite=True)
