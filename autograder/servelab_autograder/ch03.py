"""Hidden-test helpers for ``ch03_token_budget``.

The learner writes the pieces of a step-time argument and of a budgeted scheduler:

* ``kv_bytes_per_token(model)`` and ``step_time(model, gpu, chunks, decodes, overhead_s)``, compared with
  :mod:`servelab.costmodel` on the published models, their fp8-cache variants and many seeded random
  shapes and batches;
* ``schedule(self, state)``, the budgeted mixed step, run inside :func:`servelab.simulator.simulate` in
  lockstep with :class:`servelab.simulator.MixedBudget`: before every step the state is copied, the
  reference schedules the copy, the learner's method schedules the real state, and the step's batch and
  the whole state afterwards (queues, KV counters, preemptions) must agree;
* ``max_chunk`` and ``max_backlog``, compared with ``costmodel.max_prefill_chunk`` and
  ``costmodel.max_backlog_tokens``;
* the drills, whose expected values are computed here from the reference, never typed in.

Every failure raises ``AssertionError`` explicitly (the checks work under ``python -O``). When the wrong
answer is what a named pitfall produces, the pitfall comes first, on the message's first line (graders
often show only that line); then the input, what the learner's code returned and what was expected.
Everything the learner's code returned is converted to plain ``int`` / ``float`` before it is compared.
:func:`diagnose` returns the message a check would raise for one input, without raising, for visible
asserts.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servelab import costmodel
from servelab.costmodel import H100_SXM, H200, LLAMA2_7B, LLAMA3_8B, LLAMA31_8B, GPUSpec, ModelSpec
from servelab.simulator import MixedBudget, Requests, ServingState, simulate
from servelab_autograder import common

__all__ = [
    "DRILLS",
    "PITFALLS",
    "check_drills",
    "check_kv_bytes_per_token",
    "check_max_backlog",
    "check_max_chunk",
    "check_schedule",
    "check_step_time",
    "diagnose",
]

# Every pitfall the chapter names, in the words of its "Common pitfalls" list. Each known-wrong submission
# in autograder/known_wrong/ch03_token_budget/ produces one of these messages (the first sentence is what
# the known-wrong submissions look for).
PITFALLS = {
    "kv_no_factor_2": "Pitfall: K and V are two tensors. Each token stores a key and a value vector in every "
    "layer: 2 x num_layers x num_kv_heads x head_dim x bytes_per_kv_element.",
    "kv_query_heads": "Pitfall: the cache holds num_kv_heads heads, not num_heads. Under GQA a group of query "
    "heads shares one key head and one value head.",
    "kv_weight_bytes": "Pitfall: the KV element size is bytes_per_kv_element, not bytes_per_param. An fp8 "
    "cache stores 1 byte per element next to 2-byte weights.",
    "kv_one_layer": "Pitfall: every layer keeps its own K and V. Multiply by num_layers.",
    "step_sum": "Pitfall: step time is the max of compute and memory time, not their sum. The roofline "
    "assumes the two overlap: the step is bound by the slower one.",
    "step_weights_per_seq": "Pitfall: the weights are read once per step, whatever the batch. That is what "
    "batching amortises: count model.weight_bytes once, not once per sequence or per token.",
    "step_no_kv_read": "Pitfall: the cached KV is read too. Each decode reads its whole context of KV and each "
    "chunk its prefix, on top of the weights and the KV it writes.",
    "step_no_overhead": "Pitfall: add overhead_s once per step. It is the fixed cost the roofline does not see "
    "(scheduling, kernel launches, sampling).",
    "step_lm_head_per_token": "Pitfall: the LM head runs once per sequence, not once per token. Logits are "
    "computed only at each sequence's last position.",
    "step_attention_pairs": "Pitfall: attention within a chunk is causal. A chunk of c tokens on a prefix of p "
    "has c*p + c*(c+1)/2 (query, key) pairs; a decode over L cached tokens has L + 1.",
    "schedule_prefill_first": "Pitfall: prefill was scheduled before the decodes. Every running sequence "
    "between decodes gets its one token first; prefill chunks fill what is left of the budget.",
    "schedule_overrun": "Pitfall: the step overran the token budget. Decodes and prefill chunks together "
    "must fit in max_num_batched_tokens.",
    "schedule_skip_ahead": "Pitfall: a later request jumped the head of waiting. Admission is first come, first "
    "served: when the head cannot be admitted, nobody behind it is.",
    "schedule_no_reserve": "Pitfall: a decode ran without its KV slot. Reserve one slot for each decoding "
    "sequence (reserved += 1, kv_free -= 1), preempting the tail of running while short.",
    "schedule_admit_after_preempt": "Pitfall: a request was admitted in a step that preempted. After a "
    "preemption admit nobody: the slots freed belong to the sequences still running.",
    "schedule_chunk_stalled": "Pitfall: a part-prefilled running sequence did not get its chunk. Running "
    "sequences still in their prompt take the leftover budget, in running order, before anyone is admitted.",
    "chunk_ignores_decodes": "Pitfall: the chunk bound ignored the decodes' share. The step also carries every "
    "decode (a token of matmuls and a whole context of KV each), so less room is left for the chunk.",
    "chunk_ignores_prefix": "Pitfall: the chunk bound ignored the prefix. A chunk deep in a long prompt attends "
    "to everything before it, so the same chunk costs more there.",
    "chunk_off_by_one": "Pitfall: off by one. Return the largest chunk whose step meets the target, not the "
    "smallest one that misses it.",
    "chunk_is_budget": "Pitfall: that is the token budget (decodes + chunk). Return the chunk alone.",
    "backlog_counts_decodes": "Pitfall: the decodes' tokens are not prefill throughput. The backlog drains at "
    "budget - num_decodes tokens a step.",
    "backlog_in_flight": "Pitfall: a new request first waits for the step in flight. Only floor(ttft_target_s "
    "/ step_s) - 1 whole steps are left to prefill the backlog and its own prompt.",
    "backlog_fluid": "Pitfall: first tokens come at the end of whole steps. Use floor(ttft_target_s / step_s) "
    "steps, not the fraction.",
    "backlog_negative": "Pitfall: no backlog fits when the TTFT target is under two steps. Return 0, not a "
    "negative number.",
}

_short = common.short_repr(12, 120)

_REL = 1e-9          # float answers: the learner may add the terms in another order


# --------------------------------------------------------------------------------------------------------
# plain values out of what the learner returned


_Shape = common.Shape                   # the learner's result does not have the promised shape
_LearnerError = common.LearnerError     # the learner's code raised (message in their terms)


def _as_float(x, what: str) -> float:
    return common.as_float(x, what, _short, finite=True)


def _as_int(x, what: str) -> int:
    return common.as_int(x, what, "tokens", _short)


def _close(a: float, b: float, rel: float = _REL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


_in_learner: list[str] = []      # set while the learner's code runs (calls to the reference are refused then)


def _call(fn, what: str, *args, **kwargs):
    _in_learner.append(what)
    try:
        return fn(*args, **kwargs)
    except _ReferenceCalled:
        raise
    except Exception as e:  # noqa: BLE001 - anything the learner's code raises is reported, not re-raised
        raise common.learner_error(what, e) from None
    finally:
        _in_learner.pop()


def _returned(convert, fn, call: str, *args, **kwargs):
    """What the learner's ``fn(*args, **kwargs)`` returned, converted to a plain value by ``convert``; what it
    raised, or a result of another shape, fails the check with a message that shows ``call``."""
    try:
        return convert(_call(fn, call, *args, **kwargs), "the result")
    except _Shape as e:
        raise AssertionError(f"{call} returned something else: {e}") from None
    except _LearnerError as e:
        raise AssertionError(str(e)) from None


def _fail(msg: str, pitfall: str | None = None):
    raise AssertionError(PITFALLS[pitfall] + "\n" + msg if pitfall else msg)


# --------------------------------------------------------------------------------------------------------
# the learner's code must be the learner's: no calls into the reference that answers the exercise


class _ReferenceCalled(AssertionError):
    pass


_FORBIDDEN = {
    "step_time": common.codes(costmodel.step_time, costmodel.step_cost, costmodel.cost_from_totals,
                              costmodel.StepCost.seconds, module=True),
    "schedule": common.codes(MixedBudget.schedule, MixedBudget._shortest_first, module=True),
    "max_chunk": common.codes(costmodel.max_prefill_chunk, costmodel._largest_fitting, module=True),
    "max_backlog": common.codes(costmodel.max_backlog_tokens, module=True),
}


@contextlib.contextmanager
def _no_reference_calls(key: str):
    """Fail if, while the block runs, any of the reference functions that answer exercise `key` is called
    (directly, through an import, a subclass's super() or a copy of its code object)."""
    forbidden = _FORBIDDEN[key]
    hits: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and _in_learner and frame.f_code in forbidden:
            hits.append(forbidden[frame.f_code])

    with common.profiling(profile):
        yield
    if hits:
        raise _ReferenceCalled(f"your {key} calls {hits[0]}, the reference it is checked against: write "
                               f"{key} without it")


def _reject_reference(fn, key: str) -> None:
    common.reject_reference(fn, key, _FORBIDDEN[key], _short)


# --------------------------------------------------------------------------------------------------------
# exercise 1: KV bytes per token


@dataclass(frozen=True)
class _Shapes:
    """A model's shapes without the derived sizes, so that the learner computes them: reading
    `kv_bytes_per_token` off it raises."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    bytes_per_param: float = 2
    bytes_per_kv_element: float = 2
    tie_word_embeddings: bool = False

    @property
    def kv_bytes_per_token(self):
        raise AttributeError("kv_bytes_per_token is what you are computing: derive it from num_layers, "
                             "num_kv_heads, head_dim and bytes_per_kv_element")

    def spec(self) -> ModelSpec:
        return ModelSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    def describe(self) -> str:
        return (f"{self.name}: num_layers={self.num_layers}, hidden_size={self.hidden_size}, num_heads="
                f"{self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, bytes_per_param="
                f"{self.bytes_per_param:g}, bytes_per_kv_element={self.bytes_per_kv_element:g}")


def _shapes(m: ModelSpec, **changes) -> _Shapes:
    fields = {f.name: getattr(m, f.name) for f in dataclasses.fields(ModelSpec)}
    fields.update(changes)
    return _Shapes(**fields)


def _kv_cases():
    for m in (LLAMA2_7B, LLAMA3_8B, LLAMA31_8B):
        yield _shapes(m)
        yield _shapes(m, name=m.name + " with an fp8 KV cache", bytes_per_kv_element=1)
    rng = random.Random(3031)
    for k in range(120):
        kv = rng.choice([1, 1, 2, 4, 8, 8, 16])
        group = rng.choice([1, 1, 2, 4, 8])
        head_dim = rng.choice([64, 80, 96, 128, 128, 256])
        heads = kv * group
        hidden = heads * head_dim if rng.random() < 0.7 else rng.choice([2048, 3072, 5120, 8192])
        bpp = rng.choice([2, 2, 1, 4])
        bkv = rng.choice([2, 2, 1, 4, 0.5]) if k % 3 else (1 if bpp != 1 else 2)
        yield _Shapes(f"random model {k}", num_layers=rng.randint(1, 96), hidden_size=hidden, num_heads=heads,
                      num_kv_heads=kv, head_dim=head_dim, intermediate_size=4 * hidden, vocab_size=32000,
                      bytes_per_param=bpp, bytes_per_kv_element=bkv)


def _kv_ref(m: _Shapes) -> float:
    return float(m.spec().kv_bytes_per_token)


def _kv_pitfall(m: _Shapes, got: float, want: float) -> str | None:
    def kv(layers=m.num_layers, heads=m.num_kv_heads, head_dim=m.head_dim, elem=m.bytes_per_kv_element, two=2):
        return float(two * layers * heads * head_dim * elem)

    if _close(got, want / 2):
        return "kv_no_factor_2"
    hidden = 2.0 * m.num_layers * m.hidden_size
    if m.num_heads != m.num_kv_heads and any(_close(got, v) for v in (
            kv(heads=m.num_heads), kv(heads=m.num_heads, two=1), hidden * m.bytes_per_kv_element,
            hidden * m.bytes_per_param)):
        return "kv_query_heads"
    if m.bytes_per_param != m.bytes_per_kv_element and any(_close(got, v) for v in (
            kv(elem=m.bytes_per_param), kv(elem=m.bytes_per_param, two=1))):
        return "kv_weight_bytes"
    if m.num_layers > 1 and _close(got, want / m.num_layers):
        return "kv_one_layer"
    return None


def _check_kv_case(fn, m: _Shapes) -> None:
    call = f"kv_bytes_per_token(<{m.describe()}>)"
    got = _returned(_as_float, fn, call, m)
    want = _kv_ref(m)
    if not _close(got, want):
        _fail(f"{call} returned {got:,.6g}; expected {want:,.6g} bytes", _kv_pitfall(m, got, want))


def check_kv_bytes_per_token(fn) -> None:
    """Hidden test of exercise 1: the published models, their fp8-cache variants, 120 random shapes
    (GQA, MQA, hidden_size != num_heads x head_dim, weights and cache in different precisions)."""
    common.reject_reference(fn, "kv_bytes_per_token", {}, _short)   # a function; _Shapes hides the answer
    for m in _kv_cases():
        _check_kv_case(fn, m)


# --------------------------------------------------------------------------------------------------------
# exercise 2: the step time


@dataclass(frozen=True)
class _Step:
    model: ModelSpec
    gpu: GPUSpec
    chunks: tuple[tuple[int, int], ...]
    decodes: tuple[int, ...]
    overhead_s: float

    def call_text(self) -> str:
        return (f"step_time({self.model.name}, {self.gpu.name}, chunks={_short.repr(list(self.chunks))}, "
                f"decodes={_decodes_text(self.decodes)}, overhead_s={self.overhead_s:g})")


def _decodes_text(decodes) -> str:
    if len(decodes) <= 8:
        return str(list(decodes))
    if len(set(decodes)) == 1:
        return f"[{decodes[0]}] * {len(decodes)}"
    return f"<{len(decodes)} contexts, {min(decodes)}..{max(decodes)}, sum {sum(decodes)}>"


def _step_model(s: _Step, *, combine="max", weights="once", kv_read=True, overhead=True, lm_head="seq",
                attention="causal") -> float:
    """The roofline step time, or one of its known mistakes (for naming them)."""
    m = s.model
    chunks, decodes = [c for c, _ in s.chunks], list(s.decodes)
    prefixes = [p for _, p in s.chunks]
    tokens, seqs = sum(chunks) + len(decodes), len(chunks) + len(decodes)
    if attention == "causal":
        pairs = sum(c * p + c * (c + 1) // 2 for c, p in s.chunks) + sum(L + 1 for L in decodes)
    else:  # every chunk token attends to the whole chunk
        pairs = sum(c * (p + c) for c, p in s.chunks) + sum(L + 1 for L in decodes)
    flops = (2.0 * m.matmul_params * tokens
             + 2.0 * m.vocab_size * m.hidden_size * (seqs if lm_head == "seq" else tokens)
             + 4.0 * m.num_layers * m.num_heads * m.head_dim * pairs)
    read = sum(prefixes) + sum(decodes) if kv_read else 0
    weight_bytes = m.weight_bytes * {"once": 1, "seq": seqs, "token": tokens}[weights]
    nbytes = weight_bytes + m.kv_bytes_per_token * (read + tokens)
    compute, memory = flops / s.gpu.peak_flops, nbytes / s.gpu.hbm_bandwidth
    roof = max(compute, memory) if combine == "max" else compute + memory
    return roof + (s.overhead_s if overhead else 0.0)


_STEP_PITFALLS = (
    ("step_sum", dict(combine="sum")),
    ("step_sum", dict(combine="sum", overhead=False)),
    ("step_weights_per_seq", dict(weights="seq")),
    ("step_weights_per_seq", dict(weights="token")),
    ("step_no_kv_read", dict(kv_read=False)),
    ("step_no_overhead", dict(overhead=False)),
    ("step_lm_head_per_token", dict(lm_head="token")),
    ("step_attention_pairs", dict(attention="square")),
)


def _step_cases():
    big = [(LLAMA2_7B, H100_SXM), (LLAMA3_8B, H100_SXM), (LLAMA3_8B, H200), (LLAMA31_8B, H100_SXM)]
    oh = costmodel.DEFAULT_STEP_OVERHEAD_S
    yield _Step(LLAMA2_7B, H100_SXM, (), (0,), oh)                        # batch-1 decode: memory-bound
    yield _Step(LLAMA2_7B, H100_SXM, (), (1000,), oh)
    yield _Step(LLAMA2_7B, H100_SXM, ((4096, 0),), (), oh)                 # a prefill: compute-bound
    yield _Step(LLAMA3_8B, H100_SXM, ((512, 7000),), (1024,) * 32, oh)     # a mixed step
    yield _Step(LLAMA3_8B, H200, ((3, 0), (4, 2)), (5, 7), 0.0)
    yield _Step(LLAMA31_8B, H100_SXM, ((16384, 114688),), (2048,) * 48, oh)
    rng = random.Random(3032)
    for _ in range(150):
        model, gpu = rng.choice(big)
        chunks = tuple((rng.choice([1, rng.randint(1, 64), rng.randint(1, 8192)]),
                        rng.choice([0, 0, rng.randint(1, 40000)])) for _ in range(rng.choice([0, 0, 1, 1, 2, 3])))
        ctx = rng.choice([128, 1024, 4096, 16000])
        decodes = tuple(rng.randint(0, ctx) for _ in range(rng.choice([0, 1, 4, 32, 100, 256])))
        if not chunks and not decodes:
            decodes = (rng.randint(0, 4000),)
        yield _Step(model, gpu, chunks, decodes, rng.choice([0.0, oh, 2e-3, rng.uniform(0, 3e-3)]))


def _step_ref(s: _Step) -> float:
    return costmodel.step_time(s.model, s.gpu, prefill_tokens=[c for c, _ in s.chunks],
                               prefill_context=[p for _, p in s.chunks], decode_context_lens=list(s.decodes),
                               overhead_s=s.overhead_s)


def _step_detail(s: _Step) -> str:
    c = costmodel.step_cost(s.model, s.gpu, prefill_tokens=[c for c, _ in s.chunks],
                            prefill_context=[p for _, p in s.chunks], decode_context_lens=list(s.decodes))
    return (f"  the reference counts {c.flops:.6g} FLOPs ({c.compute_s * 1e3:.4g} ms at peak) and {c.bytes:.6g} "
            f"bytes ({c.memory_s * 1e3:.4g} ms at full bandwidth): {c.bound}-bound, plus {s.overhead_s * 1e3:g} "
            f"ms of overhead")


def _check_step_case(fn, s: _Step) -> None:
    call = s.call_text()
    got = _returned(_as_float, fn, call, s.model, s.gpu, [tuple(c) for c in s.chunks], list(s.decodes),
                    overhead_s=s.overhead_s)
    want = _step_ref(s)
    if _close(got, want):
        return
    pitfall = next((key for key, kw in _STEP_PITFALLS if _close(got, _step_model(s, **kw))), None)
    _fail(f"{call} returned {got * 1e3:.6g} ms; expected {want * 1e3:.6g} ms\n{_step_detail(s)}", pitfall)


def check_step_time(fn) -> None:
    """Hidden test of exercise 2: worked steps (a batch-1 decode, a prefill, mixed steps) and 150 random
    ones on LLaMA-2-7B, Llama-3-8B and Llama-3.1-8B, H100 and H200, with and without overhead."""
    _reject_reference(fn, "step_time")
    for k, s in enumerate(_step_cases()):
        with _no_reference_calls("step_time") if k < 8 else contextlib.nullcontext():
            _check_step_case(fn, s)


# --------------------------------------------------------------------------------------------------------
# exercise 3: the budgeted mixed schedule, in lockstep with MixedBudget


@dataclass(frozen=True)
class _Sched:
    label: str
    arrival_s: tuple[float, ...]
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    budget: int
    max_num_seqs: int
    kv: int

    def describe(self) -> str:
        reqs = ", ".join(f"{i}: at {a * 1e3:g} ms, prompt {p}, output {o}"
                         for i, (a, p, o) in enumerate(zip(self.arrival_s, self.prompt, self.output)))
        return (f"'{self.label}': MixedBudget(max_num_batched_tokens={self.budget}, max_num_seqs="
                f"{self.max_num_seqs}), KV capacity {self.kv} tokens; requests {reqs}")


def _sched_cases(n_random: int = 160) -> list[_Sched]:
    abc = ((0.0, 0.0, 0.0), (6, 5, 3), (4, 4, 4))
    cases = [
        _Sched("the lesson's A/B/C (0, 1, 2), budget 8", *abc, 8, 8, 1000),
        _Sched("the lesson's A/B/C with 20 tokens of KV (a preemption)", *abc, 8, 8, 20),
        # three chats decode when a 40-token prompt arrives: each step is 3 decodes + a 13-token chunk
        _Sched("three decoders and a long prompt", (0.0, 0.0, 0.0, 0.02), (4, 4, 4, 40), (12, 12, 12, 3), 16, 8, 1000),
        # two long prompts: the second waits for the leftover of the first's last chunk
        _Sched("two prompts longer than the budget", (0.0, 0.0), (30, 25), (3, 3), 8, 8, 1000),
        # the head of waiting (30 tokens) does not fit in the KV left; the 2-token request behind it would
        _Sched("the head of waiting does not fit yet", (0.0, 0.01, 0.01), (20, 30, 2), (8, 2, 2), 64, 8, 52),
        # memory runs out while four sequences decode: the tail is preempted, and nobody is admitted then
        _Sched("memory runs out while four decode", (0.0,) * 4 + (0.02,), (5, 5, 5, 5, 3), (8, 8, 8, 8, 2), 32, 8, 28),
        # max_num_seqs 2 caps the running set
        _Sched("the running cap", (0.0,) * 4, (3, 3, 3, 3), (4, 4, 4, 4), 32, 2, 1000),
        # a budget of 1 token: decodes only, one prompt token at a time
        _Sched("a budget of one token", (0.0, 0.0), (3, 2), (2, 2), 1, 4, 1000),
    ]
    rng = random.Random(3033)
    while len(cases) < 8 + n_random:
        n = rng.randint(1, 9)
        prompt = tuple(rng.randint(1, rng.choice([4, 12, 40])) for _ in range(n))
        output = tuple(rng.randint(1, 12) for _ in range(n))
        need = max(p + o - 1 for p, o in zip(prompt, output))
        kv = need + rng.choice([0, rng.randint(0, 20), rng.randint(0, 200), 10_000])
        arrival = tuple(sorted(rng.choice([0.0, rng.uniform(0, 0.06)]) for _ in range(n)))
        cases.append(_Sched(f"random workload {len(cases) - 8}", arrival, prompt, output,
                            rng.choice([1, 2, rng.randint(1, 16), rng.randint(8, 64)]), rng.randint(1, 8), kv))
    return cases


@dataclass
class _SchedSnap:
    running: list[int]
    waiting: list[int]
    kv_free: int
    seqs: dict          # id -> (seq_len, computed, reserved, preemptions, admitted)
    preempted: bool


def _snap(state: ServingState) -> _SchedSnap:
    n = state.seq_len.size
    admitted = ~np.isnan(state.first_scheduled_s)
    return _SchedSnap(
        running=[int(i) for i in np.asarray(state.running).ravel()],
        waiting=[int(i) for i in state.waiting],
        kv_free=int(state.kv_free),
        seqs={i: (int(state.seq_len[i]), int(state.computed[i]), int(state.reserved[i]), int(state.preemptions[i]),
                  bool(admitted[i])) for i in range(n)},
        preempted=bool(state.preempted_this_step))


_ARRAYS = ("seq_len", "computed", "reserved", "preemptions", "first_scheduled_s", "running")


def _copy_state(state: ServingState) -> ServingState:
    """A copy deep enough for one schedule() call: its arrays and queues are new objects."""
    twin = object.__new__(type(state))
    twin.__dict__.update(state.__dict__)
    for name in _ARRAYS:
        setattr(twin, name, np.array(getattr(state, name), copy=True))
    twin.waiting = copy.copy(state.waiting)
    return twin


def _same_state(a: ServingState, b: ServingState) -> bool:
    try:
        running = np.asarray(a.running).ravel()
        return (running.shape == b.running.shape and bool((running == b.running).all())
                and list(a.waiting) == list(b.waiting)
                and a.kv_free == b.kv_free and bool(a.preempted_this_step) == b.preempted_this_step
                and all(bool((getattr(a, f) == getattr(b, f)).all()) for f in _ARRAYS[:4])
                and bool((np.isnan(a.first_scheduled_s) == np.isnan(b.first_scheduled_s)).all()))
    except (TypeError, ValueError, AttributeError):
        return False


def _norm_batch(result) -> dict[int, int]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise _Shape(f"schedule() returned {_short.repr(result)}; it must return a pair (ids, tokens)")
    try:
        ids = [int(i) for i in np.asarray(result[0]).ravel()]
        tokens = [int(t) for t in np.asarray(result[1]).ravel()]
    except (TypeError, ValueError):
        raise _Shape(f"schedule() returned {_short.repr(result)}; ids and tokens must be integers") from None
    if len(ids) != len(tokens):
        raise _Shape(f"schedule() returned {len(ids)} ids but {len(tokens)} token counts")
    batch: dict[int, int] = {}
    for i, t in zip(ids, tokens):
        if i in batch:
            raise _Shape(f"schedule() put request {i} in the step twice")
        batch[i] = t
    return batch


def _batch_text(batch: dict[int, int]) -> str:
    if not batch:
        return "nothing"
    return " ".join(f"{i}:{t}" for i, t in batch.items()) + f" ({sum(batch.values())} tokens)"


def _state_text(s: _SchedSnap) -> str:
    def seq(i):
        seq_len, computed, reserved, _, _ = s.seqs[i]
        kind = "decoding" if reserved < seq_len else f"prefill {computed}/{seq_len}"
        return f"{i} ({kind}, {reserved} KV)"

    waiting = ", ".join(f"{i} ({s.seqs[i][0]} tokens)" for i in s.waiting)
    return f"running [{', '.join(seq(i) for i in s.running)}], waiting [{waiting}], kv_free {s.kv_free}"


def _schedule_pitfall(case: _Sched, pre: _SchedSnap, got: dict, want: dict, mine: _SchedSnap,
                      ref: _SchedSnap) -> str | None:
    if sum(got.values()) > case.budget:
        return "schedule_overrun"
    decoding = [i for i in pre.running if pre.seqs[i][2] < pre.seqs[i][0]]
    kept = [i for i in decoding if i in ref.running]
    prefill_got = any(t > 1 for t in got.values()) or any(i not in pre.running for i in got)
    if prefill_got and any(got.get(i) != 1 for i in kept):
        return "schedule_prefill_first"
    admitted = [i for i in got if i not in pre.running and i in pre.waiting]
    if admitted and ref.preempted:
        return "schedule_admit_after_preempt"
    if admitted and sorted(pre.waiting.index(i) for i in admitted) != list(range(len(admitted))):
        return "schedule_skip_ahead"
    if any(mine.seqs[i][2] != ref.seqs[i][2] for i in kept) and mine.running == ref.running:
        return "schedule_no_reserve"
    part = [i for i in pre.running if pre.seqs[i][2] == pre.seqs[i][0] and pre.seqs[i][0] - pre.seqs[i][1] > 1]
    if any(want.get(i, 0) > 1 and got.get(i, 0) < want[i] for i in part):
        return "schedule_chunk_stalled"
    return None


class _Lockstep:
    """A policy for simulate(): the learner's schedule on the real state, the reference's on a copy."""

    def __init__(self, fn, case: _Sched):
        self.mine = type("YourMixedBudget", (MixedBudget,), {"schedule": fn})(case.budget, case.max_num_seqs)
        self.ref = MixedBudget(case.budget, case.max_num_seqs)
        self.case = case
        self.name = "lockstep"
        self.step = 0

    def schedule(self, state):
        before = _copy_state(state)
        twin = _copy_state(state)
        want_ids, want_tokens = self.ref.schedule(twin)
        want = dict(zip(want_ids.tolist(), want_tokens.tolist()))
        try:
            got = _norm_batch(_call(self.mine.schedule, "schedule()", state))
        except (_Shape, _LearnerError) as e:
            raise AssertionError(f"{e}\n  at step {self.step} of the scenario {self.case.describe()}\n"
                                 f"  before the step: {_state_text(_snap(before))}") from None
        if got != want or not _same_state(state, twin):
            where = f"step {self.step} of the scenario {self.case.describe()}"
            pre, mine, ref = _snap(before), _snap(state), _snap(twin)
            lines = [f"At {where}:", f"  before the step: {_state_text(pre)}",
                     f"  you scheduled:      {_batch_text(got)}", f"  MixedBudget scheduled: {_batch_text(want)}"]
            if got == want:
                lines.append("  the batch is right but the state afterwards differs:")
            lines += [f"  your state after:      {_state_text(mine)}"
                      f"{', preempted this step' if mine.preempted else ''}",
                      f"  reference state after: {_state_text(ref)}{', preempted this step' if ref.preempted else ''}"]
            for i in sorted(set(mine.seqs)):
                if mine.seqs[i] != ref.seqs[i]:
                    fields = ("seq_len", "computed", "reserved", "preemptions", "admitted")
                    diffs = [f"{f} {a} (reference {b})" for f, a, b in zip(fields, mine.seqs[i], ref.seqs[i]) if a != b]
                    lines.append(f"  request {i}: {', '.join(diffs)}")
            _fail("\n".join(lines), _schedule_pitfall(self.case, pre, got, want, mine, ref))
        self.step += 1
        return want_ids, want_tokens


def _run_lockstep(fn, case: _Sched) -> None:
    reqs = Requests(np.array(case.arrival_s), np.array(case.prompt), np.array(case.output))
    simulate(reqs, _Lockstep(fn, case), LLAMA3_8B, H100_SXM, kv_capacity_tokens=case.kv)


def check_schedule(fn) -> None:
    """Hidden test of exercise 3: the learner's schedule inside the simulator, step by step against
    MixedBudget.schedule, on the lesson's A/B/C, a scenario per pitfall and 160 seeded random workloads
    (tight KV with preemptions, budgets from 1 token, running caps, staggered arrivals)."""
    _reject_reference(fn, "schedule")
    for k, case in enumerate(_sched_cases()):
        with _no_reference_calls("schedule") if k < 8 or k % 20 == 0 else contextlib.nullcontext():
            _run_lockstep(fn, case)


# --------------------------------------------------------------------------------------------------------
# exercise 4: the largest chunk under a TPOT target


@dataclass(frozen=True)
class _Chunk:
    model: ModelSpec
    gpu: GPUSpec
    target_s: float
    decodes: tuple[int, ...]
    prefix: int
    overhead_s: float

    def call_text(self) -> str:
        return (f"max_chunk({self.model.name}, {self.gpu.name}, tpot_target_s={self.target_s:.6g}, decodes="
                f"{_decodes_text(self.decodes)}, prefix={self.prefix}, overhead_s={self.overhead_s:g})")


def _chunk_ref(c: _Chunk, decodes=None, prefix=None) -> int:
    return costmodel.max_prefill_chunk(c.model, c.gpu, c.target_s, list(c.decodes if decodes is None else decodes),
                                       c.prefix if prefix is None else prefix, c.overhead_s)


def _chunk_cases():
    oh = costmodel.DEFAULT_STEP_OVERHEAD_S
    yield _Chunk(LLAMA3_8B, H100_SXM, 0.030, (1024,) * 32, 0, oh)
    yield _Chunk(LLAMA3_8B, H100_SXM, 0.030, (1024,) * 32, 30_000, oh)
    yield _Chunk(LLAMA3_8B, H100_SXM, 0.025, (2048,) * 64, 8000, oh)
    yield _Chunk(LLAMA2_7B, H100_SXM, 0.010, (2048,) * 16, 0, oh)
    yield _Chunk(LLAMA2_7B, H100_SXM, 0.004, (), 0, oh)                  # even 1 token misses: 0
    yield _Chunk(LLAMA2_7B, H100_SXM, 0.012, (2048,) * 32, 0, oh)        # the decodes alone miss: 0
    rng = random.Random(3034)
    models = [(LLAMA2_7B, H100_SXM), (LLAMA3_8B, H100_SXM), (LLAMA3_8B, H200), (LLAMA31_8B, H100_SXM)]
    for _ in range(70):
        model, gpu = rng.choice(models)
        ctx = rng.choice([256, 2048, 8000])
        decodes = tuple(rng.randint(1, ctx) for _ in range(rng.choice([0, 1, 8, 32, 64, 128])))
        yield _Chunk(model, gpu, rng.choice([rng.uniform(0.004, 0.05), rng.uniform(0.05, 0.4)]), decodes,
                     rng.choice([0, 0, rng.randint(1, 60_000)]), rng.choice([0.0, oh, 1e-3]))


def _check_chunk_case(fn, c: _Chunk) -> None:
    call = c.call_text()
    got = _returned(_as_int, fn, call, c.model, c.gpu, c.target_s, list(c.decodes), prefix=c.prefix,
                    overhead_s=c.overhead_s)
    want = _chunk_ref(c)
    if got == want:
        return
    pitfall = None
    if c.decodes and got == _chunk_ref(c, decodes=()):
        pitfall = "chunk_ignores_decodes"
    elif c.prefix and got == _chunk_ref(c, prefix=0):
        pitfall = "chunk_ignores_prefix"
    elif got == want + 1:
        pitfall = "chunk_off_by_one"
    elif c.decodes and want and got == want + len(c.decodes):
        pitfall = "chunk_is_budget"
    detail = ""
    if want:
        t_want = costmodel.step_time(c.model, c.gpu, want, list(c.decodes), c.prefix, c.overhead_s)
        t_next = costmodel.step_time(c.model, c.gpu, want + 1, list(c.decodes), c.prefix, c.overhead_s)
        detail = (f"\n  with a chunk of {want} the step takes {t_want * 1e3:.6g} ms, with {want + 1} it takes "
                  f"{t_next * 1e3:.6g} ms (target {c.target_s * 1e3:.6g} ms)")
    if got > 0 and got != want:
        try:
            t_got = costmodel.step_time(c.model, c.gpu, got, list(c.decodes), c.prefix, c.overhead_s)
            detail += f"; with your {got} it takes {t_got * 1e3:.6g} ms"
        except ValueError:
            pass
    _fail(f"{call} returned {got}; expected {want}{detail}", pitfall)


def check_max_chunk(fn) -> None:
    """Hidden test of exercise 4: the worked cases and 70 random ones (decode batches of 0-128 over
    contexts up to 8000, prefixes up to 60,000, targets from 4 ms to 400 ms)."""
    _reject_reference(fn, "max_chunk")
    for k, c in enumerate(_chunk_cases()):
        with _no_reference_calls("max_chunk") if k < 6 else contextlib.nullcontext():
            _check_chunk_case(fn, c)


# --------------------------------------------------------------------------------------------------------
# exercise 5: the admission rule


def _backlog_cases():
    yield 2048, 48, 0.030, 1.0            # the docstring: 2000 x (33 - 1)
    yield 1767, 128, 0.02998667, 1.0
    yield 8192, 0, 0.1, 0.55              # 5 steps end by the target, 4 after the one in flight
    yield 512, 500, 0.01, 2.005
    yield 2048, 2048, 0.03, 1.0           # decodes fill the budget: nothing drains
    yield 2048, 48, 0.030, 0.045          # under two steps: 0
    yield 2048, 48, 0.030, 0.0155         # under one step: 0
    rng = random.Random(3035)
    while True:
        budget = rng.choice([rng.randint(1, 64), rng.randint(64, 16384)])
        decodes = rng.randint(0, budget)
        step = rng.uniform(0.002, 0.4)
        ttft = rng.uniform(0.01, 30.0)
        frac = (ttft / step) % 1
        if 0.02 < frac < 0.98:            # keep clear of exact multiples: floor() there depends on rounding
            yield budget, decodes, step, ttft
        if rng.random() < 0.006:
            return


def _backlog_ref(budget, decodes, step, ttft) -> int:
    return costmodel.max_backlog_tokens(budget, decodes, step, ttft)


def _backlog_pitfall(args, got: float) -> str | None:
    budget, decodes, step, ttft = args
    chunk, ratio = budget - decodes, ttft / step
    steps = math.floor(ratio * (1 + 1e-12))
    if got < 0:
        return "backlog_negative"
    if decodes and steps > 1 and _close(got, budget * (steps - 1)):
        return "backlog_counts_decodes"
    if chunk and _close(got, chunk * steps):
        return "backlog_in_flight"
    if chunk and any(_close(got, v) for v in (chunk * (ratio - 1), chunk * ratio, math.floor(chunk * (ratio - 1)),
                                              math.floor(chunk * ratio))):
        return "backlog_fluid"
    if decodes and _close(got, budget * steps):
        return "backlog_counts_decodes"
    return None


def _check_backlog_case(fn, args) -> None:
    budget, decodes, step, ttft = args
    call = f"max_backlog(budget={budget}, num_decodes={decodes}, step_s={step:.8g}, ttft_target_s={ttft:.8g})"
    raw = _call(fn, call, *args)
    want = _backlog_ref(*args)
    try:
        got = _as_float(raw, "the result")
    except _Shape as e:
        raise AssertionError(f"{call} returned something else: {e}") from None
    if _close(got, want) and float(got).is_integer():
        return
    msg = f"{call} returned {_short.repr(raw)}; expected {want} tokens"
    steps = math.floor(ttft / step * (1 + 1e-12))
    msg += (f"\n  {steps} steps of {step * 1e3:.6g} ms end within {ttft:g} s, one of them is the step in flight, "
            f"and each drains {budget - decodes} prompt tokens")
    _fail(msg, _backlog_pitfall(args, got))


def check_max_backlog(fn) -> None:
    """Hidden test of exercise 5: the worked cases (including targets under one and two steps, and decodes
    that fill the budget) and random ones kept clear of exact step multiples."""
    _reject_reference(fn, "max_backlog")
    with _no_reference_calls("max_backlog"):
        for args in _backlog_cases():
            try:
                _check_backlog_case(fn, args)
            except _LearnerError as e:
                raise AssertionError(str(e)) from None


# --------------------------------------------------------------------------------------------------------
# the drills of "Say it in the interview": every expected value comes from the reference

# Q1 "Doubling the batch...": LLaMA-2-7B on one H100 SXM, every sequence at 2048 tokens of context
Q1_MODEL, Q1_GPU, Q1_CONTEXT, Q1_TPOT_S = LLAMA2_7B, H100_SXM, 2048, 0.012
# Q2 "One 32K-token prompt in front of ten short ones...": Llama-3.1-8B, FCFS, 2048-token budget
Q2_MODEL, Q2_GPU, Q2_BUDGET, Q2_LONG, Q2_SHORT, Q2_NUM_SHORT = LLAMA31_8B, H100_SXM, 2048, 32768, 256, 10
# Q3 "Chunked prefill keeps the decoders running...": a 128K prompt under a 16,384-token budget
Q3_MODEL, Q3_GPU, Q3_BUDGET, Q3_LONG, Q3_DECODERS, Q3_CONTEXT = LLAMA31_8B, H100_SXM, 16384, 131072, 64, 2048
# Q4 "The two targets are coupled...": Llama-3-8B, TPOT 30 ms, TTFT 1 s, 128 decoders at 2048, prompts up to 8000
Q4_MODEL, Q4_GPU, Q4_TPOT_S, Q4_TTFT_S, Q4_DECODERS, Q4_CONTEXT, Q4_PREFIX = (
    LLAMA3_8B, H100_SXM, 0.030, 1.0, 128, 2048, 8000)


def _chunked_prefill_s(model, gpu, prompt: int, chunk: int) -> float:
    """Time to prefill `prompt` tokens in chunks of `chunk`, one chunk a step, nothing else in the steps."""
    return sum(costmodel.step_time(model, gpu, prefill_tokens=min(chunk, prompt - p), prefill_context=p)
               for p in range(0, prompt, chunk))


def q1_best_batch() -> int:
    return costmodel.max_decode_batch(Q1_MODEL, Q1_GPU, Q1_TPOT_S, Q1_CONTEXT)


def q2_short_ttft_s() -> float:
    return (_chunked_prefill_s(Q2_MODEL, Q2_GPU, Q2_LONG, Q2_BUDGET)
            + costmodel.step_time(Q2_MODEL, Q2_GPU, prefill_tokens=Q2_BUDGET))


def q3_worst_gap_s() -> float:
    return costmodel.step_time(Q3_MODEL, Q3_GPU, prefill_tokens=Q3_BUDGET, prefill_context=Q3_LONG - Q3_BUDGET,
                               decode_context_lens=[Q3_CONTEXT] * Q3_DECODERS)


def q3_lockout_s() -> float:
    return _chunked_prefill_s(Q3_MODEL, Q3_GPU, Q3_LONG, Q3_BUDGET)


def q4_plan() -> dict:
    """The coupled plan: the chunk the TPOT target allows, the budget, the step time, the backlog limit."""
    decodes = [Q4_CONTEXT] * Q4_DECODERS
    chunk = costmodel.max_prefill_chunk(Q4_MODEL, Q4_GPU, Q4_TPOT_S, decodes, Q4_PREFIX)
    step = costmodel.step_time(Q4_MODEL, Q4_GPU, prefill_tokens=chunk, prefill_context=Q4_PREFIX,
                               decode_context_lens=decodes)
    budget = Q4_DECODERS + chunk
    return {"chunk": chunk, "budget": budget, "step_s": step,
            "limit": costmodel.max_backlog_tokens(budget, Q4_DECODERS, step, Q4_TTFT_S)}


def q4_limit() -> int:
    return q4_plan()["limit"]


# name -> (question, expected value from the reference, relative tolerance, hints: [(wrong value, pitfall or text)])
DRILLS = {
    "drill_1": ("largest decode batch of LLaMA-2-7B on one H100 (2048 tokens of context each, 0.5 ms overhead) "
                "that meets a 12 ms TPOT target", q1_best_batch, 0.0),
    "drill_2": ("TTFT (s) each of the ten 256-token requests gets behind one 32,768-token prompt, FCFS, "
                "2048-token budget, Llama-3.1-8B on one H100", q2_short_ttft_s, 0.05),
    "drill_3": ("longest inter-token gap (s) the 64 decoders see while a 131,072-token prompt is prefilled in "
                "16,384-token steps", q3_worst_gap_s, 0.03),
    "drill_4": ("time (s) new arrivals are locked out while that prompt is prefilled", q3_lockout_s, 0.05),
    "drill_5": ("admission limit (prompt tokens queued ahead plus the request's own) for a 30 ms TPOT and a 1 s "
                "TTFT target with 128 decoders", q4_limit, 0.02),
}


def _drill_hint(name: str, got: float) -> str | None:
    """A pitfall (first line) or a hint for a known wrong answer, else None."""
    near = lambda a, b, rel=0.02: math.isclose(a, b, rel_tol=rel)
    if name == "drill_1":
        weights_only = costmodel.max_decode_batch(Q1_MODEL, Q1_GPU, Q1_TPOT_S, 0)
        if near(got, weights_only, 0.05):
            return PITFALLS["step_no_kv_read"]
        if got in (16, 32):
            return "Find the batch where the step time reaches the target: the largest B with step_time(B) <= 12 ms."
    if name == "drill_2" and got < 0.2:
        return ("FCFS: the short requests wait behind every chunk of the long prompt, then take one more step "
                "for their own prompts.")
    if name == "drill_3":
        no_prefix = costmodel.step_time(Q3_MODEL, Q3_GPU, prefill_tokens=Q3_BUDGET,
                                        decode_context_lens=[Q3_CONTEXT] * Q3_DECODERS)
        if near(got, no_prefix, 0.05):
            return PITFALLS["chunk_ignores_prefix"]
    if name == "drill_4":
        first = costmodel.step_time(Q3_MODEL, Q3_GPU, prefill_tokens=Q3_BUDGET)
        if near(got, first * (Q3_LONG // Q3_BUDGET), 0.05):
            return PITFALLS["chunk_ignores_prefix"]
    if name == "drill_5":
        plan = q4_plan()
        steps = math.floor(Q4_TTFT_S / plan["step_s"])
        if near(got, plan["budget"] * (steps - 1), 0.005):
            return PITFALLS["backlog_counts_decodes"]
        if near(got, plan["chunk"] * steps, 0.005):
            return PITFALLS["backlog_in_flight"]
        no_decodes = costmodel.max_prefill_chunk(Q4_MODEL, Q4_GPU, Q4_TPOT_S, [], Q4_PREFIX)
        if near(got, no_decodes * (steps - 1), 0.01):
            return PITFALLS["chunk_ignores_decodes"]
    return None


def check_drills(answers) -> None:
    """Hidden test of the drills. ``answers``: a mapping with drill_1..drill_5 (e.g. ``globals()``) or a
    sequence of the five values in order."""
    for name, (question, expected, rel), answer in common.drill_answers(answers, DRILLS):
        try:
            got = _as_float(answer, name)
        except _Shape as e:
            raise AssertionError(f"{e} ({question})") from None
        want = float(expected())
        if not math.isclose(got, want, rel_tol=rel, abs_tol=0.0):
            tol = f"within {rel:.0%}" if rel else "exactly"
            msg = f"{name} = {got:.6g}, but the {question} is {want:.4g} ({tol})."
            hint = _drill_hint(name, got)
            raise AssertionError(f"{hint}\n{msg}" if hint else msg)


# --------------------------------------------------------------------------------------------------------
# messages for visible asserts

_CASE_CHECKS: dict[str, Callable] = {
    "kv_bytes_per_token": lambda fn, model: _check_kv_case(fn, _shapes(model)),
    "step_time": lambda fn, model, gpu, chunks=(), decodes=(), overhead_s=costmodel.DEFAULT_STEP_OVERHEAD_S:
        _check_step_case(fn, _Step(model, gpu, tuple(tuple(c) for c in chunks), tuple(decodes), overhead_s)),
    "max_chunk": lambda fn, model, gpu, target, decodes=(), prefix=0, overhead_s=costmodel.DEFAULT_STEP_OVERHEAD_S:
        _check_chunk_case(fn, _Chunk(model, gpu, target, tuple(decodes), prefix, overhead_s)),
    "max_backlog": lambda fn, *args: _check_backlog_case(fn, args),
}
_CHECKS: dict[str, Callable] = {
    "kv_bytes_per_token": check_kv_bytes_per_token,
    "step_time": check_step_time,
    "schedule": check_schedule,
    "max_chunk": check_max_chunk,
    "max_backlog": check_max_backlog,
}


def diagnose(exercise: str, fn, *args, **kwargs) -> str:
    """What the hidden check of `exercise` says about the learner's `fn`, without raising: first on the
    given input (for `schedule`, which takes none: on the check's scenarios), then, if that input is
    handled right, on all of the check's cases. Meant as a visible assert's message."""
    if exercise not in _CHECKS:
        return f"no check named {exercise!r}"
    attempts = []
    if exercise in _CASE_CHECKS and (args or kwargs):
        attempts.append(lambda: _CASE_CHECKS[exercise](fn, *args, **kwargs))
    attempts.append(lambda: _CHECKS[exercise](fn))
    for attempt in attempts:
        try:
            attempt()
        except (AssertionError, _LearnerError) as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - the message is the point
            return f"{exercise} raised {type(e).__name__}: {e}"
    return (f"{exercise} agrees with the reference on every case of the checks, but not on this assert's: compare "
            "your code with the rule the assert states")
