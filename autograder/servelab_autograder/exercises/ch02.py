"""Chapter 02's exercises as the visible tests and the grader both see them: nano-vllm's scheduler, piece by piece.

Every exercise is a method of a stateful object, so each is **driven**: a case is a scheduler's state as plain data
(``nanovllm_state.snapshot``), taken from a run of nano-vllm's scheduler (the reference) through a scenario
(``ch02_scenarios``) at the moment it calls that method (``nanovllm_record.record``); the driver (``drive_*``)
builds a scheduler in that state, calls the learner's method once, and returns what it returned and the state it
left, as plain data. The grader runs the same driver with the reference and compares.

While ``schedule`` runs it calls ``preempt`` and ``block_manager.can_allocate``, two other exercises whose
references the grading sandbox does not have. The driver answers those calls from a **replay** of the reference
run (``nanovllm_record.with_replay``, the engine of ``replay``); a call the reference never made in that state is
reported (``diverged``). Nothing here can preempt or look up the cache on an input of its own.

:data:`SPECS` holds each exercise (its driver, how a result is read and shown); :func:`diagnose` is a visible
assert's message; :func:`compare_scheduler` runs the learner's whole Scheduler on the chapter's workloads.
The hidden cases and the verdicts are the grader's (``servelab_autograder.judge.checks.ch02``).
"""

from __future__ import annotations

import numbers

from servelab.engine.driver import fake_model
from servelab.schedulers import scheduler as ref
from servelab.schedulers.scheduler import BlockManager, Scheduler, Sequence
from servelab_autograder.exercises import spec
from servelab_autograder.exercises.ch02_drills import DRILLS, drill_numbers  # noqa: F401 - the notebook's names
from servelab_autograder.exercises.ch02_scenarios import (  # noqa: F401 - the names other modules find here
    abc_run,
    cache_scenarios,
    cases_of,
    pitfall_scenarios,
    rule_cases,
    scenario,
    scheduler_scenarios,
    tight_memory_run,
    visible_scenarios,
    with_cache,
)
from servelab_autograder.exercises.nanovllm_record import (  # noqa: F401 - the names other modules find here
    MAX_STEPS,
    add_due,
    arrivals,
    can_allocate_key,
    preempt_key,
    record,
    with_replay,
)
from servelab_autograder.exercises.nanovllm_state import SHORT as _short
from servelab_autograder.exercises.nanovllm_state import (  # noqa: F401 - the names other modules find here
    bm_state,
    build,
    first_difference,
    name_of,
    new_bm,
    plain_list,
    plain_value,
    plural,
    queues_text,
    seq_state,
    snapshot,
    state_text,
)
from servelab_autograder.exercises.replay import Diverged
from servelab_autograder.exercises.spec import Shape, Spec

ASSIGNMENT = "ch02_nanovllm_scheduler"
_with_replay = with_replay     # the name the tests use


# ------------------------------------------------------------------------------------------------
# drivers: one call of the learner's method on a state, the result and the state after as plain data


def _batch(result, seqs: dict) -> tuple[list | None, str | None]:
    known = {id(s) for s in seqs.values()}
    if not isinstance(result, list):
        return None, f"returned {type(result).__name__} {_short.repr(result)} as its batch; return a list of sequences"
    if any(id(s) not in known for s in result):
        return None, "returned something that is not one of the scheduler's sequences in its batch"
    return [[s.name, plain_value(s.num_scheduled_tokens)] for s in result], None


def drive_preempt(fn, where: str, state: dict, name: str) -> dict:
    sch, seqs = build(state)
    fn(sch, seqs[name])
    return {"state": snapshot(sch, seqs)}


def drive_schedule(fn, where: str, state: dict, replay: dict) -> dict:
    sch, seqs = build(state)
    with_replay(sch, seqs, replay)
    try:
        result = fn(sch)
    except Diverged as d:
        return {"diverged": str(d), "state": snapshot(sch, seqs)}
    out: dict = {"state": snapshot(sch, seqs)}
    if not isinstance(result, tuple) or len(result) != 2:
        out["problem"] = f"returned {_short.repr(result)}; it must return a tuple (list of sequences, is_prefill)"
        return out
    out["batch"], problem = _batch(result[0], seqs)
    if problem:
        out["problem"] = problem
    elif not isinstance(result[1], bool):
        out["problem"] = f"returned is_prefill={_short.repr(result[1])}; it must be True or False"
    out["is_prefill"] = plain_value(result[1])
    return out


