"""Chapter 03's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

:data:`SPECS` holds each exercise's parameters, its reference in :mod:`servelab.analytic.costmodel` or
:mod:`servelab.simulator`, how its result is read (converted to plain ``int`` / ``float`` / ``list``, never compared
as the learner built it) and shown. Arguments cross to the learner's kernel as plain data (:func:`case`): a model or
a GPU as the dict of its fields, the simulator's state before one step as the dict of its queues and counters. A
driver (``drive_*``) rebuilds the objects there, calls the function once and hands back what it returned (for
``schedule``, with the state as the call left it); the reference goes through the same driver on the grader's side.

:func:`diagnose` is a visible assert's message: the input, what came back, what was expected, and the pitfall's
name on the first line when the chapter's atlas knows what that mistake returns on this input. The hidden cases
and the verdicts are the grader's (``servelab_autograder.judge.checks.ch03``), outside the learner's kernel.
"""

from __future__ import annotations

import functools
import math
import types
from collections import deque
from dataclasses import dataclass

import numpy as np

from servelab.analytic import costmodel
from servelab.analytic.costmodel import H100_SXM, LLAMA3_8B, GPUSpec, ModelSpec
from servelab.schedulers import vllm_scheduler
from servelab.simulator import MixedBudget, Requests, ServingState, simulate
from servelab_autograder.exercises import ch03_order, ch03_v1, common, spec
from servelab_autograder.exercises.ch03_drills import DRILLS, drill_numbers  # noqa: F401 - the notebook's names
from servelab_autograder.exercises.ch03_v1 import V1_CASES, v1_workload  # noqa: F401 - the notebook's _grade.V1_CASES
from servelab_autograder.exercises.common import some
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch03_token_budget"
OVERHEAD_S = costmodel.DEFAULT_STEP_OVERHEAD_S
_short = common.short_repr(12, 120)


# ------------------------------------------------------------------------------------------------
# plain data for the objects the exercises take, and back


class Shapes(types.SimpleNamespace):
    """A model's fields without its derived sizes: what ``kv_bytes_per_token`` is handed, so that it computes the
    answer (``ModelSpec.kv_bytes_per_token`` stays in the library, which prices every step with it)."""

    @property
    def kv_bytes_per_token(self):
        raise AttributeError("kv_bytes_per_token is what you are computing: derive it from num_layers, "
                             "num_kv_heads, head_dim and bytes_per_kv_element")


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).ravel()]


_COUNTERS = ("seq_len", "computed", "reserved", "preemptions")


def state_fields(state: ServingState, scenario: str = "") -> dict:
    """The simulator's state before a step as plain data (``scenario``: where it comes from, for messages)."""
    return {"scenario": scenario, "prompt_len": _ints(state.prompt_len), "output_len": _ints(state.output_len),
            **{name: _ints(getattr(state, name)) for name in _COUNTERS},
            "admitted": [bool(a) for a in ~np.isnan(state.first_scheduled_s)], "kv_capacity": int(state.kv_capacity),
            "kv_free": int(state.kv_free), "waiting": _ints(list(state.waiting)), "running": _ints(state.running),
            "preempted_this_step": bool(state.preempted_this_step)}


def serving_state(s: dict) -> ServingState:
    """A fresh ServingState from :func:`state_fields` data."""
    state = ServingState(np.array(s["prompt_len"]), np.array(s["output_len"]), int(s["kv_capacity"]))
    for name in _COUNTERS:
        setattr(state, name, np.array(s[name], dtype=np.int64))
    state.first_scheduled_s = np.where(np.array(s["admitted"], dtype=bool), 0.0, np.nan)
    state.kv_free, state.waiting = int(s["kv_free"]), deque(s["waiting"])
    state.running = np.array(s["running"], dtype=np.int64)
    state.preempted_this_step = bool(s["preempted_this_step"])
    return state


# ------------------------------------------------------------------------------------------------
# the drivers (kernel side): each builds its own objects, lists copied too, so no call changes the grader's data


def drive_kv_bytes_per_token(fn, model):
    return fn(Shapes(**model))


def drive_step_time(fn, model, gpu, chunks, decodes, overhead_s):
    return fn(ModelSpec(**model), GPUSpec(**gpu), [tuple(c) for c in chunks], list(decodes), overhead_s=overhead_s)


def drive_max_chunk(fn, model, gpu, tpot_target_s, decodes, prefix, overhead_s):
    return fn(ModelSpec(**model), GPUSpec(**gpu), tpot_target_s, list(decodes), overhead_s=overhead_s,
              **spec.passed(prefix=prefix))


