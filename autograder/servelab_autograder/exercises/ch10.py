"""Chapter 10's exercises as the visible tests and the grader both see them (``_grade`` in the notebook).

``postprocess`` is a method of the asynchronous scheduler (:class:`servelab.schedulers.async_scheduler.AsyncScheduler`),
so it is **driven**: a case is the scheduler's state as plain data (:func:`snapshot`: chapter 02's state of the
nano-vllm scheduler plus each sequence's placeholders, finished KV, hashed blocks and preemption count, and the waste
counters) and the step whose tokens have arrived (:func:`step_data`), recorded from a run of the reference at the
moment it calls ``postprocess``. The driver (:func:`drive_postprocess`) builds a scheduler in that state, calls the
learner's method once and returns what it returned and the state it left, as plain data; the grader runs the same
driver with the reference. ``postprocess`` calls no other exercise, so nothing is replayed.

``wasted_work`` (a trace as plain data) and ``overlap_speedup`` (two numbers) are plain functions.

:data:`SPECS` holds each exercise; :func:`diagnose` is a visible assert's message. The hidden cases and the
verdicts are the grader's (``servelab_autograder.judge.checks.ch10``).
"""

from __future__ import annotations

import math
import numbers

from servelab.engine import asynchronous
from servelab.schedulers import async_scheduler as ref
from servelab.schedulers.async_scheduler import AsyncScheduler, Step
from servelab.schedulers.scheduler import SamplingParams, Sequence
from servelab_autograder.exercises import common, nanovllm_state, spec, variants
from servelab_autograder.exercises.nanovllm_state import plain_value as _plain
from servelab_autograder.exercises.replay import once_per_workload
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch10_async_scheduling"
VOCAB, EOS = 10, 3        # the recording model's small vocabulary: end-of-sequence comes up often
MAX_STEPS = 500
_short = nanovllm_state.SHORT


# ------------------------------------------------------------------------------------------------
# state as plain data


def snapshot(sch: AsyncScheduler, seqs: dict) -> dict:
    """Chapter 02's state of the scheduler, plus what scheduling ahead adds: per sequence its placeholders in
    flight, KV finished, hashed blocks, preemptions and whether its last step took a block; the waste counters."""
    extra = {n: {"placeholders": _plain(getattr(s, "num_placeholders", None)),
                 "done": _plain(getattr(s, "num_done_tokens", None)),
                 "hashed": _plain(getattr(s, "num_hashed_blocks", None)),
                 "preemptions": _plain(getattr(s, "num_preemptions", None)),
                 "new_block": _plain(getattr(s, "new_block_last_step", None))} for n, s in seqs.items()}
    return {"base": nanovllm_state.snapshot(sch, seqs), "async": extra,
            "wasted_slots": _plain(sch.wasted_slots), "wasted_blocks": _plain(sch.wasted_blocks),
            "num_steps": _plain(sch.num_steps)}


def build(state: dict) -> tuple[AsyncScheduler, dict]:
    """An AsyncScheduler and its sequences, by name, in ``state``."""
    sch, seqs = nanovllm_state.build(state["base"], cls=AsyncScheduler)
    for name, st in state["async"].items():
        s = seqs[name]
        s.num_placeholders, s.num_done_tokens = st["placeholders"], st["done"]
        s.num_hashed_blocks, s.num_preemptions = st["hashed"], st["preemptions"]
        s.new_block_last_step = st["new_block"]
    sch.wasted_slots, sch.wasted_blocks, sch.num_steps = state["wasted_slots"], state["wasted_blocks"], \
        state["num_steps"]
    return sch, seqs


def step_data(step: Step) -> dict:
    return {"index": step.index, "is_prefill": step.is_prefill, "seqs": [s.name for s in step.seqs],
            "starts": list(step.starts), "num_scheduled": list(step.num_scheduled), "samples": list(step.samples),
            "epochs": list(step.epochs), "tokens": list(step.tokens)}


def new_step(data: dict, seqs: dict) -> Step:
    return Step(data["index"], data["is_prefill"], [seqs[n] for n in data["seqs"]], list(data["starts"]),
                list(data["num_scheduled"]), list(data["samples"]), list(data["epochs"]), list(data["tokens"]))


# ------------------------------------------------------------------------------------------------
# the driver (kernel side)


def drive_postprocess(fn, where: str, state: dict, step: dict) -> dict:
    sch, seqs = build(state)
    try:
        finished = fn(sch, new_step(step, seqs))
    except ValueError:
        if len(step["tokens"]) == len(step["seqs"]):
            raise
        return {"raised": "ValueError"}   # the contract's answer to a step that has not run
    out: dict = {"state": snapshot(sch, seqs)}
    if not isinstance(finished, list) or any(not isinstance(s, Sequence) for s in finished):
        out["problem"] = (f"returned {_short.repr(finished)}; it must return the list of sequences that finished "
                          "(an empty list when none did)")
    else:
        out["finished"] = [s.name for s in finished]
    return out