def drive_postprocess(fn, where: str, state: dict, batch: list, token_ids: list, is_prefill: bool) -> dict:
    sch, seqs = build(state)
    finished = fn(sch, [seqs[n] for n in batch], list(token_ids), is_prefill)
    out: dict = {"state": snapshot(sch, seqs)}
    if not isinstance(finished, list) or any(not isinstance(s, Sequence) for s in finished):
        out["problem"] = (f"returned {_short.repr(finished)}; it must return the list of sequences that finished "
                          "this step (an empty list when none did)")
    else:
        out["finished"] = [s.name for s in finished]
    return out


def drive_can_allocate(fn, where: str, bm: dict, tokens: list) -> dict:
    manager = new_bm(bm)
    seq = Sequence(list(tokens), name="S", block_size=bm["block_size"])
    got = fn(manager, seq)
    out: dict = {"state": bm_state(manager)}
    if isinstance(got, bool) or not isinstance(got, numbers.Integral):
        out["problem"] = f"returned {_short.repr(got)}; return an int (the number of cached blocks, or -1)"
    else:
        out["result"] = int(got)
    return out


def drive_scheduler(cls, where: str, scenario: dict, replay: dict) -> dict:
    """The learner's whole Scheduler class through a scenario: the state after every schedule() and every
    postprocess(); the block manager's can_allocate is the reference run's replay."""
    config = scenario["config"]
    sch = cls(**config)
    seqs: dict = {}
    with_replay(sch, seqs, replay, preempt=False)
    pending, trace = arrivals(scenario), []

    def end(**more) -> dict:
        generated = {n: plain_list(s.token_ids[s.num_prompt_tokens:]) for n, s in seqs.items()}
        return {"trace": trace, "generated": generated, **more}

    for steps in range(MAX_STEPS):
        add_due(sch, seqs, pending, steps)
        if not pending and sch.is_finished():
            return end()
        try:
            result = sch.schedule()
        except Diverged as d:
            return end(diverged=str(d))
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - part of the run: nano-vllm's would not raise here
            return end(problem=f"schedule() raised {type(e).__name__}: {e}")
        if not isinstance(result, tuple) or len(result) != 2:
            return end(problem=f"schedule() returned {_short.repr(result)}; it must return a tuple (list of "
                               "sequences, is_prefill)")
        batch, problem = _batch(result[0], seqs)
        if problem:
            return end(problem=f"schedule() {problem}")
        picked, is_prefill = result
        trace.append({"step": steps, "batch": batch, "is_prefill": plain_value(is_prefill),
                      "state": snapshot(sch, seqs, tokens=False)})
        try:
            finished = sch.postprocess(picked, fake_model(picked), is_prefill)
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            return end(problem=f"postprocess() raised {type(e).__name__}: {e}")
        trace.append({"step": steps, "finished": [name_of(s) for s in finished] if isinstance(finished, list)
                      else _short.repr(finished), "state": snapshot(sch, seqs, tokens=False)})
    return end(problem=f"the scenario ran {MAX_STEPS} steps without finishing")


# ------------------------------------------------------------------------------------------------
# reading and showing results


def _batch_text(batch, is_prefill) -> str:
    kind = "prefill" if is_prefill is True else "decode" if is_prefill is False else f"is_prefill={is_prefill}"
    return f"{kind} {' '.join(f'{n}:{t}' for n, t in batch) if batch else 'nothing'}"


def _norm(keys: tuple[str, ...]):
    def norm(raw, args):
        if not isinstance(raw, dict) or "state" not in raw:
            raise Shape(f"the driver returned {_short.repr(raw)}")
        if "problem" in raw:
            raise Shape(str(raw["problem"]))
        return {k: raw[k] for k in ("diverged", "state", *keys) if k in raw}
    return norm


def _where(args) -> str:
    return str(args[0])