def drive_schedule(fn, policy, state):
    """One step of ``fn`` as the ``schedule`` of a MixedBudget with the given limits: its (ids, tokens) and what it
    left in the state, raw (the grader reads them)."""
    st = serving_state(state)
    step = type("YourMixedBudget", (MixedBudget,), {"schedule": fn})(**policy).schedule(st)
    return step, {**{name: getattr(st, name) for name in ("running", "kv_free", "preempted_this_step", *_COUNTERS)},
                  "waiting": list(st.waiting), "admitted": ~np.isnan(np.asarray(st.first_scheduled_s, dtype=float))}


# the references, called as the exercises are
def _kv_reference(model) -> float:
    return ModelSpec(**vars(model)).kv_bytes_per_token


def _step_reference(model, gpu, chunks, decodes, overhead_s) -> float:
    return costmodel.step_time(model, gpu, [c for c, _ in chunks], decodes, [p for _, p in chunks], overhead_s)


def _chunk_reference(model, gpu, tpot_target_s, decodes, prefix=0, overhead_s=OVERHEAD_S) -> int:
    # prefix=0: the contract's default, which a case may leave out (spec.DEFAULT) to grade the learner's own
    return costmodel.max_prefill_chunk(model, gpu, tpot_target_s, decodes, prefix, overhead_s)


# ------------------------------------------------------------------------------------------------
# reading what came back


def _number(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _tokens(raw, args) -> int:
    return common.as_int(raw, "the result", "tokens", _short, strict=True)


def _backlog(raw, args) -> int | float:
    x = _number(raw, args)
    if not x.is_integer():
        return x           # a wrong number (a fraction of a step counted), graded and diagnosed as one
    return common.as_int(raw, "the result", "tokens", _short, strict=True)   # the contract returns an int


def _int_list(x, what: str) -> list[int]:
    if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
        return [int(v) for v in x.ravel()]
    if not isinstance(x, list | tuple):
        raise Shape(f"{what} is {_short.repr(x)}; expected a list or an int array")
    return [common.as_int(v, f"{what}[{i}]", "tokens", _short) for i, v in enumerate(x)]


def _norm_schedule(raw, args) -> tuple[tuple, dict]:
    """((id, tokens) pairs by id, the state after as plain lists): the batch is a set of pairs (the order is free),
    the state is compared whole."""
    step, after = raw
    if not isinstance(step, tuple | list) or len(step) != 2:
        raise Shape(f"schedule() returned {_short.repr(step)}; it must return a pair (ids, tokens)")
    ids, tokens = _int_list(step[0], "ids"), _int_list(step[1], "tokens")
    if len(ids) != len(tokens):
        raise Shape(f"schedule() returned {len(ids)} ids but {len(tokens)} token counts")
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise Shape(f"schedule() put request {twice} in the step twice")
    state = {name: _int_list(after[name], f"state.{name}") for name in ("running", "waiting", *_COUNTERS)}
    state["kv_free"] = common.as_int(after["kv_free"], "state.kv_free", "KV slots", _short)
    if not isinstance(after["admitted"], np.ndarray):
        raise Shape("state.first_scheduled_s is no longer an array of times")
    state["admitted"] = [bool(a) for a in after["admitted"]]
    if not isinstance(after["preempted_this_step"], bool | np.bool_):
        raise Shape(f"state.preempted_this_step is {_short.repr(after['preempted_this_step'])}; expected a bool")
    state["preempted_this_step"] = bool(after["preempted_this_step"])
    return tuple(sorted(zip(ids, tokens))), state


# ------------------------------------------------------------------------------------------------
# showing it, and what a wrong answer is measured against


def _name(obj: dict) -> str:
    return str(obj.get("name", "?"))


def _shapes_text(m: dict) -> str:
    keys = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "bytes_per_param",
            "bytes_per_kv_element")
    return f"<{m.get('name')}: {', '.join(f'{k}={m.get(k)}' for k in keys)}>"


def _decodes_text(decodes) -> str:
    if len(decodes) <= 8:
        return str(list(decodes))
    if len(set(decodes)) == 1:
        return f"[{decodes[0]}] * {len(decodes)}"
    return f"<{len(decodes)} contexts, {min(decodes)}..{max(decodes)}, sum {sum(decodes)}>"


def _ms(t: float) -> str:
    return f"{t * 1e3:.6g} ms"


def _state_text(s: dict) -> str:
    def seq(i):
        kind = "decoding" if s["reserved"][i] < s["seq_len"][i] else f"prefill {s['computed'][i]}/{s['seq_len'][i]}"
        return f"{i} ({kind}, {s['reserved'][i]} KV)"

    waiting = some(f"{i} ({s['seq_len'][i] - s['computed'][i]} tokens)" for i in s["waiting"])
    return f"running [{some(seq(i) for i in s['running'])}], waiting [{waiting}], kv_free {s['kv_free']}"