# ------------------------------------------------------------------------------------------------
# the reference's runs: where postprocess's cases come from


def small_model(step: Step) -> list:
    """The fake model of servelab.schedulers.async_scheduler over a vocabulary of VOCAB tokens."""
    return [None if t is None else t % VOCAB for t in asynchronous.fake_model(step)]


def scenario(label: str, num_blocks: int, block_size: int, budget: int, requests, max_num_seqs: int = 8,
             cache: bool = False, eos: int = EOS) -> dict:
    """``requests``: [(name, prompt, max_tokens, ignore_eos), ...], all there at the start."""
    return {"label": label, "config": {"num_blocks": num_blocks, "block_size": block_size,
                                       "max_num_batched_tokens": budget, "max_num_seqs": max_num_seqs, "eos": eos,
                                       "enable_prefix_caching": cache},
            "requests": [[n, list(p), m, ie] for n, p, m, ie in requests]}


@once_per_workload
def record(sc: dict) -> dict | None:
    """A run of the reference through ``sc``: each postprocess call (where, state before, step), the run's
    trace (``trace_of``) and its waste counters. None when the requests do not fit. Made once."""
    sch = AsyncScheduler(**sc["config"])
    seqs: dict = {}
    try:
        for name, prompt, max_tokens, ignore_eos in sc["requests"]:
            seqs[name] = Sequence(list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos),
                                  name=name)
            sch.add(seqs[name])
    except ValueError:
        return None
    calls, steps, in_flight = [], [], None
    while in_flight is not None or not sch.is_finished():
        if len(steps) > MAX_STEPS:
            return None
        try:
            ahead = sch.schedule() if not sch.is_finished() else None
        except RuntimeError:
            return None
        if in_flight is not None:
            calls.append((f"'{sc['label']}'", snapshot(sch, seqs), step_data(in_flight)))
            sch.postprocess(in_flight)
        if ahead is not None:
            ahead.tokens = small_model(ahead)
            steps.append(ahead)
        in_flight = ahead
    requests = {n: [m, ie] for n, _, m, ie in sc["requests"]}
    return {"postprocess": calls, "trace": asynchronous.trace_of(steps), "requests": requests,
            "waste": [sch.wasted_slots, sch.wasted_blocks]}


def visible_scenarios() -> list[dict]:
    """The chapter's workloads: the worked trace, one per pitfall, chunks, preemption, the prefix cache. With the
    recording model a prompt's tokens soon cycle through 2, 4, 8, 6, so each scenario picks its own eos."""
    return [
        # the walkthrough's: A stops on eos (6) at its third token; B at max_tokens = 1 (its prefill); C ignores
        # eos, samples 6 at its fifth token and stops at max_tokens = 6
        scenario("the worked trace", 8, 4, 16, [("A", [4, 4, 4], 6, False), ("B", [5, 6, 7, 8], 1, False),
                                                ("C", [2, 2], 6, True)], eos=6),
        # A's prompt fills block 0 and its first token is eos: the wasted decode at position 4 opens block 1
        scenario("an eos stop whose wasted decode takes a block", 6, 4, 16,
                 [("A", [1, 2, 3, 5], 6, False), ("B", [2, 2], 3, True)], eos=8),
        # stops at max_tokens only: nothing is wasted
        scenario("max_tokens stops only", 8, 4, 16, [("A", [1, 2, 3], 3, True), ("B", [7, 7], 1, False)], eos=-1),
        # a 10-token prompt in a budget of 4: steps that sample nothing, then an eos stop at the third token
        scenario("a prompt longer than the budget", 8, 4, 4, [("A", list(range(1, 11)), 4, False)], eos=8),
        # B is preempted while its first token is in flight (4 blocks of 2), then stops on eos
        scenario("a preemption with a token in flight", 4, 2, 16, [("A", [1, 2, 3, 4], 3, True),
                                                                   ("B", [4, 5, 6, 7], 3, False)], eos=8),
        scenario("a preemption with a token in flight, prefix caching on", 4, 2, 16,
                 [("A", [1, 2, 3, 4], 3, True), ("B", [4, 5, 6, 7], 3, False)], cache=True, eos=8),
        # a shared prefix, caching on: A and B stop on eos, C at max_tokens
        scenario("a shared prefix, prefix caching on", 12, 2, 8,
                 [("A", [9, 8, 7, 6, 1], 4, False), ("B", [9, 8, 7, 6, 2], 4, False), ("C", [9, 8, 7], 3, False)],
                 cache=True, eos=6),
        # block size 1: every wasted decode opens a block
        scenario("block size 1", 16, 1, 4, [("A", [1, 2, 3], 4, False), ("B", [6, 5], 3, False)], eos=6),
    ]


