"""Driving the asynchronous scheduler with one step in flight: `run_async` schedules step n+1, takes step n's
tokens, then runs n+1; `walk` shows the same run as table rows; `trace_of` turns a run into plain data.

>>> from servelab.engine.driver import expected
>>> sch = AsyncScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16, max_num_seqs=4)
>>> a = Sequence([1, 2, 3], SamplingParams(max_tokens=3), name="A")
>>> sch.add(a)
>>> steps = run_async(sch)
>>> a.completion_token_ids == expected([1, 2, 3], 3), [s.kind for s in steps], sch.wasted_slots
(True, ['P', 'D', 'D'], 0)
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.schedulers.async_scheduler import AsyncScheduler, SamplingParams, Sequence, Step  # noqa: F401 - examples

__all__ = ["fake_model", "run_async", "trace_of", "walk"]


def fake_model(step: Step) -> list[int | None]:
    """servelab.engine.driver's fake model, on a step: a hash of the sequence's tokens up to the last one this step
    computes (None where the step samples nothing). By the time step n+1 runs its placeholders are filled in."""
    return [(sum(seq.token_ids[:start + n]) * 31 + 7) % 1000 if sample else None
            for seq, start, n, sample in zip(step.seqs, step.starts, step.num_scheduled, step.samples)]


def run_async(scheduler: AsyncScheduler, model: Callable[[Step], list] = fake_model,
              max_steps: int = 100_000, in_flight: Step | None = None) -> list[Step]:
    """Drive `scheduler` with one step in flight: schedule step n+1, then take step n's tokens, then run n+1.
    `in_flight` continues a run whose last step was scheduled by hand and not run yet (it runs first).
    Returns the steps in the order they ran."""
    steps = []
    if in_flight is not None:
        in_flight.tokens = model(in_flight)
    while in_flight is not None or not scheduler.is_finished():
        if len(steps) >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        ahead = scheduler.schedule() if not scheduler.is_finished() else None
        if in_flight is not None:
            scheduler.postprocess(in_flight)
        if ahead is not None:
            ahead.tokens = model(ahead)
            steps.append(ahead)
        in_flight = ahead
    return steps


def trace_of(steps: list[Step]) -> list[list[list]]:
    """A run's steps as plain data: each step a list of slots [name, first position, tokens computed, token
    sampled or None] (what `wasted_work` reads)."""
    return [[[seq.name, start, n, token if sample else None]
             for seq, start, n, sample, token in zip(st.seqs, st.starts, st.num_scheduled, st.samples, st.tokens)]
            for st in steps]


def walk(scheduler: AsyncScheduler, model: Callable[[Step], list] = fake_model, max_steps: int = 100) -> list[dict]:
    """`run_async`, step by step, as rows for a table: what schedule(n+1) saw and scheduled (a slot whose input
    is a placeholder marked '?'), then what postprocess(n) filled in and who finished."""
    rows, in_flight = [], None
    while in_flight is not None or not scheduler.is_finished():
        if len(rows) >= max_steps:
            raise RuntimeError(f"not finished after {max_steps} steps")
        ahead = scheduler.schedule() if not scheduler.is_finished() else None
        row = {"scheduled": "-" if ahead is None else f"{ahead.index} {ahead.kind}: " + ", ".join(
            f"{s.name}@{st}{'?' if not ahead.is_prefill and st >= len(s) else ''}"
            for s, st in zip(ahead.seqs, ahead.starts)),
            "placeholders": ", ".join(f"{s.name}:{s.num_placeholders}" for s in (*scheduler.running,
                                                                            *scheduler.waiting))}
        before = scheduler.wasted_slots
        if in_flight is not None:
            gone = {id(s) for s in in_flight.seqs if s.is_finished}     # stopped before: its token is dropped
            done = scheduler.postprocess(in_flight)
            row["filled"] = f"{in_flight.index}: " + ", ".join(
                f"{s.name}={t}{' (dropped)' if id(s) in gone else ''}"
                for s, t, smp in zip(in_flight.seqs, in_flight.tokens, in_flight.samples) if smp)
            row["finished"] = ", ".join(s.name for s in done) or "-"
        else:
            row["filled"], row["finished"] = "-", "-"
        row["wasted"] = scheduler.wasted_slots - before
        if ahead is not None:
            ahead.tokens = model(ahead)
        rows.append(row)
        in_flight = ahead
    return rows