def _show_schedule(result) -> str:
    batch, s = result
    step = some((f"{i}:{t}" for i, t in batch), " ") + f" ({sum(t for _, t in batch)} tokens)" if batch else "nothing"
    return (f"{step}, leaving running [{some(s['running'])}], waiting [{some(s['waiting'])}], kv_free {s['kv_free']}"
            + (", preempted this step" if s["preempted_this_step"] else ""))


def _schedule_call(args) -> str:
    policy, state = args
    return (f"schedule() at {state['scenario'] or 'a step'} (max_num_batched_tokens={policy['max_num_batched_tokens']}"
            f", max_num_seqs={policy['max_num_seqs']}; before the step: {_state_text(state)})")


def _schedule_note(args, got, want) -> str:
    (_, mine), (_, ref) = got, want
    lines = ["the batch is right but the state afterwards differs"] if got[0] == want[0] else []
    shown = {k: f"[{some(v)}]" if isinstance(v, list) else v for k, v in mine.items()}
    lines += [f"state.{k}: yours {shown[k]}, the reference's "
              f"{f'[{some(ref[k])}]' if isinstance(ref[k], list) else ref[k]}"
              for k in ("running", "waiting", "kv_free", "preempted_this_step") if mine[k] != ref[k]]
    requests = []
    for i in range(len(ref["seq_len"])):
        diffs = [f"{k} {mine[k][i]} (reference {ref[k][i]})" for k in (*_COUNTERS, "admitted")
                 if i < len(mine[k]) and mine[k][i] != ref[k][i]]
        requests += [f"request {i}: {', '.join(diffs)}"] if diffs else []
    lines += requests[:8] + ([f"... and {len(requests) - 8} more requests differ"] if len(requests) > 8 else [])
    return "".join(f"\n  {line}" for line in lines)


def _step_note(args, got, want) -> str:
    model, gpu, chunks, decodes, overhead_s = args
    c = costmodel.step_cost(ModelSpec(**model), GPUSpec(**gpu), [n for n, _ in chunks], decodes, [p for _, p in chunks])
    return (f"\n  the reference counts {c.flops:.6g} FLOPs ({_ms(c.compute_s)} at peak) and {c.bytes:.6g} bytes "
            f"({_ms(c.memory_s)} at full bandwidth): {c.bound}-bound, plus {_ms(overhead_s)} of overhead")


def _chunk_note(args, got, want) -> str:
    model, gpu, target, decodes, prefix, overhead_s = args
    prefix = 0 if prefix == spec.DEFAULT else prefix

    def took(c):
        return _ms(costmodel.step_time(ModelSpec(**model), GPUSpec(**gpu), c, decodes, prefix, overhead_s))

    note = f"\n  with a chunk of {want} the step takes {took(want)}, with {want + 1} it takes {took(want + 1)} " \
           f"(target {_ms(target)})" if want else ""
    return note + (f"; with your {got} it takes {took(got)}" if got > 0 else "")


def _backlog_note(args, got, want) -> str:
    budget, decodes, step_s, ttft = args
    steps = math.floor(ttft / step_s * (1 + 1e-12))
    return (f"\n  {steps} steps of {_ms(step_s)} end within {ttft:g} s, one of them is the step in flight, and each "
            f"drains {budget - decodes} prompt tokens")


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)   # the learner may add the terms in another order


_SPEC_ARGS = {"model": _name, "gpu": _name, "decodes": _decodes_text, "overhead_s": _ms}
SPECS = {s.name: s for s in [
    Spec("kv_bytes_per_token", ("model",), _kv_reference, _number, lambda b: f"{b:,.6g} bytes", _close,
         {"model": _shapes_text}, driver=f"{__name__}:drive_kv_bytes_per_token"),
    Spec("step_time", ("model", "gpu", "chunks", "decodes", "overhead_s"), _step_reference, _number, _ms, _close,
         _SPEC_ARGS, note=_step_note, driver=f"{__name__}:drive_step_time"),
    Spec("schedule", ("self", "state"), MixedBudget.schedule, _norm_schedule, _show_schedule, note=_schedule_note,
         driver=f"{__name__}:drive_schedule", call=_schedule_call),
    Spec("max_chunk", ("model", "gpu", "tpot_target_s", "decodes", "prefix", "overhead_s"), _chunk_reference,
         _tokens, lambda c: f"{c} tokens", show_args=_SPEC_ARGS, note=_chunk_note,
         driver=f"{__name__}:drive_max_chunk"),
    Spec("max_backlog", ("budget", "num_decodes", "step_s", "ttft_target_s"), costmodel.max_backlog_tokens, _backlog,
         lambda x: f"{x if isinstance(x, int) else f'{x:.10g}'} tokens", note=_backlog_note),
    Spec("v1_schedule", ("config", "workload"), vllm_scheduler.Scheduler.schedule, ch03_v1.norm_v1, ch03_v1.show_v1,
         note=ch03_v1.v1_note, driver=f"{ch03_v1.__name__}:drive_v1_schedule", call=ch03_v1.v1_call),
]}
SPECS.update(ch03_order.SPECS)   # mlfq_level: the exercise on the half of a request's work not known on arrival