def cases_of(exercise: str, scenarios) -> list[tuple]:
    """The cases of ``exercise`` ("postprocess" or "wasted_work") from the reference's runs of ``scenarios``."""
    out = []
    for sc in scenarios:
        rec = record(sc)
        if rec is None:
            continue
        if exercise == "postprocess":
            out += [tuple(c) for c in rec["postprocess"]]
        else:
            out.append((rec["trace"], rec["requests"], sc["config"]["eos"], sc["config"]["block_size"]))
    return out


# ------------------------------------------------------------------------------------------------
# reading and showing results

_ASYNC_FIELDS = {"placeholders": "num_placeholders", "done": "num_done_tokens", "hashed": "num_hashed_blocks",
                 "preemptions": "num_preemptions", "new_block": "new_block_last_step"}


def first_difference(got: dict, want: dict) -> str | None:
    for k in ("wasted_slots", "wasted_blocks", "num_steps"):
        if got.get(k) != want[k]:
            return f"self.{k} is {_short.repr(got.get(k))}; the reference's is {want[k]}"
    for name, st in want["async"].items():
        mine = got["async"].get(name, {})
        for field, value in st.items():
            if mine.get(field) != value:
                return f"{name}.{_ASYNC_FIELDS[field]} is {_short.repr(mine.get(field))}; the reference's is {value}"
    diff = nanovllm_state.first_difference(got["base"], want["base"])
    return None if diff is None else diff.replace("nano-vllm's", "the reference's")


def _norm(raw, args):
    if isinstance(raw, dict) and raw.get("raised") == "ValueError":
        return {"raised": "ValueError"}
    if not isinstance(raw, dict) or "state" not in raw:
        raise Shape(f"the driver returned {_short.repr(raw)}")
    if "problem" in raw:
        raise Shape(str(raw["problem"]))
    return {"finished": raw["finished"], "state": raw["state"]}


def _step_text(step: dict) -> str:
    slots = [f"{n}@{s}+{k}{'' if smp else ' (no sample)'}={t}"
             for n, s, k, smp, t in zip(step["seqs"], step["starts"], step["num_scheduled"], step["samples"],
                                        step["tokens"])]
    return f"step {step['index']} ({'prefill' if step['is_prefill'] else 'decode'}): {', '.join(slots)}"


def _before_text(state: dict) -> str:
    seqs = state["base"]["seqs"]
    parts = []
    for name, st in seqs.items():
        a = state["async"][name]
        parts.append(f"{name}: {len(st['tokens'])} tokens, {st['status']}, {a['placeholders']} in flight, "
                     f"{st['max_tokens']} max, ignore_eos={st['ignore_eos']}")
    return "; ".join(parts)


def _postprocess_note(args, got, want) -> str:
    where, state, step = args
    if "raised" in got or "raised" in want:
        return ("\nA step that has not run (fewer tokens than sequences) raises ValueError; any other step does "
                f"not.\nThe step: {_step_text(step)}")
    body = (f"it returned {got['finished']}; the reference returns {want['finished']}"
            if got["finished"] != want["finished"] else first_difference(got["state"], want["state"]))
    return (f"\nFirst difference: {body}\nThe step: {_step_text(step)}\nBefore the call: {_before_text(state)}"
            f"\n(wasted so far: {state['wasted_slots']} slots, {state['wasted_blocks']} blocks)")


def _pair(raw, args) -> list[int]:
    if not isinstance(raw, (tuple, list)) or len(raw) != 2:
        raise Shape("return a pair (wasted slots, wasted blocks)")
    return [common.as_int(x, k, k.split()[1], _short, strict=True)
            for x, k in zip(raw, ("wasted slots", "wasted blocks"))]


def _trace_text(trace) -> str:
    return f"a trace of {len(trace)} steps" if isinstance(trace, list) else _short.repr(trace)


def _wasted_note(args, got, want) -> str:
    trace, requests, eos, bs = args
    stops = []
    count = dict.fromkeys(requests, 0)
    for k, step in enumerate(trace):
        for name, _start, _n, token in step:
            if token is None or name not in count or count[name] < 0:
                continue
            count[name] += 1
            max_tokens, ignore = requests[name]
            if token == eos and not ignore:
                stops.append(f"{name} on eos at step {k}")
                count[name] = -1
            elif count[name] == max_tokens:
                stops.append(f"{name} at max_tokens at step {k}")
                count[name] = -1
    return f"\n  stops: {', '.join(stops) or 'none'}; eos = {eos}, block size {bs}"