def _show_schedule(v: dict) -> str:
    if "diverged" in v:
        return f"(it called {v['diverged']} in a state nano-vllm's schedule never calls it in)"
    return _batch_text(v["batch"], v["is_prefill"])


def _note(args, got, want) -> str:
    if "diverged" in got:
        return f"\nBefore the call: {state_text(args[1]) if 'seqs' in args[1] else ''}".rstrip()
    body = None
    if "batch" in want and (got.get("batch"), got.get("is_prefill")) != (want["batch"], want["is_prefill"]):
        body = f"the batch is {_show_schedule(got)}; nano-vllm's is {_show_schedule(want)}"
    for k in ("finished", "result"):
        if k in want and got.get(k) != want[k]:
            body = f"it returned {got.get(k)}; nano-vllm's returns {want[k]}"
    body = body or first_difference(got["state"], want["state"])
    before = args[1] if isinstance(args[1], dict) and "seqs" in args[1] else None
    lines = [f"\nFirst difference: {body}"]
    if before is not None:
        lines.append(f"Before the call: {state_text(before)}")
        lines.append(f"After it, yours: {queues_text(got['state'])}; nano-vllm's: {queues_text(want['state'])}")
    return "\n".join(lines)


def _rule_note(args, got, want) -> str:
    n, bs = args
    pos = n - 1
    return (f" In decode the newest token sits at position {pos} (0-based); block {pos // bs} holds positions "
            f"{pos // bs * bs}..{pos // bs * bs + bs - 1}, so this token {'opens' if want else 'does not open'} "
            f"a block.")


def _bool(raw, args):
    if not isinstance(raw, bool):
        raise Shape(f"it is a {type(raw).__name__}; return True or False")
    return raw


def _can_allocate_call(args) -> str:
    where, bm, tokens = args
    return (f"can_allocate(S) at {where}: S has {plural(len(tokens), 'token')} {_short.repr(tokens)} in blocks of "
            f"{bm['block_size']}, free list {bm['free']}")


def _can_allocate_note(args, got, want) -> str:
    where, bm, tokens = args
    if "result" in got and got["state"] == want["state"]:
        return "\n" + cache_text(bm, tokens)
    return _note(args, got, want)


def cache_text(bm: dict, tokens: list) -> str:
    """Which of the sequence's blocks the cache holds, block by block (what a correct lookup sees)."""
    manager = new_bm(bm)
    seq = Sequence(list(tokens), name="S", block_size=bm["block_size"])
    lines, h = [], -1
    for i in range(seq.num_blocks):
        toks = seq.block(i)
        if i == seq.num_blocks - 1:
            lines.append(f"    block {i} {toks}: the last block")
            break
        h = manager.compute_hash(toks, h)
        bid = manager.hash_to_block_id.get(h, -1)
        if bid == -1:
            lines.append(f"    block {i} {toks}: its chained hash is not in the cache (the lookup stops here)")
            break
        if manager.blocks[bid].token_ids != toks:
            lines.append(f"    block {i} {toks}: its chained hash maps to physical block {bid}, which holds "
                         f"{manager.blocks[bid].token_ids} (a hash collision: not a hit; the lookup stops here)")
            break
        where = "in use" if bid in manager.used_block_ids else "freed, still hashed"
        lines.append(f"    block {i} {toks}: cached in physical block {bid} ({where})")
    return "\n".join(lines)


def _scheduler_norm(raw, args):
    if not isinstance(raw, dict) or "trace" not in raw:
        raise Shape(f"the driver returned {_short.repr(raw)}")
    return raw


def _show_run(v: dict) -> str:
    return f"a run of {len(v['trace']) // 2} steps"


