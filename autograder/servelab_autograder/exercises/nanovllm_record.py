"""Chapter 02's reference runs and their replay: nano-vllm's scheduler through a scenario of requests.

:func:`record` runs the reference scheduler through a scenario (``ch02.scenario``) and keeps every call of each
exercise with the state it was made in (``nanovllm_state.snapshot``); each ``schedule()`` call gets, in its frame
(``replay.Recording``), the answers to the calls it made of ``preempt`` (keyed by the sequence, the queues and the
blocks: :func:`preempt_key`, with the state it left) and of ``block_manager.can_allocate`` (keyed by the tokens and
the blocks: :func:`can_allocate_key`). :func:`with_replay` puts those answers in place of a scheduler's own
methods in the learner's kernel; a call the reference never made in that state raises ``replay.Diverged``.
"""

from __future__ import annotations

from servelab.engine.driver import fake_model
from servelab.schedulers.scheduler import BlockManager, SamplingParams, Scheduler, Sequence
from servelab_autograder.exercises.nanovllm_state import (
    bm_state,
    name_of,
    plain_list,
    seq_state,
    set_bm,
    set_seq,
    snapshot,
)
from servelab_autograder.exercises.replay import Recording, Replay, key, once_per_workload

MAX_STEPS = 2000          # more steps than any case needs
CALLED = ("preempt", "can_allocate")   # what schedule() calls of the other exercises: a frame's tables, in order


# ------------------------------------------------------------------------------------------------
# replaying the reference's calls of the other exercises (the learner's kernel)


def preempt_key(sch: Scheduler, seq: Sequence) -> str:
    """What a preempt call depends on: the sequence, the queues and the blocks (not the rest of the batch)."""
    return key((name_of(seq), seq_state(seq), [name_of(s) for s in sch.waiting], [name_of(s) for s in sch.running],
                bm_state(sch.block_manager)))


def can_allocate_key(bm: BlockManager, seq: Sequence) -> str:
    return key((plain_list(seq.token_ids), bm_state(bm)))


def with_replay(sch: Scheduler, seqs: dict, replay: dict, preempt: bool = True) -> Replay:
    """Answer ``sch``'s calls of preempt (unless ``preempt`` is False: the whole class's own) and of its block
    manager's can_allocate from ``replay`` (a frame's tables)."""
    answers, bm = Replay(replay), sch.block_manager

    def preempt_(seq):
        entry = answers.get("preempt", preempt_key(sch, seq))
        if entry is None:
            answers.diverge(f"preempt({name_of(seq)})")
        after = entry["after"]
        set_seq(seq, after["seq"])
        set_bm(sch.block_manager, after["bm"])
        for queue, names in ((sch.waiting, after["waiting"]), (sch.running, after["running"])):
            queue.clear()
            queue.extend(seqs[n] for n in names)

    def can_allocate(seq):
        entry = answers.get("can_allocate", can_allocate_key(bm, seq))
        if entry is None:
            answers.diverge(f"can_allocate({name_of(seq)})")
        return entry["result"]

    if preempt:
        sch.preempt = preempt_
    bm.can_allocate = can_allocate
    return answers


# ------------------------------------------------------------------------------------------------
# a scenario's requests arriving, and the reference's runs (the learner's lab and the grader; never the sandbox)


def arrivals(scenario: dict) -> dict[int, list]:
    return {step: [list(r) for r in reqs] for step, reqs in scenario["arrivals"]}


def add_due(sch: Scheduler, seqs: dict, pending: dict, steps: int) -> None:
    """Add the requests due before this step (as Engine.run does: an idle scheduler takes the next ones at once)."""
    due = [k for k in pending if k <= steps]
    if not due and pending and sch.is_finished():
        due = [min(pending)]
    for k in sorted(due):
        for name, prompt, max_tokens, ignore_eos in pending.pop(k):
            seq = Sequence(list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos), name=name)
            sch.add(seq)
            seqs[name] = seq


@once_per_workload
def record(sc: dict) -> dict | None:
    """A run of the reference through scenario ``sc``: every call of each exercise with the state it was made in
    (the cases), and the replay each schedule() call needs. None when the requests do not fit. Made once."""
    sch = Scheduler(**sc["config"])
    seqs: dict = {}
    rec = Recording(("schedule", "preempt", "postprocess", "can_allocate"))
    where = ""
    real_preempt, real_can_allocate = sch.preempt, sch.block_manager.can_allocate

    def preempt(seq):
        at, before = preempt_key(sch, seq), snapshot(sch, seqs)
        rec.cases["preempt"].append((f"{where}, preempting {seq.name}", before, seq.name))
        real_preempt(seq)
        rec.note("preempt", at, {"after": {"seq": seq_state(seq), "bm": bm_state(sch.block_manager),
                                           "waiting": [s.name for s in sch.waiting],
                                           "running": [s.name for s in sch.running]}})

    def can_allocate(seq):
        result = real_can_allocate(seq)
        rec.note("can_allocate", can_allocate_key(sch.block_manager, seq), {"result": result})
        if sch.block_manager.enable_prefix_caching:
            rec.cases["can_allocate"].append((f"{where}, admitting {seq.name}", bm_state(sch.block_manager),
                                              list(seq.token_ids)))
        return result

    sch.preempt, sch.block_manager.can_allocate = preempt, can_allocate
    pending = arrivals(sc)
    whole = {"preempt": {}, "can_allocate": {}}
    for steps in range(MAX_STEPS):
        add_due(sch, seqs, pending, steps)
        if not pending and sch.is_finished():
            return {**rec.cases, "run": (sc["label"], sc, whole)}
        where = f"step {steps} of '{sc['label']}'"
        before = snapshot(sch, seqs)
        with rec.frame("schedule()", CALLED) as frame:
            try:
                picked, is_prefill = sch.schedule()
            except RuntimeError:
                return None
        rec.cases["schedule"].append((where, before, frame.tables))
        whole["can_allocate"].update(frame.tables["can_allocate"])
        tokens = fake_model(picked)
        rec.cases["postprocess"].append((where, snapshot(sch, seqs), [s.name for s in picked], tokens, is_prefill))
        sch.postprocess(picked, tokens, is_prefill)
    return None


__all__ = ["CALLED", "MAX_STEPS", "add_due", "arrivals", "can_allocate_key", "preempt_key", "record", "with_replay"]