def _number(raw, args) -> float:
    return common.as_float(raw, "the result", _short, finite=True)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


def _ms(s) -> str:
    return f"{s * 1e3:.6g} ms" if isinstance(s, numbers.Real) else _short.repr(s)


def _speedup_note(args, got, want) -> str:
    cpu, gpu = args
    return (f"\n  synchronous: {(cpu + gpu) * 1e3:.6g} ms a step (CPU then GPU); overlapped: "
            f"{max(cpu, gpu) * 1e3:.6g} ms (the longer of the two)")


SPECS = {s.name: s for s in [
    Spec("postprocess", ("where", "state", "step"), AsyncScheduler.postprocess, _norm,
         lambda v: "raised ValueError" if "raised" in v else f"finished {v.get('finished')}",
         driver=f"{__name__}:drive_postprocess", note=_postprocess_note,
         call=lambda a: f"postprocess(step {a[2]['index']}) in {a[0]}"),
    Spec("wasted_work", ("trace", "requests", "eos", "block_size"), ref.wasted_work, _pair,
         lambda v: f"({v[0]} slots, {v[1]} blocks)", note=_wasted_note, show_args={"trace": _trace_text}),
    Spec("overlap_speedup", ("cpu_s", "gpu_s"), ref.overlap_speedup, _number, lambda v: f"{v:.6g}x", _close,
         {"cpu_s": _ms, "gpu_s": _ms}, note=_speedup_note),
]}


def visible_cases(name: str) -> list[tuple]:
    return cases_of(name, visible_scenarios())


def diagnose(name: str, fn, *args) -> str:
    """What is wrong with the learner's ``fn`` in their terms, for a visible assert's message: on ``args`` when
    given, else (postprocess, wasted_work) on the chapter's workloads. Never raises."""
    if name not in SPECS:
        return f"{name} gave an unexpected result"
    if args:
        return spec.diagnose(SPECS, spec.atlas(ASSIGNMENT), fn, args, name)
    return spec.diagnose_cases(SPECS, ASSIGNMENT, fn, name, lambda: visible_cases(name), name, "the reference")


__all__ = ["ASSIGNMENT", "SPECS", "build", "diagnose", "record", "scenario", "snapshot"]


# ------------------------------------------------------------------------------------------------
# the drills' numbers, drawn per learner (exercises.variants)

def _stops(rng) -> dict:
    block = rng.choice((8, 16, 32))
    return {"stops": block * rng.randrange(20, 201), "block": block}


DRILLS = (
    variants.Variant("drill_1", {"cpu_ms": 2, "gpu_ms": 6},
                     lambda rng: {"cpu_ms": rng.choice((1, 2, 3, 4)), "gpu_ms": rng.choice((5, 6, 8, 10, 12))},
                     "the throughput gain of overlapping a {cpu_ms} ms CPU part with a {gpu_ms} ms GPU part?"),
    variants.Variant("drill_2", {"cpu_ms": 2, "batch": 64, "context": 1024},
                     # a GPU part short enough that the fixed overhead, wrongly counted in it, shows
                     lambda rng: {"cpu_ms": rng.choice((2, 3)), "batch": rng.choice((16, 32, 64)),
                                  "context": rng.choice((512, 1024))},
                     "the gain for a {cpu_ms} ms CPU part and a decode step of {batch} Llama-3-8B sequences at "
                     "{context:,} tokens on an H100 (its roofline GPU time)?"),
    variants.Variant("drill_3", {"eos_at": 40}, lambda rng: {"eos_at": rng.randrange(10, 151)},
                     "every request stops on eos at its {eos_at}th output token, decoded back to back: what "
                     "percentage of the decode slots is wasted?"),
    variants.Variant("drill_4", {"max_tokens": 40}, lambda rng: {"max_tokens": rng.randrange(10, 201)},
                     "the same, with every request stopping at `max_tokens` = {max_tokens}?"),
    variants.Variant("drill_5", {"gpu_ms": 10, "gain": 1.5},
                     lambda rng: {"gpu_ms": rng.choice((4, 6, 8, 12, 16, 20)), "gain": rng.choice((1.25, 1.5, 1.75))},
                     "with a {gpu_ms} ms GPU step, the CPU time per step (ms) at which overlapping gains exactly "
                     "{gain}x (the smaller answer)?"),
    variants.Variant("drill_6", {"stops": 1600, "block": 16}, _stops,
                     "of {stops:,} eos stops whose positions spread evenly over the {block} offsets of a block (block "
                     "size {block}), how many wasted decodes take a fresh block?"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.cpu_ms`` and so on."""
    return variants.show(DRILLS, who)