_DEFAULTS = {"step_time": {"chunks": (), "decodes": (), "overhead_s": OVERHEAD_S},
             "max_chunk": {"prefix": 0, "overhead_s": OVERHEAD_S}}
_PLAIN = {**spec.model_and_gpu(), "chunks": lambda v: [(int(c), int(p)) for c, p in v],
          "decodes": lambda v: [int(x) for x in v]}


def case(name: str, *args, **kwargs) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it: every parameter in order,
    defaults filled in, a model or GPU as its fields, chunks as (tokens, prefix) pairs, decodes as a list. The
    table's fixed cases are made the same way, so a visible assert's input finds its pitfalls in the atlas."""
    return spec.plain_case(SPECS, name, args, kwargs, _DEFAULTS, _PLAIN)


# ------------------------------------------------------------------------------------------------
# scheduling scenarios: the simulator's state before each step of a reference run


@dataclass(frozen=True)
class Scenario:
    label: str
    arrival_s: tuple[float, ...]
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    budget: int
    max_num_seqs: int
    kv: int


_ABC = ((0.0, 0.0, 0.0), (6, 5, 3), (4, 4, 4))
VISIBLE_SCENARIOS = (   # the visible asserts' workloads
    Scenario("requests A/B/C (0, 1, 2), budget 8", *_ABC, 8, 8, 1000),
    Scenario("requests A/B/C with 20 tokens of KV (a preemption)", *_ABC, 8, 8, 20),
    # three chats decode when a 40-token prompt arrives: each step is 3 decodes + a 13-token chunk
    Scenario("three decoders and a long prompt", (0.0, 0.0, 0.0, 0.02), (4, 4, 4, 40), (12, 12, 12, 3), 16, 8, 1000),
)


def scenario_states(sc: Scenario) -> list[tuple[dict, dict]]:
    """(policy, state) before every step of MixedBudget's run of ``sc`` (Llama-3-8B on an H100 prices the steps,
    which only decides when later requests join)."""
    policy, states = MixedBudget(sc.budget, sc.max_num_seqs), []

    def record(state):
        states.append(state_fields(state, f"step {len(states)} of '{sc.label}'"))
        return policy.schedule(state)

    recorder = types.SimpleNamespace(name="recorder", schedule=record)
    simulate(Requests(np.array(sc.arrival_s), np.array(sc.prompt), np.array(sc.output)), recorder, LLAMA3_8B,
             H100_SXM, kv_capacity_tokens=sc.kv)
    limits = {"max_num_batched_tokens": sc.budget, "max_num_seqs": sc.max_num_seqs}
    return [(limits, s) for s in states]


@functools.cache
def _visible_states() -> tuple:
    return tuple(s for sc in VISIBLE_SCENARIOS for s in scenario_states(sc))


def diagnose(fn, *args, name: str | None = None, **kwargs) -> str:
    """What is wrong with ``fn(*args, **kwargs)`` in the learner's terms (a visible assert's message), or a note
    that this input is handled correctly. ``schedule`` takes no input here: it is tried on every step of the
    visible asserts' scenarios. Never raises."""
    name = name or getattr(fn, "__name__", "")
    if name not in SPECS:
        return f"{name} gave an unexpected result"
    atlas = spec.atlas(ASSIGNMENT)
    if name == "schedule" and not args and not kwargs:
        msgs = (spec.diagnose(SPECS, atlas, fn, state, name) for state in _visible_states())
        return next((m for m in msgs if not m.endswith("is correct on this input")),
                    "schedule agrees with MixedBudget on every step of these scenarios: compare your code with the "
                    "rule the assert states")
    try:
        args = case(name, *args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a message, whatever the assert passed
        return f"{name}: the assert's arguments could not be read ({type(e).__name__}: {e})"
    return spec.diagnose(SPECS, atlas, fn, args, name)