def _scheduler_note(args, got, want) -> str:
    for mine, theirs in zip(got["trace"], want["trace"]):
        if mine != theirs:
            phase = "schedule()" if "batch" in theirs else "postprocess()"
            batch = (mine.get("batch"), mine.get("is_prefill"))
            if "batch" in theirs and batch != (theirs["batch"], theirs["is_prefill"]):
                body = f"{phase} returned {_batch_text(mine.get('batch'), mine.get('is_prefill'))}; nano-vllm's " \
                       f"schedules {_batch_text(theirs['batch'], theirs['is_prefill'])}"
            elif "finished" in theirs and mine.get("finished") != theirs["finished"]:
                body = f"{phase} returned {mine.get('finished')}; nano-vllm's returns {theirs['finished']}"
            else:
                body = f"after {phase}: {first_difference(mine['state'], theirs['state'])}"
            return (f"\nYour Scheduler differs from nano-vllm's at step {theirs['step']}: {body}\n"
                    f"  yours:     {queues_text(mine['state'])}\n  nano-vllm: {queues_text(theirs['state'])}")
    for k in ("problem", "diverged"):
        if k in got:
            return f"\nAfter {len(got['trace']) // 2} steps that match: {got[k]}"
    if len(got["trace"]) != len(want["trace"]):
        return f"\nYour run takes {len(got['trace']) // 2} steps; nano-vllm's takes {len(want['trace']) // 2}."
    for name, tokens in want["generated"].items():
        if got["generated"].get(name) != tokens:
            return f"\n{name} generated {_short.repr(got['generated'].get(name))}; nano-vllm's {_short.repr(tokens)}"
    return ""


def _at(args) -> str:
    return f" at {args[0]}"


SPECS = {s.name: s for s in [
    Spec("needs_new_block", ("seq_len", "block_size"), ref.needs_new_block, _bool, note=_rule_note),
    Spec("preempt", ("where", "state", "name"), Scheduler.preempt, _norm(()), lambda v: "the state above",
         driver=f"{__name__}:drive_preempt", note=_note,
         call=lambda a: f"preempt({a[2]}){_at(a)} (the caller took {a[2]} off running)"),
    Spec("schedule", ("where", "state", "replay"), Scheduler.schedule, _norm(("batch", "is_prefill")),
         _show_schedule, driver=f"{__name__}:drive_schedule", note=_note, call=lambda a: f"schedule(){_at(a)}"),
    Spec("postprocess", ("where", "state", "batch", "token_ids", "is_prefill"), Scheduler.postprocess,
         _norm(("finished",)), lambda v: f"finished {v.get('finished')}", driver=f"{__name__}:drive_postprocess",
         note=_note, call=lambda a: f"postprocess([{', '.join(a[2])}], {a[3]}, is_prefill={a[4]}){_at(a)}"),
    Spec("can_allocate", ("where", "bm", "tokens"), BlockManager.can_allocate, _norm(("result",)),
         lambda v: str(v.get("result")), driver=f"{__name__}:drive_can_allocate", note=_can_allocate_note,
         call=_can_allocate_call),
    Spec("Scheduler", ("where", "scenario", "replay"), Scheduler, _scheduler_norm, _show_run,
         driver=f"{__name__}:drive_scheduler", note=_scheduler_note,
         call=lambda a: f"your Scheduler on the scenario '{a[0]}'"),
]}


VISIBLE = {"needs_new_block": lambda: rule_cases((4, 1, 2, 3, 256)),
           "Scheduler": lambda: cases_of("Scheduler", scheduler_scenarios())}


def visible_cases(name: str) -> list[tuple]:
    return VISIBLE[name]() if name in VISIBLE else cases_of(name, visible_scenarios())


def diagnose(exercise: str, fn) -> str:
    """What is wrong with the learner's ``fn`` (their method, or their Scheduler class for ``"Scheduler"``) on
    the chapter's workloads, in their terms, for a visible assert's message. Never raises."""
    return spec.diagnose_cases(SPECS, ASSIGNMENT, fn, exercise, lambda: visible_cases(exercise), exercise,
                               "nano-vllm's")


def compare_scheduler(scheduler_class) -> None:
    """The learner's whole Scheduler step by step against nano-vllm's on the chapter's workloads (prefix caching
    off); raises AssertionError naming the first step that differs."""
    msg = diagnose("Scheduler", scheduler_class)
    if not msg.startswith("Scheduler agrees"):
        raise AssertionError(msg)


__all__ = ["ASSIGNMENT", "SPECS", "compare_scheduler", "diagnose", "record", "scenario", "snapshot"]
